#![doc = include_str!("../README.md")]

mod backends;
pub mod blocking;
mod client;
pub mod config;
pub mod connect;
mod driver;
#[cfg(feature = "etcd")]
pub mod etcd;
mod load;
#[cfg(feature = "metrics")]
pub mod metrics;
mod registry;
mod scheme;
pub mod tls;
pub mod url;

pub use client::Client;
pub use config::Config;
pub use connect::{connect, connect_rw_with, connect_semaphore_with, connect_with};
pub use driver::{ConnectFn, Connecting, Driver};
// What applications use, named (lock-core's root); backend authors' kit stays under `backend`.
pub use lock_core::{
    acquire_all, backend, clock_drift, AcquireOptions, Capabilities, ChangeFeed, DistributedLock, DistributedLockExt,
    DistributedRwLock, DistributedSemaphore, Election, EventsRef, FencedRegister, FencingToken, Handle, Handles,
    Holder, HolderInfo, Leadership, Lease, LeaseEvents, LeaseModel, LeaseObserver, LockError, LockHandle, LockKind,
    LockName, LockProvider, LockService, LostSignal, MemoryLock, OwnerId, RwLockHandle, SemaphoreHandle,
    SemaphoreHandles, StaleToken, WaitPolicy, WakeMethod, DEFAULT_TTL, MAX_HOLDER_LEN, MAX_METADATA_LEN, MAX_NAME_LEN,
};
pub use registry::{driver_of, drivers, register_backend};
pub use scheme::Scheme;

/// The Redis and Redlock backends.
#[cfg(feature = "redis")]
pub use lock_redis as redis;
/// The SQL backends (PostgreSQL, MySQL/MariaDB, SQLite).
#[cfg(feature = "sql")]
pub use lock_sql as sql;
/// The ZooKeeper backend.
#[cfg(feature = "zk")]
pub use lock_zk as zk;
