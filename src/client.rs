//! [`Client`]: one connection to the backend a URL names, handing out every lock kind over it:
//! the backend's [`LockProvider`] plus the URL it was made from (for redacting errors).

use std::sync::Arc;

use lock_core::{Capabilities, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockProvider};

use crate::registry::driver_of;
use crate::url::redact_error;
use crate::Config;

/// One connection to a backend, from which the exclusive lock, the read-write lock and the
/// semaphore are all taken, over the same connections: one pool and one listener on SQL, one
/// command connection and one pub/sub connection on Redis, one session on ZooKeeper, one
/// in-process server for `memory://`. Cheap to clone; clones share the connections.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dlock::LockError> {
/// use std::time::Duration;
/// use dlock::{AcquireOptions, LockName};
/// let client = dlock::Client::connect("memory://client-docs").await?;
/// let opts = AcquireOptions::new(Duration::from_secs(5));
/// let name = LockName::new("catalog")?;
/// let lease = client.lock().acquire(&name, &opts).await?;
/// let read = client.rw().await?.acquire_read(&name, &opts).await?; // another kind, another lock
/// let permit = client.semaphore().await?.acquire_permit(&name, 2, &opts).await?;
/// # lease.release().await?; read.release().await?; permit.release().await?; Ok(()) }
/// ```
///
/// Built from what the application already has: [`Client::from_sql`] over
/// [`lock_sql::SqlBackend::from_pg_pool`] (or the MySQL / SQLite pool),
/// [`Client::from_redis`] over [`lock_redis::RedisBackend::from_client`], [`Client::from_zk`]
/// over [`lock_zk::from_client`]; their docs say what each costs. Any other backend (one of your
/// own): [`Client::from_provider`], or register its scheme ([`crate::register_backend`]) and
/// connect by URL.
#[derive(Clone)]
pub struct Client {
    provider: Arc<dyn LockProvider>,
    /// For redacting errors of the kinds made later (may hold a password; never shown). Empty
    /// for a client over a handle the application built.
    url: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("backend", &self.provider.backend()).finish()
    }
}

impl Client {
    /// Connects to the backend named by `url`, with default tuning.
    pub async fn connect(url: &str) -> Result<Client, LockError> {
        Client::from_config(&Config::from_url(url)).await
    }

    /// Connects to the backend named by `config.url` (a shipped backend, or one registered with
    /// [`crate::register_backend`]), with the config's tuning keys; the config's
    /// `request_timeout`, when set, bounds every request of every backend.
    pub async fn from_config(config: &Config) -> Result<Client, LockError> {
        config.validate()?;
        let driver = driver_of(&config.url)?;
        let connect = driver.connect.ok_or_else(|| driver.not_compiled())?;
        let provider = connect(config).await.map_err(|e| redact_error(e, &config.url))?;
        Ok(Client { provider, url: config.url.clone() })
    }

    /// Over a provider the application built (a backend of its own, or a shipped one over
    /// connections it already has).
    pub fn from_provider(provider: Arc<dyn LockProvider>) -> Client {
        Client { provider, url: String::new() }
    }

    /// Over an SQL backend the application built (e.g. from its own sqlx pool).
    #[cfg(feature = "sql")]
    pub fn from_sql(backend: lock_sql::SqlBackend) -> Client {
        Client::from_provider(Arc::new(crate::backends::SqlProvider::new(backend)))
    }

    /// Over a Redis backend the application built (e.g. from its own `redis::Client`).
    #[cfg(feature = "redis")]
    pub fn from_redis(backend: lock_redis::RedisBackend) -> Client {
        Client::from_provider(Arc::new(crate::backends::RedisProvider::new(backend)))
    }

    /// Over a ZooKeeper lock client the application built (e.g. over its own session).
    #[cfg(feature = "zk")]
    pub fn from_zk(client: lock_zk::ZkLock) -> Client {
        Client::from_provider(Arc::new(lock_core::backend::EveryKind(client)))
    }

    /// The backend's provider, for what the lock kinds do not cover (e.g. [`LockProvider::purge`]).
    pub fn provider(&self) -> &Arc<dyn LockProvider> {
        &self.provider
    }

    /// The backend's name (`postgres`, `redis`, …).
    pub fn backend(&self) -> &str {
        self.provider.backend()
    }

    /// What the exclusive lock promises.
    pub fn capabilities(&self) -> Capabilities {
        self.provider.capabilities()
    }

    /// The exclusive lock (docs/contract.md §5.1).
    pub fn lock(&self) -> Arc<dyn DistributedLock> {
        self.provider.lock()
    }

    /// The read-write lock (docs/contract.md §5.2); `Unsupported` on Redlock. On SQL the first
    /// call creates its tables if missing; on Redis it checks the user's ACL once.
    pub async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError> {
        self.provider.rw().await.map_err(|e| self.redact(e))
    }

    /// The semaphore (docs/contract.md §5.3); `Unsupported` on Redlock.
    pub async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
        self.provider.semaphore().await.map_err(|e| self.redact(e))
    }

    fn redact(&self, e: LockError) -> LockError {
        if self.url.is_empty() {
            e
        } else {
            redact_error(e, &self.url)
        }
    }
}

/// The `Unsupported` error, before connecting, when the backend `config.url` names offers only
/// the exclusive lock (`kind`: "read-write locks", "semaphores").
pub(crate) fn check_kind(config: &Config, kind: &'static str) -> Result<(), LockError> {
    let driver = driver_of(&config.url)?;
    match driver.connect {
        None => Err(driver.not_compiled()),
        Some(_) if driver.exclusive_only => Err(LockError::unsupported(driver.name, kind)),
        Some(_) => Ok(()),
    }
}
