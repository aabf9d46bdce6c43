#![doc = include_str!("../README.md")]

pub mod blocking;
mod client;
pub mod config;
pub mod connect;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod tls;
pub mod url;

pub use client::Client;
pub use config::Config;
pub use connect::{connect, connect_rw_with, connect_semaphore_with, connect_with};
pub use lock_core::*;
pub use url::Scheme;

/// The Redis and Redlock backends.
#[cfg(feature = "redis")]
pub use lock_redis as redis;
/// The SQL backends (PostgreSQL, MySQL/MariaDB, SQLite).
#[cfg(feature = "sql")]
pub use lock_sql as sql;
/// The ZooKeeper backend.
#[cfg(feature = "zk")]
pub use lock_zk as zk;
