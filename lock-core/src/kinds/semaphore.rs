//! [`StoreSemaphore`]: a [`DistributedSemaphore`] from a [`KindStore`]'s permit side.

use std::sync::Arc;

use async_trait::async_trait;

use super::rules::check_permits;
use super::side::KindSide;
use super::store::KindStore;
use crate::store::{LeaseStore, StoreLock};
use crate::{
    AcquireOptions, Capabilities, DistributedLock, DistributedSemaphore, Lease, LockError, LockKind, LockName,
    LockService,
};

/// A semaphore (docs/contract.md §5.3) over a [`KindStore`].
///
/// Up to `permits` holders of one name at once, each with its own lease and a fencing token
/// above every token issued before for this semaphore. The number of permits is stored with
/// the semaphore while anyone holds it: a caller asking for a different number gets
/// `InvalidOptions` ([`permits_mismatch`](super::rules::permits_mismatch)).
pub struct StoreSemaphore<B> {
    store: Arc<B>,
}

impl<B> Clone for StoreSemaphore<B> {
    fn clone(&self) -> Self {
        StoreSemaphore { store: Arc::clone(&self.store) }
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for StoreSemaphore<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSemaphore").field("store", &self.store).finish()
    }
}

impl<B: KindStore> StoreSemaphore<B> {
    /// The semaphores of `store`.
    pub fn new(store: Arc<B>) -> Self {
        StoreSemaphore { store }
    }

    /// The store behind the permits.
    pub fn store(&self) -> &Arc<B> {
        &self.store
    }

    /// The side of a semaphore of `permits` as a [`LeaseStore`], for checks at the store level
    /// (the conformance suite's `Fixture::lease_stores`) and tools that drive the store directly.
    pub fn lease_store(&self, permits: u32) -> Result<Arc<dyn LeaseStore>, LockError> {
        Ok(Arc::clone(self.side(permits)?.store()) as Arc<dyn LeaseStore>)
    }

    /// Every call names its `permits`, so each call gets a (cheap) side.
    fn side(&self, permits: u32) -> Result<StoreLock<KindSide<B>>, LockError> {
        check_permits(permits)?;
        Ok(StoreLock::new(KindSide::new(&self.store, LockKind::Permit, permits)))
    }
}

#[async_trait]
impl<B: KindStore> DistributedSemaphore for StoreSemaphore<B> {
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

impl<B: KindStore> LockService for StoreSemaphore<B> {
    fn backend(&self) -> &str {
        self.store.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
}
