//! Read-write locks and semaphores in the database (docs/contract.md §5.2, §5.3).
//!
//! Each side (read, write, permit) is a small [`LeaseStore`] over the pools and listener of the
//! exclusive [`SqlStore`](crate::SqlStore), so [`StoreLock`] gives waiting, back-off,
//! time-outs, cancel-safety and the lease watchdog. The tables and statements are in the crate
//! docs.

mod base;

pub(crate) use base::Base;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, DistributedRwLock, DistributedSemaphore, Lease, LeaseStore,
    LockError, LockName, OwnerId, ReleaseOutcome, RenewOutcome, StoreLock, TryLock, WakeSubscription,
};

use crate::decide::Side;
use crate::SqlOptions;

/// The read side of a read-write lock.
pub(crate) struct ReadSide(Arc<Base>);
/// The write side of a read-write lock.
pub(crate) struct WriteSide(Arc<Base>);
/// One semaphore size.
pub(crate) struct PermitSide(Arc<Base>, u32);

macro_rules! side_debug {
    ($t:ty) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t)).field("store", &self.0.store).finish()
            }
        }
    };
}
side_debug!(ReadSide);
side_debug!(WriteSide);
side_debug!(PermitSide);

#[async_trait]
impl LeaseStore for ReadSide {
    fn backend(&self) -> &str {
        self.0.store.label()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.0.try_lock(Side::Read, name, owner, ttl, false).await
    }
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.0.renew(Side::Read, name, owner, ttl).await
    }
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.0.release(Side::Read, name, owner).await
    }
    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.0.subscribe(Side::Read, name))
    }
}

#[async_trait]
impl LeaseStore for WriteSide {
    fn backend(&self) -> &str {
        self.0.store.label()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    /// A single try does not wait, so it leaves no claim that would hold readers back.
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.0.try_lock(Side::Write, name, owner, ttl, false).await
    }

    /// A waiting writer's refused attempt leaves a short claim that holds back new readers.
    async fn try_lock_waiting(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.0.try_lock(Side::Write, name, owner, ttl, true).await
    }

    /// A write wait that ended without a grant withdraws its claim at once (owner-checked: the
    /// grant too, if one raced in) instead of holding readers back until the claim lapses.
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.release(name, owner).await.map(|_| ())
    }
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.0.renew(Side::Write, name, owner, ttl).await
    }
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.0.release(Side::Write, name, owner).await
    }
    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.0.subscribe(Side::Write, name))
    }
}

#[async_trait]
impl LeaseStore for PermitSide {
    fn backend(&self) -> &str {
        self.0.store.label()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.0.try_lock(Side::Permit(self.1), name, owner, ttl, false).await
    }
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.0.renew(Side::Permit(self.1), name, owner, ttl).await
    }
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.0.release(Side::Permit(self.1), name, owner).await
    }
    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.0.subscribe(Side::Permit(self.1), name))
    }
}

/// A read-write lock in the database (docs/contract.md §5.2), made by [`connect_rw`](crate::connect_rw).
///
/// Many readers or one writer. A writer that is refused leaves a short claim that makes new
/// readers wait, so readers arriving after a waiting writer do not starve it; waiters are not
/// served in arrival order. Every grant, read or write, has its own lease and a fencing token
/// above every token issued before for this read-write lock.
#[derive(Clone)]
pub struct SqlRwLock {
    read: StoreLock<ReadSide>,
    write: StoreLock<WriteSide>,
}

impl std::fmt::Debug for SqlRwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlRwLock").field("store", &self.read.store().0.store).finish()
    }
}

impl SqlRwLock {
    /// The stores behind the read and the write side (labelled "read" and "write"), for checks
    /// at the store level (the conformance suite's `Fixture::lease_stores`).
    pub fn lease_stores(&self) -> [(&'static str, Arc<dyn LeaseStore>); 2] {
        [
            ("read", Arc::clone(self.read.store()) as Arc<dyn LeaseStore>),
            ("write", Arc::clone(self.write.store()) as Arc<dyn LeaseStore>),
        ]
    }
}

#[async_trait]
impl DistributedRwLock for SqlRwLock {
    fn backend(&self) -> &str {
        self.read.store().0.store.label()
    }

    fn capabilities(&self) -> Capabilities {
        self.read.store().capabilities()
    }

    async fn try_acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.read.try_acquire(name, options).await
    }

    async fn acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.read.acquire(name, options).await
    }

    async fn try_acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.write.try_acquire(name, options).await
    }

    async fn acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.write.acquire(name, options).await
    }
}

/// A semaphore in the database (docs/contract.md §5.3), made by [`connect_semaphore`](crate::connect_semaphore).
///
/// Up to `permits` holders of one name at once, each with its own lease and a fencing token
/// above every token issued before for this semaphore. The number of permits is stored with the
/// semaphore while anyone holds it: a caller asking for a different number gets
/// `InvalidOptions`.
#[derive(Clone)]
pub struct SqlSemaphore {
    base: Arc<Base>,
}

impl std::fmt::Debug for SqlSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSemaphore").field("store", &self.base.store).finish()
    }
}

impl SqlSemaphore {
    /// The store behind the permits of a semaphore of `permits`, for checks at the store level
    /// (the conformance suite's `Fixture::lease_stores`).
    pub fn lease_store(&self, permits: u32) -> Result<Arc<dyn LeaseStore>, LockError> {
        Ok(Arc::clone(self.side(permits)?.store()) as Arc<dyn LeaseStore>)
    }

    fn side(&self, permits: u32) -> Result<StoreLock<PermitSide>, LockError> {
        if permits == 0 {
            return Err(LockError::invalid_options("a semaphore needs at least one permit; ask for permits >= 1"));
        }
        Ok(StoreLock::new(PermitSide(Arc::clone(&self.base), permits)))
    }
}

#[async_trait]
impl DistributedSemaphore for SqlSemaphore {
    fn backend(&self) -> &str {
        self.base.store.label()
    }

    fn capabilities(&self) -> Capabilities {
        self.base.capabilities()
    }

    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        self.side(permits)?.try_acquire(name, options).await
    }

    async fn acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        self.side(permits)?.acquire(name, options).await
    }
}

/// See [`crate::connect_rw`].
pub(crate) async fn connect_rw(url: &str, options: SqlOptions) -> Result<SqlRwLock, LockError> {
    Ok(rw(Base::connect(url, options).await?))
}

/// See [`crate::connect_semaphore`].
pub(crate) async fn connect_semaphore(url: &str, options: SqlOptions) -> Result<SqlSemaphore, LockError> {
    Ok(semaphore(Base::connect(url, options).await?))
}

/// The read-write lock over shared kinds.
pub(crate) fn rw(base: Arc<Base>) -> SqlRwLock {
    SqlRwLock { read: StoreLock::new(ReadSide(Arc::clone(&base))), write: StoreLock::new(WriteSide(base)) }
}

/// The semaphore over shared kinds.
pub(crate) fn semaphore(base: Arc<Base>) -> SqlSemaphore {
    SqlSemaphore { base }
}
