//! Read-write locks and semaphores for backends with lease entries (Redis, SQL), written once
//! (docs/contract.md §5.2, §5.3).
//!
//! A backend implements [`KindStore`] — one attempt, renewal, release and wake-up subscription
//! of one grant of a given [`LockKind`] — and [`StoreRwLock`] / [`StoreSemaphore`] assemble the
//! traits from it: each side (read, write, permit) is a [`LeaseStore`] over that store, so
//! [`StoreLock`](crate::backend::StoreLock) gives waiting, back-off, time-outs, cancel-safety and the
//! lease watchdog. The rules every such backend shares live here, once: the writer's claim
//! ([`writer_claim`]), the permits check ([`check_permits`]) and the permits-mismatch error
//! ([`permits_mismatch`]).

mod rw;
mod semaphore;

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::lease::{ReleaseOutcome, RenewOutcome};
use crate::store::{LeaseStore, TryLock};
use crate::wake::WakeSubscription;
use crate::{Capabilities, LockError, LockKind, LockName, OwnerId};

pub use rw::StoreRwLock;
pub use semaphore::StoreSemaphore;

/// How long a refused writer's claim holds back new readers (docs/contract.md §5.2): long
/// enough to outlast the writer's re-try interval (a refused writer re-tries within a third of it),
/// short enough that a writer that vanished (a crashed process) delays readers only briefly. A
/// write wait that ends without a grant in a live process withdraws its claim at once
/// ([`LeaseStore::abandon`]).
pub fn writer_claim(ttl: Duration) -> Duration {
    (ttl / 2).clamp(Duration::from_millis(300), Duration::from_secs(2))
}

/// A semaphore needs at least one permit (docs/contract.md §5.3): `permits == 0` is
/// `InvalidOptions`.
pub fn check_permits(permits: u32) -> Result<(), LockError> {
    if permits == 0 {
        return Err(LockError::invalid_options("a semaphore needs at least one permit; ask for permits >= 1"));
    }
    Ok(())
}

/// The error of a caller asking semaphore `name` for `asked` permits while it is in use with
/// `held` (docs/contract.md §5.3).
pub fn permits_mismatch(name: &LockName, held: impl Display, asked: u32) -> LockError {
    LockError::invalid_options(format!(
        "semaphore {name} is in use with {held} permits, not {asked}; every user of a semaphore must ask for the \
         same number of permits"
    ))
}

/// One attempt at a grant of a read-write lock or a semaphore.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct KindAttempt<'a> {
    /// [`LockKind::Read`], [`LockKind::Write`] or [`LockKind::Permit`].
    pub kind: LockKind,
    /// The semaphore's number of permits (≥ 1) for [`LockKind::Permit`]; 0 otherwise.
    pub permits: u32,
    /// The lock's name.
    pub name: &'a LockName,
    /// Who asks (attempts of the same owner are idempotent).
    pub owner: OwnerId,
    /// The lease asked for.
    pub ttl: Duration,
    /// For a waiting writer: how long a refusal leaves a claim that holds back new readers
    /// ([`writer_claim`]); `None`: a refusal leaves nothing.
    pub claim: Option<Duration>,
    /// Made while `acquire` waits (any kind): a store with a waiter queue may register the
    /// owner when refused, and withdraws that in [`KindStore::abandon`]. A single try is `false`
    /// and must leave nothing behind.
    pub waiting: bool,
}

/// One owner's grant of a read-write lock or semaphore, as renewals and releases name it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct KindGrant<'a> {
    /// [`LockKind::Read`], [`LockKind::Write`] or [`LockKind::Permit`].
    pub kind: LockKind,
    /// The lock's name.
    pub name: &'a LockName,
    /// The holder.
    pub owner: OwnerId,
}

/// The sides of a backend's read-write locks and semaphores. Every method is one owner-checked,
/// atomic server operation on one grant of `kind`; none waits. A name used as a read-write lock
/// and as a semaphore is two locks; a name's read and write grants are one read-write lock.
#[async_trait]
pub trait KindStore: Send + Sync + 'static {
    /// The backend label (`redis`, `postgres`, …).
    fn backend(&self) -> &str;

    /// What the backend promises (`rw_lock`, `semaphore`).
    fn capabilities(&self) -> Capabilities;

    /// One attempt: grant if the kind's rule allows — a reader while no writer holds and no
    /// other writer's claim is live, a writer while nobody holds, a permit while fewer than
    /// `permits` hold — or if the grant is already `owner`'s. A refused attempt with a
    /// [`KindAttempt::claim`] leaves the writer's claim (unless another writer's is live). A
    /// semaphore in use with another number of permits is [`permits_mismatch`].
    async fn try_lock(&self, attempt: KindAttempt<'_>) -> Result<TryLock, LockError>;

    /// Extend the grant to `now + ttl` if its owner still holds it.
    async fn renew(&self, grant: KindGrant<'_>, ttl: Duration) -> Result<RenewOutcome, LockError>;

    /// Free the grant if its owner still holds it (a writer's claim goes with a write release)
    /// and wake the waiters it lets in.
    async fn release(&self, grant: KindGrant<'_>) -> Result<ReleaseOutcome, LockError>;

    /// A wait by `grant.owner` for `grant.kind` ended without a grant (time-out, error, dropped
    /// future): withdraw what its attempts left behind. By default a writer's wait releases
    /// (owner-checked), which withdraws its claim; other kinds leave nothing.
    async fn abandon(&self, grant: KindGrant<'_>) -> Result<(), LockError> {
        if grant.kind == LockKind::Write {
            self.release(grant).await?;
        }
        Ok(())
    }

    /// Subscribes to the wake-ups of waiters for `kind` of `name`; `None` means the backend polls.
    async fn subscribe(&self, _kind: LockKind, _name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(None)
    }

    /// Subscribes the wait of `owner` for `kind` of `name`: a store that hands a grant to chosen
    /// queued waiters wakes those only. By default [`KindStore::subscribe`].
    async fn subscribe_waiter(
        &self,
        kind: LockKind,
        name: &LockName,
        _owner: OwnerId,
    ) -> Result<Option<WakeSubscription>, LockError> {
        self.subscribe(kind, name).await
    }
}

/// One side (read, write, or a semaphore of `permits`) of a [`KindStore`] as a [`LeaseStore`].
pub(crate) struct KindSide<B> {
    store: Arc<B>,
    kind: LockKind,
    permits: u32,
}

impl<B> KindSide<B> {
    pub(crate) fn new(store: &Arc<B>, kind: LockKind, permits: u32) -> Self {
        KindSide { store: Arc::clone(store), kind, permits }
    }

    pub(crate) fn store(&self) -> &Arc<B> {
        &self.store
    }
}

impl<B: KindStore> KindSide<B> {
    /// One attempt; a waiting writer's refusal leaves a claim.
    async fn attempt(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
        waiting: bool,
    ) -> Result<TryLock, LockError> {
        let claim = writer_claim(ttl);
        let writer = self.kind == LockKind::Write;
        let attempt = KindAttempt {
            kind: self.kind,
            permits: self.permits,
            name,
            owner,
            ttl,
            claim: (writer && waiting).then_some(claim),
            waiting,
        };
        match self.store.try_lock(attempt).await? {
            // A writer re-tries before the claim lapses, so waiting readers stay held back.
            TryLock::Held { remaining } if writer => {
                Ok(TryLock::Held { remaining: Some(remaining.map_or(claim / 3, |r| r.min(claim / 3))) })
            }
            other => Ok(other),
        }
    }
}

#[async_trait]
impl<B: KindStore> LeaseStore for KindSide<B> {
    fn backend(&self) -> &str {
        self.store.backend()
    }

    /// A single try does not wait, so it leaves no claim that would hold readers back.
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.attempt(name, owner, ttl, false).await
    }

    /// A waiting writer's refused attempt leaves a short claim that holds back new readers.
    async fn try_lock_waiting(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.attempt(name, owner, ttl, true).await
    }

    /// A wait that ended without a grant withdraws what it left at once ([`KindStore::abandon`]:
    /// a writer's claim, a queue place) instead of holding others back until it lapses.
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.store.abandon(KindGrant { kind: self.kind, name, owner }).await
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.store.renew(KindGrant { kind: self.kind, name, owner }, ttl).await
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.store.release(KindGrant { kind: self.kind, name, owner }).await
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.store.subscribe(self.kind, name).await
    }

    async fn subscribe_waiter(&self, name: &LockName, owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        self.store.subscribe_waiter(self.kind, name, owner).await
    }

    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_rules() {
        let ms = Duration::from_millis;
        assert_eq!(writer_claim(ms(100)), ms(300));
        assert_eq!(writer_claim(ms(1000)), ms(500));
        assert_eq!(writer_claim(ms(60_000)), ms(2000));
        assert!(matches!(check_permits(0), Err(LockError::InvalidOptions { .. })));
        assert!(check_permits(1).is_ok());
        let name = LockName::new("encoders").expect("name");
        let e = permits_mismatch(&name, 3, 2);
        assert!(matches!(e, LockError::InvalidOptions { .. }));
        assert!(e.to_string().contains("in use with 3 permits, not 2"), "{e}");
    }
}
