//! Connecting one lock kind to the backend a URL names: thin wrappers over [`Client`], kept for
//! callers that need only one kind (each call opens its own connections; a [`Client`] shares
//! them between kinds). Errors pass through the one redactor: a client library's message may
//! quote the URL.

use std::sync::Arc;

use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError};

use crate::client::check_kind;
use crate::{Client, Config};

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
    Ok(Client::from_config(config).await?.lock())
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
    check_kind(config, "read-write locks")?;
    Client::from_config(config).await?.rw().await
}

/// Connects a semaphore client (docs/contract.md §5.3) to the backend named by `config.url`.
/// Every backend but Redlock offers it; Redlock answers `Unsupported`.
pub async fn connect_semaphore_with(config: &Config) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
    config.validate()?;
    check_kind(config, "semaphores")?;
    Client::from_config(config).await?.semaphore().await
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
