//! The trait impl: the exclusive lock through the queue of `crate::queue`.

use async_trait::async_trait;
use lock_core::{AcquireOptions, Capabilities, DistributedLock, FencingToken, HolderInfo, Lease, LockError, LockName};

use crate::client::{backend, capabilities, EtcdLock};

#[async_trait]
impl DistributedLock for EtcdLock {
    fn backend(&self) -> &str {
        backend()
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn try_acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        Box::pin(self.try_once(name, options)).await
    }

    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        Box::pin(self.wait_for(name, options)).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        self.inspect_now(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        self.list_now(prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        self.force_release_now(name).await
    }
}
