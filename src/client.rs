//! [`Client`]: one connection to the backend a URL names, handing out every lock kind over it.

use std::sync::Arc;

use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, MemoryLock};

use crate::url::{redact_error, Scheme};
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
/// over [`lock_zk::from_client`]; their docs say what each costs.
#[derive(Clone)]
pub struct Client {
    backend: Backend,
    /// For redacting errors of the kinds made later (may hold a password; never shown). A build
    /// with only ZooKeeper makes no kind that can fail later.
    #[cfg_attr(not(any(feature = "sql", feature = "redis")), allow(dead_code))]
    url: String,
}

#[derive(Clone)]
enum Backend {
    Memory(MemoryLock),
    #[cfg(feature = "sql")]
    Sql(lock_sql::SqlBackend),
    #[cfg(feature = "redis")]
    Redis(lock_redis::RedisBackend),
    #[cfg(feature = "redis")]
    Redlock(lock_redis::Redlock),
    #[cfg(feature = "zk")]
    Zk(lock_zk::ZkLock),
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("backend", &self.lock().backend()).finish()
    }
}

/// A client of one of the kinds beyond the exclusive lock (`$method` on the SQL and Redis
/// backends, which set up its tables or check its ACL on first use; Redlock has none).
macro_rules! kind_client {
    ($client:expr, $kind:ident, $method:ident, $what:literal) => {{
        let client = $client;
        let made: Arc<dyn $kind> = match &client.backend {
            Backend::Memory(m) => Arc::new(m.clone()),
            #[cfg(feature = "sql")]
            Backend::Sql(b) => Arc::new(b.$method().await.map_err(|e| client.redact(e))?),
            #[cfg(feature = "redis")]
            Backend::Redis(b) => Arc::new(b.$method().await.map_err(|e| client.redact(e))?),
            #[cfg(feature = "redis")]
            Backend::Redlock(_) => return Err(unsupported(Scheme::Redlock, $what)),
            #[cfg(feature = "zk")]
            Backend::Zk(z) => Arc::new(z.clone()),
        };
        Ok(made)
    }};
}

impl Client {
    /// Connects to the backend named by `url`, with default tuning.
    pub async fn connect(url: &str) -> Result<Client, LockError> {
        Client::from_config(&Config::from_url(url)).await
    }

    /// Connects to the backend named by `config.url`, with the config's tuning keys; the
    /// config's `request_timeout`, when set, bounds every request of every backend.
    pub async fn from_config(config: &Config) -> Result<Client, LockError> {
        config.validate()?;
        let backend = open(config).await.map_err(|e| redact_error(e, &config.url))?;
        Ok(Client { backend, url: config.url.clone() })
    }

    /// Over an SQL backend the application built (e.g. from its own sqlx pool).
    #[cfg(feature = "sql")]
    pub fn from_sql(backend: lock_sql::SqlBackend) -> Client {
        Client { backend: Backend::Sql(backend), url: String::new() }
    }

    /// Over a Redis backend the application built (e.g. from its own `redis::Client`).
    #[cfg(feature = "redis")]
    pub fn from_redis(backend: lock_redis::RedisBackend) -> Client {
        Client { backend: Backend::Redis(backend), url: String::new() }
    }

    /// Over a ZooKeeper lock client the application built (e.g. over its own session).
    #[cfg(feature = "zk")]
    pub fn from_zk(client: lock_zk::ZkLock) -> Client {
        Client { backend: Backend::Zk(client), url: String::new() }
    }

    /// The exclusive lock (docs/contract.md §5.1).
    pub fn lock(&self) -> Arc<dyn DistributedLock> {
        match &self.backend {
            Backend::Memory(m) => Arc::new(m.clone()),
            #[cfg(feature = "sql")]
            Backend::Sql(b) => Arc::new(b.lock()),
            #[cfg(feature = "redis")]
            Backend::Redis(b) => Arc::new(b.lock()),
            #[cfg(feature = "redis")]
            Backend::Redlock(l) => Arc::new(l.clone()),
            #[cfg(feature = "zk")]
            Backend::Zk(z) => Arc::new(z.clone()),
        }
    }

    /// The read-write lock (docs/contract.md §5.2); `Unsupported` on Redlock. On SQL the first
    /// call creates its tables if missing; on Redis it checks the user's ACL once.
    pub async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError> {
        kind_client!(self, DistributedRwLock, rw, "read-write locks")
    }

    /// The semaphore (docs/contract.md §5.3); `Unsupported` on Redlock.
    pub async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
        kind_client!(self, DistributedSemaphore, semaphore, "semaphores")
    }

    #[cfg_attr(not(any(feature = "sql", feature = "redis")), allow(dead_code))]
    fn redact(&self, e: LockError) -> LockError {
        if self.url.is_empty() {
            e
        } else {
            redact_error(e, &self.url)
        }
    }
}

async fn open(config: &Config) -> Result<Backend, LockError> {
    let url = config.url.as_str();
    if let Some(warning) = crate::tls::weak_tls_warning(url) {
        tracing::warn!("{warning}");
    }
    match Scheme::of(url)?.compiled()? {
        Scheme::Memory => Ok(Backend::Memory(MemoryLock::named(url.split_once("://").map(|(_, n)| n).unwrap_or("")))),
        #[cfg(feature = "sql")]
        Scheme::Sqlite | Scheme::Postgres | Scheme::Mysql => {
            Ok(Backend::Sql(lock_sql::SqlBackend::connect(url, config.sql_options()).await?))
        }
        #[cfg(feature = "redis")]
        Scheme::Redis => Ok(Backend::Redis(lock_redis::RedisBackend::connect(url, config.redis_options()).await?)),
        #[cfg(feature = "redis")]
        Scheme::Redlock => Ok(Backend::Redlock(lock_redis::connect_redlock(url, config.redis_options()).await?)),
        #[cfg(feature = "zk")]
        Scheme::ZooKeeper => Ok(Backend::Zk(lock_zk::connect(url, config.zk_options()).await?)),
        #[allow(unreachable_patterns)]
        other => Err(other.not_compiled()),
    }
}

/// Whether the backend of `scheme` has `kind` ("read-write locks", "semaphores"): the
/// `Unsupported` error when it does not, or `Config` when the backend is not compiled in.
pub(crate) fn check_kind(scheme: Scheme, kind: &'static str) -> Result<(), LockError> {
    match scheme {
        Scheme::Redlock => Err(unsupported(scheme, kind)),
        _ => Ok(()),
    }
}

fn unsupported(scheme: Scheme, feature: &'static str) -> LockError {
    if scheme.is_compiled() {
        LockError::unsupported(format!("{scheme:?}").to_lowercase(), feature)
    } else {
        scheme.not_compiled()
    }
}
