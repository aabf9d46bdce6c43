//! The [`LeaseStore`] trait: the primitives a backend with one lease entry per name supplies.

use std::time::Duration;

use async_trait::async_trait;

use super::claim::{Claim, TryLock};
use crate::lease::{ReleaseOutcome, RenewOutcome};
use crate::wake::WakeSubscription;
use crate::{Capabilities, ChangeFeed, FencingToken, HolderInfo, LockError, LockName, OwnerId};

/// The primitives of a lease-entry backend. Every method is one owner-checked, atomic server
/// operation; none waits for the lock.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// The backend label (`redis`, `postgres`, …).
    fn backend(&self) -> &str;

    /// What the backend promises.
    fn capabilities(&self) -> Capabilities;

    /// One attempt: take the lock `claim.name` for `claim.owner` for `claim.ttl` if it is free,
    /// expired, or already that owner's. A store that keeps the holder's identity with the lease
    /// (`Capabilities::inspect`) stores `claim.holder` too.
    ///
    /// `waiting`: the attempt is made while `acquire` waits (the same owner re-tries until
    /// granted or the wait ends). Such an attempt may leave something behind that the next ones
    /// refresh — a queue place, a writer's claim that holds back new readers so writers are not
    /// starved — and that [`LeaseStore::abandon`] takes back. A single try (`false`) leaves
    /// nothing.
    async fn try_lock(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError>;

    /// Extend `owner`'s lease to `now + ttl` if `owner` still holds it.
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError>;

    /// [`LeaseStore::renew`] for many leases at once, the answers in the order of `leases`
    /// (the renewals of many held leases are gathered into rounds, see `renewals.rs`). By
    /// default the renewals are sent side by side, one request each; stores that can do it in
    /// one statement or one round trip override this.
    async fn renew_many(&self, leases: &[(LockName, OwnerId)], ttl: Duration) -> Vec<Result<RenewOutcome, LockError>> {
        futures::future::join_all(leases.iter().map(|(name, owner)| self.renew(name, *owner, ttl))).await
    }

    /// Claims a grant the server pushed to `owner`'s wait ([`PushedGrant`](crate::backend::PushedGrant)):
    /// extends it to `now + ttl` only if `owner` holds it with `token`. It must never grant
    /// anew: the lease may have been released before this claim arrives, and then it must
    /// change nothing. By default a single try (the owner's own lease is re-granted with its
    /// token) compared with `token`; a try that granted anew (the window had ended and the lock
    /// was free) is released at once, since its token may be below one issued in between. A
    /// store that pushes grants overrides it with one owner- and token-checked renewal.
    async fn claim(
        &self,
        name: &LockName,
        owner: OwnerId,
        token: FencingToken,
        ttl: Duration,
    ) -> Result<RenewOutcome, LockError> {
        match self.try_lock(&Claim::new(name, owner, ttl), false).await? {
            TryLock::Acquired { token: t } if t == token => Ok(RenewOutcome::Renewed),
            TryLock::Acquired { token: other } => {
                tracing::debug!(lock = %name, pushed = token.0, other = other.0, "a claim was granted anew; releasing that grant");
                if let Err(e) = self.release(name, owner).await {
                    tracing::warn!(lock = %name, error = %e, "could not release a grant a late claim made; it ends with its ttl");
                }
                Ok(RenewOutcome::NotOwner)
            }
            TryLock::Held { .. } | TryLock::Quiet { .. } => Ok(RenewOutcome::NotOwner),
        }
    }

    /// Free the lock if `owner` still holds it, and wake waiters.
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError>;

    /// [`LeaseStore::release`] of a lease held with `token`, which is how a lease's own release
    /// comes (a wait's withdrawal has no token). By default the token is not needed; Redlock's
    /// release raises each master's counter to it before leaving the next token there, as the
    /// claim of a pushed grant would, so that a grant never claimed still leaves every master
    /// the same next token.
    async fn release_held(
        &self,
        name: &LockName,
        owner: OwnerId,
        _token: FencingToken,
    ) -> Result<ReleaseOutcome, LockError> {
        self.release(name, owner).await
    }

    /// Free the lock `d` from now if `owner` still holds it (`hold_at_least`): its lease
    /// ends then, which may be sooner than a renewal would leave it. By default a renewal for
    /// `d`; a store whose renewals never shorten a lease overrides it (lock-sql, whose
    /// statements read the clock at their start, so that a renewal that ran late must not set
    /// the end back).
    async fn release_after(&self, name: &LockName, owner: OwnerId, d: Duration) -> Result<ReleaseOutcome, LockError> {
        Ok(self.renew(name, owner, d).await?.as_release())
    }

    /// A wait by `owner` ended without a grant (time-out, error, dropped future): withdraw what
    /// its attempts left behind (owner-checked). Runs in the background; by default nothing.
    async fn abandon(&self, _name: &LockName, _owner: OwnerId) -> Result<(), LockError> {
        Ok(())
    }

    /// Who holds `name` now (docs/contract.md §5.6); `Unsupported` by default.
    async fn inspect(&self, _name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        Err(LockError::Unsupported { backend: self.backend().to_owned(), feature: "inspect" })
    }

    /// The held names starting with `prefix`, at most `limit`, in name order; `Unsupported` by
    /// default.
    async fn list(&self, _prefix: &str, _limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        Err(LockError::Unsupported { backend: self.backend().to_owned(), feature: "list" })
    }

    /// Frees `name` whoever holds it, keeping its fence (docs/contract.md §5.6,
    /// [`DistributedLock::force_release`](crate::DistributedLock::force_release)): the freed holder's token, `None` when it was free.
    /// `Unsupported` by default.
    async fn force_release(&self, _name: &LockName) -> Result<Option<FencingToken>, LockError> {
        Err(LockError::Unsupported { backend: self.backend().to_owned(), feature: "force_release" })
    }

    /// Subscribes to release hints for `name` (before the next attempt, so no release is
    /// missed). `None` means the backend polls.
    async fn subscribe(&self, _name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(None)
    }

    /// Subscribes the wait of `owner` to release hints for `name`: a store that hands the lock
    /// to one queued waiter wakes that waiter only. By default [`LeaseStore::subscribe`].
    async fn subscribe_waiter(&self, name: &LockName, _owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        self.subscribe(name).await
    }

    /// A feed of changes of `name`'s holder for observers ([`DistributedLock::watch_changes`](crate::DistributedLock::watch_changes));
    /// `None` (the default) when the backend does not notify.
    async fn watch_changes(&self, _name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        Ok(None)
    }

    /// Longest sleep between polls (and between fallback re-tries of notified waiters).
    fn max_poll_interval(&self, ttl: Duration) -> Duration {
        (ttl / 4).clamp(Duration::from_millis(20), Duration::from_millis(500))
    }
}
