//! The trait impls: each lock kind is a [`Recipe`] run through the same queue (`crate::queue`).

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Capabilities, ChangeFeed, DistributedLock, DistributedRwLock, DistributedSemaphore, FencingToken,
    HolderInfo, Lease, LockError, LockName,
};

use lock_core::backend::audited_force_release;

use crate::client::{backend, capabilities, EtcdLock};
use crate::recipe::{permits, Recipe};

#[async_trait]
impl DistributedLock for EtcdLock {
    fn backend(&self) -> &str {
        backend()
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn try_acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        Box::pin(self.try_once(Recipe::Exclusive, name, options)).await
    }

    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        Box::pin(self.wait_for(Recipe::Exclusive, name, options)).await
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

#[async_trait]
impl DistributedRwLock for EtcdLock {
    fn backend(&self) -> &str {
        backend()
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn try_acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        Box::pin(self.try_once(Recipe::Read, name, options)).await
    }

    async fn acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        Box::pin(self.wait_for(Recipe::Read, name, options)).await
    }

    async fn try_acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        Box::pin(self.try_once(Recipe::Write, name, options)).await
    }

    async fn acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        Box::pin(self.wait_for(Recipe::Write, name, options)).await
    }
}

#[async_trait]
impl DistributedSemaphore for EtcdLock {
    fn backend(&self) -> &str {
        backend()
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits_total: u32,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        Box::pin(self.try_once(permits(permits_total)?, name, options)).await
    }

    async fn acquire_permit(
        &self,
        name: &LockName,
        permits_total: u32,
        options: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        Box::pin(self.wait_for(permits(permits_total)?, name, options)).await
    }
}
