//! [`RedisBackend`]: one Redis server handle (one command connection, one pub/sub connection)
//! from which the exclusive lock, the read-write lock and the semaphore are all built.

use std::sync::Arc;

use lock_core::{backend::StoreLock, LockError};
use tokio::sync::OnceCell;

use crate::acl::{self, Needs};
use crate::{RedisLock, RedisOptions, RedisRwLock, RedisSemaphore, RedisStore};

/// One Redis server that hands out every lock kind over the same connections:
/// [`RedisBackend::lock`], [`RedisBackend::rw`], [`RedisBackend::semaphore`]. Cheap to clone;
/// clones share everything.
///
/// Build it from a URL ([`RedisBackend::connect`], the URLs of [`crate::connect`], Sentinel
/// included) or from the application's own `redis::Client` ([`RedisBackend::from_client`]). A
/// `redis::Client` holds no connection, only where and how to connect, so the second way costs
/// nothing extra: the backend opens its own multiplexed command connection and, when a waiter
/// first waits, its own pub/sub connection from it (two connections, as with a URL).
#[derive(Clone)]
pub struct RedisBackend {
    store: Arc<RedisStore>,
    /// Whether the user may run the read-write lock's and semaphore's scripts (checked once).
    kinds_checked: Arc<OnceCell<()>>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend").field("store", &self.store).finish()
    }
}

impl RedisBackend {
    /// Connects to one Redis server (the URLs, options and errors of [`crate::connect`]).
    pub async fn connect(url: &str, options: RedisOptions) -> Result<RedisBackend, LockError> {
        Ok(RedisBackend::new(RedisStore::connect(url, &options, Needs::Exclusive).await?))
    }

    /// Over the application's own `redis::Client`: its address, credentials, database and TLS
    /// settings; `options` as with [`RedisBackend::connect`] (`tls_ca_file` is ignored: the
    /// client's own TLS settings apply). Checks the server answers, like `connect`.
    pub async fn from_client(client: redis::Client, options: RedisOptions) -> Result<RedisBackend, LockError> {
        Ok(RedisBackend::new(RedisStore::from_client(client, &options).await?))
    }

    fn new(store: RedisStore) -> RedisBackend {
        RedisBackend { store: Arc::new(store), kinds_checked: Arc::new(OnceCell::new()) }
    }

    /// The exclusive lock.
    pub fn lock(&self) -> RedisLock {
        StoreLock::from_arc(Arc::clone(&self.store))
    }

    /// The read-write lock (docs/contract.md §5.2); the first call of this or
    /// [`RedisBackend::semaphore`] checks that the user may run its commands.
    pub async fn rw(&self) -> Result<RedisRwLock, LockError> {
        self.check_kinds().await?;
        Ok(RedisRwLock::new(crate::RedisKinds::new(Arc::clone(&self.store))))
    }

    /// The semaphore (docs/contract.md §5.3).
    pub async fn semaphore(&self) -> Result<RedisSemaphore, LockError> {
        self.check_kinds().await?;
        Ok(RedisSemaphore::new(crate::RedisKinds::new(Arc::clone(&self.store))))
    }

    async fn check_kinds(&self) -> Result<(), LockError> {
        let s = &self.store;
        self.kinds_checked.get_or_try_init(|| acl::check(&s.node, &s.prefix, s.node.db(), Needs::Kinds)).await.map(drop)
    }
}
