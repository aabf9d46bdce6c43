#![doc = include_str!("../docs.md")]

mod acl;
mod backend;
mod blocking;
mod boot;
mod cluster;
mod conn;
mod endpoint;
mod handoff;
mod kinds;
mod options;
mod pubsub;
mod redlock;
mod reply;
#[doc(hidden)]
pub mod scripts;
mod sentinel;
mod single;
mod url;

pub use backend::RedisBackend;
pub use boot::cluster_boot_markers;
pub use kinds::{RedisKinds, RedisRwLock, RedisSemaphore};
pub use options::{RedisOptions, DEFAULT_MAX_CLOCK_OFFSET, DEFAULT_MAX_WAITERS};
pub use redlock::RedlockStore;
pub use sentinel::sentinel_primary;
pub use single::RedisStore;

use lock_core::{backend::StoreLock, LockError};

/// A lock client of one Redis server. Backend label `redis`.
pub type RedisLock = StoreLock<RedisStore>;

/// A lock client of N independent Redis masters (Redlock). Backend label `redlock`.
pub type Redlock = StoreLock<RedlockStore>;

/// Connects to one Redis server: `redis://[user:password@]host[:port][/db]`, or `rediss://…`
/// for TLS. Checks the server answers within `connect_timeout + request_timeout`.
///
/// Errors: a malformed URL or bad options is `Config`; an unreachable server is `Unavailable`;
/// rejected credentials are `Config`.
pub async fn connect(url: &str, options: RedisOptions) -> Result<RedisLock, LockError> {
    Ok(StoreLock::new(RedisStore::connect(url, &options, acl::Needs::Exclusive).await?))
}

/// Connects to N independent masters:
/// `redlock://[user:password@]host1:port1,host2:port2,…[/db][?tls=true]` (N odd, ≥ 3). A
/// majority must answer now, else `Unavailable`; the others are reconnected when they return.
pub async fn connect_redlock(url: &str, options: RedisOptions) -> Result<Redlock, LockError> {
    Ok(StoreLock::new(RedlockStore::connect(url, &options).await?))
}

/// Connects a read-write lock client (docs/contract.md §5.2) to one Redis server; same URLs, options and
/// errors as [`connect`]. Shares nothing with other clients: each call opens its own
/// connection (and, when it first waits, its own pub/sub connection).
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, DistributedRwLock, DistributedSemaphore, LockName};
/// let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
/// let rw = lock_redis::connect_rw("redis://127.0.0.1:6379", Default::default()).await?;
/// let name = LockName::new("catalog")?;
/// let read = rw.acquire_read(&name, &opts).await?; // other readers may hold it too
/// read.release().await?;
/// let sem = lock_redis::connect_semaphore("redis://127.0.0.1:6379", Default::default()).await?;
/// let slot = sem.acquire_permit(&LockName::new("encoders")?, 4, &opts).await?; // one of 4
/// slot.release().await?;
/// # Ok(()) }
/// ```
pub async fn connect_rw(url: &str, options: RedisOptions) -> Result<RedisRwLock, LockError> {
    kinds::connect_rw(url, &options).await
}

/// Connects a semaphore client (docs/contract.md §5.3) to one Redis server; same URLs, options and errors
/// as [`connect`].
pub async fn connect_semaphore(url: &str, options: RedisOptions) -> Result<RedisSemaphore, LockError> {
    kinds::connect_semaphore(url, &options).await
}
