//! Picking a backend from a URL.

use std::sync::Arc;

use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, MemoryLock};

use crate::Config;

/// The backend a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `memory://[name]`: the in-process reference backend.
    Memory,
    /// `sqlite://path` or `sqlite::memory:`.
    Sqlite,
    /// `postgres://` or `postgresql://`.
    Postgres,
    /// `mysql://` or `mariadb://`.
    Mysql,
    /// `redis://` or `rediss://` (TLS).
    Redis,
    /// `redlock://h1:p1,h2:p2,…`.
    Redlock,
    /// `zk://h1:p1,h2:p2/root`.
    ZooKeeper,
}

const SUPPORTED: &str =
    "memory://, sqlite://, postgres://, mysql:// (mariadb://), redis:// (rediss://), redlock://h1:p1,h2:p2,…, zk://h1:p1/root";

impl Scheme {
    /// The scheme of `url`, or a `Config` error naming the supported ones.
    pub fn of(url: &str) -> Result<Scheme, LockError> {
        let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
        Ok(match scheme.as_str() {
            "memory" => Scheme::Memory,
            "sqlite" => Scheme::Sqlite,
            "postgres" | "postgresql" => Scheme::Postgres,
            "mysql" | "mariadb" => Scheme::Mysql,
            "redis" | "rediss" => Scheme::Redis,
            "redlock" => Scheme::Redlock,
            "zk" | "zookeeper" => Scheme::ZooKeeper,
            "" => {
                return Err(LockError::config(format!(
                    "the backend URL {:?} has no scheme; use one of {SUPPORTED}",
                    crate::config::redact_url(url)
                )))
            }
            other => {
                return Err(LockError::config(format!(
                    "unknown backend scheme {other:?} in {:?}; use one of {SUPPORTED}",
                    crate::config::redact_url(url)
                )))
            }
        })
    }

    /// The cargo feature of `dlock` that compiles this backend in.
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Scheme::Memory => None,
            Scheme::Sqlite | Scheme::Postgres | Scheme::Mysql => Some("sql"),
            Scheme::Redis | Scheme::Redlock => Some("redis"),
            Scheme::ZooKeeper => Some("zk"),
        }
    }
}

/// Connects to the backend named by `url`, with default tuning.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dlock::LockError> {
/// let lock = dlock::connect("memory://").await?;
/// assert_eq!(lock.backend(), "memory");
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    connect_with(&Config::from_url(url)).await
}

/// Connects to the backend named by `config.url`, with the config's tuning keys.
pub async fn connect_with(config: &Config) -> Result<Arc<dyn DistributedLock>, LockError> {
    let scheme = Scheme::of(&config.url)?;
    let url = config.url.as_str();
    match scheme {
        Scheme::Memory => Ok(Arc::new(memory_server(url))),
        #[cfg(feature = "sql")]
        Scheme::Sqlite | Scheme::Postgres | Scheme::Mysql => {
            Ok(Arc::new(lock_sql::connect(url, config.sql.clone()).await?))
        }
        #[cfg(feature = "redis")]
        Scheme::Redis => Ok(Arc::new(lock_redis::connect(url, config.redis.clone()).await?)),
        #[cfg(feature = "redis")]
        Scheme::Redlock => Ok(Arc::new(lock_redis::connect_redlock(url, config.redis.clone()).await?)),
        #[cfg(feature = "zk")]
        Scheme::ZooKeeper => Ok(Arc::new(lock_zk::connect(url, config.zk.clone()).await?)),
        #[allow(unreachable_patterns)]
        other => Err(LockError::config(format!(
            "the {other:?} backend is not compiled into this build; enable dlock's cargo feature {:?}",
            other.feature().unwrap_or("default")
        ))),
    }
}

fn memory_server(url: &str) -> MemoryLock {
    MemoryLock::named(url.split_once("://").map(|(_, n)| n).unwrap_or(""))
}

/// Connects a read-write lock client (docs/contract.md §5.2) to the backend named by `config.url`.
/// Every backend but Redlock offers it; Redlock answers `Unsupported`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dlock::LockError> {
/// use std::time::Duration;
/// use dlock::{AcquireOptions, LockName};
/// let rw = dlock::connect_rw_with(&dlock::Config::from_url("memory://docs")).await?;
/// let name = LockName::new("catalog")?;
/// let opts = AcquireOptions::new(Duration::from_secs(5));
/// let (a, b) = (rw.acquire_read(&name, &opts).await?, rw.acquire_read(&name, &opts).await?);
/// assert!(rw.try_acquire_write(&name, &opts).await?.is_none());
/// # a.release().await?; b.release().await?; Ok(()) }
/// ```
pub async fn connect_rw_with(config: &Config) -> Result<Arc<dyn DistributedRwLock>, LockError> {
    match Scheme::of(&config.url)? {
        Scheme::Memory => Ok(Arc::new(memory_server(&config.url))),
        #[cfg(feature = "sql")]
        Scheme::Sqlite | Scheme::Postgres | Scheme::Mysql => {
            Ok(Arc::new(lock_sql::connect_rw(&config.url, config.sql.clone()).await?))
        }
        #[cfg(feature = "redis")]
        Scheme::Redis => Ok(Arc::new(lock_redis::connect_rw(&config.url, config.redis.clone()).await?)),
        #[cfg(feature = "zk")]
        Scheme::ZooKeeper => Ok(Arc::new(lock_zk::connect(&config.url, config.zk.clone()).await?)),
        other => Err(unsupported(other, "read-write locks")),
    }
}

/// Connects a semaphore client (docs/contract.md §5.3) to the backend named by `config.url`.
/// Every backend but Redlock offers it; Redlock answers `Unsupported`.
pub async fn connect_semaphore_with(config: &Config) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
    match Scheme::of(&config.url)? {
        Scheme::Memory => Ok(Arc::new(memory_server(&config.url))),
        #[cfg(feature = "sql")]
        Scheme::Sqlite | Scheme::Postgres | Scheme::Mysql => {
            Ok(Arc::new(lock_sql::connect_semaphore(&config.url, config.sql.clone()).await?))
        }
        #[cfg(feature = "redis")]
        Scheme::Redis => Ok(Arc::new(lock_redis::connect_semaphore(&config.url, config.redis.clone()).await?)),
        #[cfg(feature = "zk")]
        Scheme::ZooKeeper => Ok(Arc::new(lock_zk::connect(&config.url, config.zk.clone()).await?)),
        other => Err(unsupported(other, "semaphores")),
    }
}

/// `Unsupported` for a backend without this lock kind, or `Config` when the backend itself is
/// not compiled in.
fn unsupported(scheme: Scheme, feature: &'static str) -> LockError {
    let compiled = match scheme.feature() {
        Some("sql") => cfg!(feature = "sql"),
        Some("redis") => cfg!(feature = "redis"),
        Some("zk") => cfg!(feature = "zk"),
        _ => true,
    };
    if compiled {
        LockError::Unsupported { backend: format!("{scheme:?}").to_lowercase(), feature }
    } else {
        LockError::config(format!(
            "the {scheme:?} backend is not compiled into this build; enable dlock's cargo feature {:?}",
            scheme.feature().unwrap_or("default")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(Scheme::of("sqlite://x.db").ok(), Some(Scheme::Sqlite));
        assert_eq!(Scheme::of("sqlite::memory:").ok(), Some(Scheme::Sqlite));
        assert_eq!(Scheme::of("MariaDB://h/db").ok(), Some(Scheme::Mysql));
        assert_eq!(Scheme::of("rediss://h").ok(), Some(Scheme::Redis));
        assert_eq!(Scheme::of("redlock://a:1,b:2,c:3").ok(), Some(Scheme::Redlock));
        assert_eq!(Scheme::of("zk://h:2181/r").ok(), Some(Scheme::ZooKeeper));
        for bad in ["", "nothing", "ftp://x", "://x"] {
            assert!(matches!(Scheme::of(bad), Err(LockError::Config { .. })), "{bad}");
        }
        let e = Scheme::of("ftp://u:pw@x").expect_err("unknown");
        assert!(!e.to_string().contains("pw"), "{e}");
    }

    #[tokio::test]
    async fn memory_urls_share_a_server_per_name() {
        let name = lock_core::LockName::new("shared").expect("valid");
        let opts = lock_core::AcquireOptions::new(std::time::Duration::from_secs(5));
        let a = connect("memory://t1").await.expect("memory");
        let b = connect("memory://t1").await.expect("memory");
        let c = connect("memory://t2").await.expect("memory");
        let held = a.try_acquire(&name, &opts).await.expect("ok").expect("free");
        assert!(b.try_acquire(&name, &opts).await.expect("ok").is_none());
        assert!(c.try_acquire(&name, &opts).await.expect("ok").is_some());
        held.release().await.expect("release");
    }

    #[tokio::test]
    async fn other_kinds_are_typed_errors_where_unsupported() {
        let e = connect_semaphore_with(&Config::from_url("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"))
            .await
            .err()
            .expect("unsupported");
        assert!(matches!(e, LockError::Unsupported { .. }), "{e}");
        assert!(connect_semaphore_with(&Config::from_url("memory://k")).await.is_ok());
    }
}
