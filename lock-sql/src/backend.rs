//! [`SqlBackend`]: one database handle (one pool, one listener on PostgreSQL) from which the
//! exclusive lock, the read-write lock and the semaphore are all built.

use std::sync::Arc;

use lock_core::{backend::StoreLock, LockError};
use tokio::sync::OnceCell;

use crate::dialect::{self, Dialect};
use crate::kinds::{self, SqlKinds};
use crate::kinds::{SqlRwLock, SqlSemaphore};
use crate::options::SqlOptions;
use crate::store::{SqlLock, SqlStore};

/// One connection to a database that hands out every lock kind over the same connections:
/// [`SqlBackend::lock`], [`SqlBackend::rw`], [`SqlBackend::semaphore`]. Cheap to clone; clones
/// share everything.
///
/// Build it from a URL ([`SqlBackend::connect`]: this crate's own small pool, see the crate docs
/// on connections) or from the pool the application already has (`from_pg_pool`,
/// `from_mysql_pool`, `from_sqlite_pool`). What the second way costs: connections come from
/// sqlx's pool, which checks them (by default a ping before handing out one that sat idle, and
/// a check when it goes back), and the session settings this backend needs run on every
/// borrowed connection: on PostgreSQL the pinned `search_path`, `synchronous_commit`,
/// `statement_timeout` and index-scan-only planning are put on before each operation and the application's values put back
/// after (two more round trips; see "name resolution" in the crate docs), on MySQL the
/// isolation level and `innodb_lock_wait_timeout` are set (one more). Renewals have no connections of their own: size the pool for
/// the waiters' acquires plus the renewals. PostgreSQL's listener opens one more connection, with
/// the pool's connect options.
#[derive(Clone)]
pub struct SqlBackend {
    store: Arc<SqlStore>,
    /// The tables of the read-write locks and semaphores, created on first use.
    kinds: Arc<OnceCell<Arc<SqlKinds>>>,
}

impl std::fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBackend").field("store", &self.store).finish()
    }
}

impl SqlBackend {
    /// Connects to the database named by `url` (the URLs of [`crate::connect`]).
    pub async fn connect(url: &str, options: SqlOptions) -> Result<SqlBackend, LockError> {
        Ok(SqlBackend::new(SqlStore::connect(url, options).await?))
    }

    /// Over the application's PostgreSQL pool; see the type's docs for what it costs.
    #[cfg(feature = "postgres")]
    pub async fn from_pg_pool(pool: sqlx::PgPool, options: SqlOptions) -> Result<SqlBackend, LockError> {
        SqlBackend::over(options, |options| async move { dialect::postgres::from_pool(pool, &options).await }).await
    }

    /// Over the application's MySQL / MariaDB pool; see the type's docs for what it costs.
    #[cfg(feature = "mysql")]
    pub async fn from_mysql_pool(pool: sqlx::MySqlPool, options: SqlOptions) -> Result<SqlBackend, LockError> {
        SqlBackend::over(options, |options| async move { dialect::mysql::from_pool(pool, &options).await }).await
    }

    /// Over the application's SQLite pool. Its connect options stay the application's: open the
    /// file in WAL mode with `synchronous = FULL` (else `durable_fencing` is false) and a
    /// `busy_timeout` no longer than [`SqlOptions::request_timeout`].
    #[cfg(feature = "sqlite")]
    pub async fn from_sqlite_pool(pool: sqlx::SqlitePool, options: SqlOptions) -> Result<SqlBackend, LockError> {
        SqlBackend::over(options, |options| async move { dialect::sqlite::from_pool(pool, &options).await }).await
    }

    async fn over<F, Fut>(options: SqlOptions, open: F) -> Result<SqlBackend, LockError>
    where
        F: FnOnce(SqlOptions) -> Fut,
        Fut: std::future::Future<Output = Result<Arc<dyn Dialect>, LockError>>,
    {
        options.validate()?;
        let dialect = open(options.clone()).await?;
        Ok(SqlBackend::new(SqlStore::over(dialect, options).await?))
    }

    fn new(store: SqlStore) -> SqlBackend {
        SqlBackend { store: Arc::new(store), kinds: Arc::new(OnceCell::new()) }
    }

    /// The exclusive lock.
    pub fn lock(&self) -> SqlLock {
        StoreLock::from_arc(Arc::clone(&self.store))
    }

    /// The read-write lock (docs/contract.md §5.2); the first call creates its tables if missing.
    pub async fn rw(&self) -> Result<SqlRwLock, LockError> {
        Ok(kinds::rw(self.kinds().await?))
    }

    /// The semaphore (docs/contract.md §5.3); the first call creates its tables if missing.
    pub async fn semaphore(&self) -> Result<SqlSemaphore, LockError> {
        Ok(kinds::semaphore(self.kinds().await?))
    }

    async fn kinds(&self) -> Result<Arc<SqlKinds>, LockError> {
        self.kinds.get_or_try_init(|| SqlKinds::over(Arc::clone(&self.store))).await.map(Arc::clone)
    }
}
