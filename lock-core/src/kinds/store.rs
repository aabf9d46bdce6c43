//! The [`KindStore`] trait: what a backend supplies for its read-write locks and semaphores.

use std::time::Duration;

use async_trait::async_trait;

use crate::lease::{ReleaseOutcome, RenewOutcome};
use crate::store::TryLock;
use crate::wake::WakeSubscription;
use crate::{Capabilities, LockError, LockKind, LockName, OwnerId};

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
    /// ([`writer_claim`](super::rules::writer_claim)); `None`: a refusal leaves nothing.
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
    /// semaphore in use with another number of permits is [`permits_mismatch`](super::rules::permits_mismatch).
    async fn try_lock(&self, attempt: KindAttempt<'_>) -> Result<TryLock, LockError>;

    /// Extend the grant to `now + ttl` if its owner still holds it.
    async fn renew(&self, grant: KindGrant<'_>, ttl: Duration) -> Result<RenewOutcome, LockError>;

    /// Free the grant `d` from now if its owner still holds it (`hold_at_least`;
    /// [`LeaseStore::release_after`](crate::backend::LeaseStore::release_after)). By default a
    /// renewal for `d`.
    async fn release_after(&self, grant: KindGrant<'_>, d: Duration) -> Result<ReleaseOutcome, LockError> {
        Ok(self.renew(grant, d).await?.as_release())
    }

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
