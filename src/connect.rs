//! Connecting to the backend a URL names (the scheme table is in [`crate::url`]). Errors pass
//! through the one redactor: a client library's message may quote the URL.

use std::sync::Arc;

use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, MemoryLock};

use crate::url::{redact_error, Scheme};
use crate::Config;

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
    config.validate()?;
    exclusive(config).await.map_err(|e| redact_error(e, &config.url))
}

async fn exclusive(config: &Config) -> Result<Arc<dyn DistributedLock>, LockError> {
    let url = config.url.as_str();
    warn_weak_tls(url);
    match Scheme::of(url)?.compiled()? {
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
        other => Err(other.not_compiled()),
    }
}

fn warn_weak_tls(url: &str) {
    if let Some(warning) = crate::tls::weak_tls_warning(url) {
        tracing::warn!("{warning}");
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
    config.validate()?;
    rw(config).await.map_err(|e| redact_error(e, &config.url))
}

async fn rw(config: &Config) -> Result<Arc<dyn DistributedRwLock>, LockError> {
    warn_weak_tls(&config.url);
    match Scheme::of(&config.url)?.compiled()? {
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
    config.validate()?;
    semaphore(config).await.map_err(|e| redact_error(e, &config.url))
}

async fn semaphore(config: &Config) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
    warn_weak_tls(&config.url);
    match Scheme::of(&config.url)?.compiled()? {
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
    if scheme.is_compiled() {
        LockError::Unsupported { backend: format!("{scheme:?}").to_lowercase(), feature }
    } else {
        scheme.not_compiled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
