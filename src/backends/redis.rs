//! Redis (one server, Sentinel or Cluster) and Redlock as [`LockProvider`]s.

use std::sync::Arc;

use lock_core::backend::async_trait;
use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockProvider, LockService};
use lock_redis::{RedisBackend, Redlock};

use super::kinds::{EveryKind, KindsProvider};
use crate::driver::Connecting;
use crate::Config;

/// Connects the Redis deployment the URL names, with the `[redis]` options.
pub(super) fn connect(config: &Config) -> Connecting<'_> {
    Box::pin(async move {
        let backend = RedisBackend::connect(&config.url, config.redis_options()).await?;
        Ok(Arc::new(RedisProvider::new(backend)) as Arc<dyn LockProvider>)
    })
}

/// Connects a majority of the Redlock masters the URL names, with the `[redis]` options.
pub(super) fn connect_redlock(config: &Config) -> Connecting<'_> {
    Box::pin(async move {
        let lock = lock_redis::connect_redlock(&config.url, config.redis_options()).await?;
        Ok(Arc::new(RedlockProvider(lock)) as Arc<dyn LockProvider>)
    })
}

/// A [`RedisBackend`] as a provider.
pub(crate) type RedisProvider = KindsProvider<RedisBackend>;

#[async_trait]
impl EveryKind for RedisBackend {
    fn lock(&self) -> Arc<dyn DistributedLock> {
        Arc::new(RedisBackend::lock(self))
    }

    async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError> {
        Ok(Arc::new(RedisBackend::rw(self).await?))
    }

    async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
        Ok(Arc::new(RedisBackend::semaphore(self).await?))
    }
}

/// Redlock: the exclusive lock only (the defaults answer `Unsupported` for the other kinds).
struct RedlockProvider(Redlock);

impl LockProvider for RedlockProvider {
    fn backend(&self) -> &str {
        LockService::backend(&self.0)
    }

    fn lock(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.0.clone())
    }
}
