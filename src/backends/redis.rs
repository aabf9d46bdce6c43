//! Redis (one server, Sentinel or Cluster) and Redlock as [`LockProvider`]s.

use std::sync::Arc;

use lock_core::{DistributedLock, LockProvider, LockService};
use lock_redis::{RedisBackend, Redlock};

use super::kinds::{every_kind, KindsProvider};
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

every_kind!(RedisBackend);

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
