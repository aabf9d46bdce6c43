//! The trait impls: each lock kind is a [`Recipe`] run through the same queue (`crate::queue`).

use async_trait::async_trait;
use lock_core::backend::{audited_force_release, QueueLock};
use lock_core::{
    AcquireOptions, Capabilities, ChangeFeed, DistributedLock, FencingToken, HolderInfo, Lease, LockError, LockName,
    LockService,
};

use crate::client::{backend, capabilities, EtcdLock};
use crate::recipe::Recipe;

#[async_trait]
impl DistributedLock for EtcdLock {
    async fn try_acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(Recipe::Exclusive, name, options).await
    }

    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(Recipe::Exclusive, name, options).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        self.inspect_now(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        self.list_now(prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        Box::pin(audited_force_release(backend(), name, self.inspect_now(name), self.force_release_now(name))).await
    }

    async fn watch_changes(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        self.watch_changes_now(name).await
    }
}

impl LockService for EtcdLock {
    fn backend(&self) -> &str {
        backend()
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }
}

/// The read-write lock and the semaphore come from these, under the lock's backend name and
/// capabilities (`lock_core::backend::QueueLock`).
#[async_trait]
impl QueueLock for EtcdLock {
    async fn try_kind(&self, kind: Recipe, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(kind, name, opts).await
    }

    async fn acquire_kind(&self, kind: Recipe, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(kind, name, opts).await
    }
}
