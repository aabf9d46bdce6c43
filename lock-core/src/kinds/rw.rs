//! [`StoreRwLock`]: a [`DistributedRwLock`] from a [`KindStore`]'s read and write sides.

use std::sync::Arc;

use async_trait::async_trait;

use super::side::KindSide;
use super::store::KindStore;
use crate::store::{LeaseStore, StoreLock};
use crate::{
    AcquireOptions, Capabilities, DistributedLock, DistributedRwLock, Lease, LockError, LockKind, LockName, LockService,
};

/// A read-write lock (docs/contract.md §5.2) over a [`KindStore`].
///
/// Many readers or one writer. A writer that is refused while it waits leaves a short claim
/// ([`writer_claim`](super::rules::writer_claim)) that makes new readers wait, so readers arriving
/// after a waiting writer do not starve it; waiters are served in arrival order only where the
/// store keeps a waiter queue and its capabilities declare `fifo` (Redis). Every grant, read or write, has its own lease and a fencing token above
/// every token issued before for this read-write lock.
pub struct StoreRwLock<B> {
    read: StoreLock<KindSide<B>>,
    write: StoreLock<KindSide<B>>,
}

impl<B> Clone for StoreRwLock<B> {
    fn clone(&self) -> Self {
        StoreRwLock { read: self.read.clone(), write: self.write.clone() }
    }
}

impl<B: KindStore + std::fmt::Debug> std::fmt::Debug for StoreRwLock<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreRwLock").field("store", self.read.store().store()).finish()
    }
}

impl<B: KindStore> StoreRwLock<B> {
    /// The read-write locks of `store`.
    pub fn new(store: Arc<B>) -> Self {
        StoreRwLock {
            read: StoreLock::new(KindSide::new(&store, LockKind::Read, 0)),
            write: StoreLock::new(KindSide::new(&store, LockKind::Write, 0)),
        }
    }

    /// The store behind both sides.
    pub fn store(&self) -> &Arc<B> {
        self.read.store().store()
    }

    /// The read and the write side as [`LeaseStore`]s (labels `"read"`, `"write"`), for checks
    /// at the store level (the conformance suite's `Fixture::lease_stores`) and tools that
    /// drive the store directly.
    pub fn lease_stores(&self) -> [(&'static str, Arc<dyn LeaseStore>); 2] {
        [
            ("read", Arc::clone(self.read.store()) as Arc<dyn LeaseStore>),
            ("write", Arc::clone(self.write.store()) as Arc<dyn LeaseStore>),
        ]
    }
}

#[async_trait]
impl<B: KindStore> DistributedRwLock for StoreRwLock<B> {
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

impl<B: KindStore> LockService for StoreRwLock<B> {
    fn backend(&self) -> &str {
        self.read.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.read.capabilities()
    }
}
