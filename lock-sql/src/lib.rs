#![doc = include_str!("../docs.md")]
// A build with fewer than all three dialects leaves helpers that only the others use.
#![cfg_attr(not(all(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]

mod adopt;
mod backend;
mod decide;
mod dialect;
mod error;
mod inflight;
mod kinds;
mod local;
mod millis;
mod options;
mod pool;
mod queue;
mod serial;
mod store;
mod tls;

pub use backend::SqlBackend;
pub use kinds::{SqlKinds, SqlRwLock, SqlSemaphore};
pub use options::{SqlOptions, DEFAULT_TABLE};
pub use store::{SqlLock, SqlStore};
pub use tls::{check_tls, weak_tls_warning, SqlTls};

/// The PostgreSQL statements' text, for lock-model's differential test only (not an API).
#[cfg(feature = "postgres")]
#[doc(hidden)]
pub use dialect::postgres::model_text;

#[cfg(doc)]
use lock_core::Capabilities;
use lock_core::{backend::StoreLock, LockError};

/// Pins a PostgreSQL connection of your own the way this crate pins its sessions
/// (`search_path = pg_catalog, pg_temp`, durable commits), for tools that run statements beside
/// the lock on its tables: an operator or function planted in a schema on the role's path then
/// cannot run inside them. Returns `table` with its schema (`schema.table`, unquoted), found under
/// the connection's own path before it is pinned, or where `CREATE TABLE` would put it: name
/// every table you use with it, as the pinned path finds no table outside `pg_catalog`.
///
/// A table that resolves to no schema, or to one that is not a plain identifier, is
/// [`LockError::Config`].
#[cfg(feature = "postgres")]
pub async fn pin_postgres(conn: &mut sqlx::PgConnection, table: &str) -> Result<String, LockError> {
    dialect::postgres::pin::tool(conn, table).await
}

/// Connects to the database named by `url` and returns the lock.
///
/// The scheme selects the database: `sqlite:` (the file is created if missing), `postgres:` /
/// `postgresql:`, `mysql:` / `mariadb:`. A malformed URL, an unknown scheme or a bad table name
/// is [`LockError::Config`]; a server that cannot be reached within
/// [`SqlOptions::connect_timeout`] is [`LockError::Unavailable`].
pub async fn connect(url: &str, options: SqlOptions) -> Result<SqlLock, LockError> {
    SqlStore::connect(url, options).await.map(StoreLock::new)
}

/// Connects a read-write lock client (docs/contract.md §5.2): the same URL, options and lease table name as
/// [`connect`], plus the tables `<table>_counters` and `<table>_holders` (created if missing).
pub async fn connect_rw(url: &str, options: SqlOptions) -> Result<SqlRwLock, LockError> {
    kinds::connect_rw(url, options).await
}

/// Connects a semaphore client (docs/contract.md §5.3): the same URL, options and tables as [`connect_rw`].
pub async fn connect_semaphore(url: &str, options: SqlOptions) -> Result<SqlSemaphore, LockError> {
    kinds::connect_semaphore(url, options).await
}
