//! ZooKeeper as a [`LockProvider`]: one session, every kind.

use std::sync::Arc;

use lock_core::backend::async_trait;
use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockProvider};
use lock_zk::ZkLock;

use crate::driver::Connecting;
use crate::Config;

/// Opens a session with the ensemble the URL names, with the `[zk]` options.
pub(super) fn connect(config: &Config) -> Connecting<'_> {
    Box::pin(async move {
        let lock = lock_zk::connect(&config.url, config.zk_options()).await?;
        Ok(Arc::new(ZkProvider(lock)) as Arc<dyn LockProvider>)
    })
}

/// A [`ZkLock`] (which is every kind at once) as a provider.
pub(crate) struct ZkProvider(pub(crate) ZkLock);

#[async_trait]
impl LockProvider for ZkProvider {
    fn backend(&self) -> &str {
        DistributedLock::backend(&self.0)
    }

    fn lock(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.0.clone())
    }

    async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError> {
        Ok(Arc::new(self.0.clone()))
    }

    async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
        Ok(Arc::new(self.0.clone()))
    }
}
