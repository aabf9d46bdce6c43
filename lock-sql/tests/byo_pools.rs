//! `SqlBackend` over the application's own MySQL and SQLite pools (PostgreSQL runs the whole
//! conformance suite that way, in `postgres_byo.rs`): every kind works over the pool, and
//! SQLite reports durable fencing only when the application's pool is set up for it; a
//! release wakes this process's waiters over such pools at once (lock-sql `local.rs`), as it
//! does over the crate's own.

mod common;

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockName, LockService};
use lock_sql::{SqlBackend, SqlOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

fn options() -> SqlOptions {
    let table = format!("dlock_byo_{:08x}", rand_u32());
    SqlOptions { request_timeout: Duration::from_secs(2), ..SqlOptions::default().table(table) }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() as u32
}

/// Each kind once, and a second holder refused where it must be.
async fn every_kind(backend: &SqlBackend) {
    let o = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(2));
    let name = LockName::new("byo").expect("name");
    let lock = backend.lock();
    let lease = lock.acquire(&name, &o).await.expect("exclusive");
    assert!(backend.lock().try_acquire(&name, &o).await.expect("try").is_none(), "held");
    lease.release().await.expect("release");
    let rw = backend.rw().await.expect("rw");
    let (a, b) = (rw.acquire_read(&name, &o).await.expect("read"), rw.acquire_read(&name, &o).await.expect("read"));
    assert!(rw.try_acquire_write(&name, &o).await.expect("try write").is_none(), "readers hold it");
    a.release().await.expect("release");
    b.release().await.expect("release");
    let sem = backend.semaphore().await.expect("semaphore");
    let p = sem.acquire_permit(&name, 1, &o).await.expect("permit");
    assert!(sem.try_acquire_permit(&name, 1, &o).await.expect("try permit").is_none(), "one permit");
    p.release().await.expect("release");
}

#[tokio::test]
async fn sqlite_pool() {
    let dir = tempfile::tempdir().expect("temp dir");
    let connect = SqliteConnectOptions::new()
        .filename(dir.path().join("app.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(2));
    let pool = SqlitePoolOptions::new().max_connections(4).connect_with(connect.clone()).await.expect("pool");
    let backend = SqlBackend::from_sqlite_pool(pool, options()).await.expect("backend");
    assert!(backend.lock().capabilities().durable_fencing, "WAL + FULL is durable");
    every_kind(&backend).await;

    let normal = connect.filename(dir.path().join("normal.db")).synchronous(SqliteSynchronous::Normal);
    let pool = SqlitePoolOptions::new().max_connections(2).connect_with(normal).await.expect("pool");
    let backend = SqlBackend::from_sqlite_pool(pool, options()).await.expect("backend");
    assert!(!backend.lock().capabilities().durable_fencing, "synchronous = NORMAL is not");
}

fn mysql_url() -> String {
    std::env::var("DLOCK_TEST_MYSQL_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "mysql://root@127.0.0.1:3306/test".to_owned())
}

#[tokio::test]
async fn mysql_pool() {
    let url = mysql_url();
    let pool = sqlx::MySqlPool::connect(&url).await.expect("the application's pool");
    let opts = options();
    let backend = SqlBackend::from_mysql_pool(pool.clone(), opts.clone()).await.expect("backend");
    every_kind(&backend).await;
    let t = &opts.table;
    for t in [t.clone(), format!("{t}_waiters"), format!("{t}_counters"), format!("{t}_holders")] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS `{t}`"))).execute(&pool).await;
    }
}

/// A backend from the URL and two over the application's pool (one on another table) share the
/// release hints of the process: the pool's waiters are woken at once, not at their next poll.
#[tokio::test]
async fn mysql_pool_waiters_are_woken_by_this_process_s_releases() {
    let url = mysql_url();
    let pool = sqlx::MySqlPool::connect(&url).await.expect("the application's pool");
    let (opts, other) = (options(), options());
    let a = SqlBackend::connect(&url, opts.clone()).await.expect("backend from the URL");
    let b = SqlBackend::from_mysql_pool(pool.clone(), opts.clone()).await.expect("backend over the pool");
    let c = SqlBackend::from_mysql_pool(pool.clone(), other.clone()).await.expect("backend on another table");
    common::check_hints_between(&a, &b, &c).await.expect("hints");
    for t in [&opts.table, &other.table] {
        let drop = format!("DROP TABLE IF EXISTS `{t}`, `{t}_waiters`");
        let _ = sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&pool).await;
    }
}

/// The same on SQLite: the file names the database, whichever way it was opened.
#[tokio::test]
async fn sqlite_pool_waiters_are_woken_by_this_process_s_releases() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("app.db");
    let connect = SqliteConnectOptions::new()
        .filename(&file)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(2));
    let pool = SqlitePoolOptions::new().max_connections(4).connect_with(connect).await.expect("pool");
    let opts = options();
    let url = format!("sqlite://{}", file.display());
    let a = SqlBackend::connect(&url, opts.clone()).await.expect("backend from the URL");
    let b = SqlBackend::from_sqlite_pool(pool.clone(), opts).await.expect("backend over the pool");
    let c = SqlBackend::from_sqlite_pool(pool, options()).await.expect("backend on another table");
    common::check_hints_between(&a, &b, &c).await.expect("hints");
}
