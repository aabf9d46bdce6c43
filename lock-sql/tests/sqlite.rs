//! The SQL backend on SQLite: the conformance suite plus SQLite-specific checks.

mod common;
#[macro_use]
mod extras;

use std::time::Duration;

use common::SqlFixture;

lock_conformance::conformance_tests!(sqlite, || async { crate::common::SqlFixture::sqlite().await });
lock_conformance::waiter_child_test!(common::connect_child);
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName, LockService};

extra_tests!(SqlFixture::sqlite);

/// Several independent clients (one pool each, as separate processes would have) on one file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_shared_file_counter_is_exact() {
    common::check_counter(&SqlFixture::sqlite().await.unwrap(), 6, 15).await.unwrap();
}

#[tokio::test]
async fn extra_bad_urls() {
    for url in ["sqlite", "sqlit://x.db", "oracle://h/db"] {
        let r = lock_sql::connect(url, lock_sql::SqlOptions::default()).await;
        assert!(matches!(r, Err(LockError::Config { .. })), "{url}: {:?}", r.err());
    }
    // A file in a directory that does not exist cannot be created: a configuration error.
    let r = lock_sql::connect("sqlite:///nonexistent-dir-dlock/x/locks.db", lock_sql::SqlOptions::default()).await;
    assert!(matches!(r, Err(LockError::Config { .. })), "{:?}", r.err());
}

#[tokio::test]
async fn extra_in_memory_is_not_durable() {
    let lock = lock_sql::connect("sqlite::memory:", lock_sql::SqlOptions::default()).await.unwrap();
    assert!(!lock.capabilities().durable_fencing);
    let name = LockName::new("m").unwrap();
    let o = AcquireOptions::new(Duration::from_secs(2));
    let l = lock.try_acquire(&name, &o).await.unwrap().expect("free");
    assert!(lock.try_acquire(&name, &o).await.unwrap().is_none());
    l.release().await.unwrap();
}

/// The fence is stored in the file: a new client after all others closed continues from it.
#[tokio::test]
async fn extra_fence_survives_reopen() {
    let fx = SqlFixture::sqlite().await.unwrap();
    let name = LockName::new("durable").unwrap();
    let o = AcquireOptions::new(Duration::from_secs(2));
    let first = {
        let lock = fx.sql_client().await.unwrap();
        let l = lock.try_acquire(&name, &o).await.unwrap().expect("free");
        l.release().await.unwrap();
        l.token()
    };
    let lock = fx.sql_client().await.unwrap();
    let l = lock.try_acquire(&name, &o).await.unwrap().expect("free");
    assert!(l.token() > first);
}

const CHILD_DB: &str = "DLOCK_SQLITE_CHILD_DB";
const CHILD_COUNTER: &str = "DLOCK_SQLITE_CHILD_COUNTER";
const CHILD_ROUNDS: u64 = 12;
const CHILDREN: u64 = 4;

/// Separate OS processes (this test binary, re-run in worker mode) share one SQLite file: each
/// adds 1 to a counter kept in a plain file, read-sleep-write under the lock, and checks that the
/// fencing token it got is above the last one written. The final count must be exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_processes_share_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("locks.db").display());
    let counter = dir.path().join("counter");
    tokio::fs::write(&counter, "0 0").await.unwrap();
    // Create the table before the race, as a deployment would.
    drop(lock_sql::connect(&db, lock_sql::SqlOptions::default()).await.unwrap());
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for _ in 0..CHILDREN {
        children.push(
            tokio::process::Command::new(&exe)
                .args(["--exact", "child_worker", "--ignored", "--nocapture", "--test-threads=1"])
                .env(CHILD_DB, &db)
                .env(CHILD_COUNTER, &counter)
                .kill_on_drop(true)
                .spawn()
                .unwrap(),
        );
    }
    for c in children {
        let out = tokio::time::timeout(Duration::from_secs(120), c.wait_with_output()).await.expect("worker hung");
        assert!(out.unwrap().status.success(), "a worker failed");
    }
    let text = tokio::fs::read_to_string(&counter).await.unwrap();
    let count: u64 = text.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(count, CHILDREN * CHILD_ROUNDS, "lost updates across processes: two holders at once");
}

/// The worker of `extra_processes_share_one_file` (does nothing when run on its own).
#[test]
#[ignore = "worker process of extra_processes_share_one_file"]
fn child_worker() {
    let (Ok(db), Ok(counter)) = (std::env::var(CHILD_DB), std::env::var(CHILD_COUNTER)) else { return };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let lock = lock_sql::connect(&db, lock_sql::SqlOptions::default()).await.unwrap();
        let name = LockName::new("cross-process").unwrap();
        let opts = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(100));
        for _ in 0..CHILD_ROUNDS {
            let lease = lock.acquire(&name, &opts).await.unwrap();
            let text = tokio::fs::read_to_string(&counter).await.unwrap();
            let mut it = text.split_whitespace().map(|v| v.parse::<u64>().unwrap());
            let (count, last) = (it.next().unwrap(), it.next().unwrap());
            assert!(lease.token().get() > last, "token {} after {last}", lease.token());
            tokio::time::sleep(Duration::from_millis(3)).await;
            tokio::fs::write(&counter, format!("{} {}", count + 1, lease.token())).await.unwrap();
            lease.release().await.unwrap();
        }
    });
}

/// A lease table without the holder columns (the first versions' shape) is refused with a
/// `Config` error naming them, and left as it was.
#[tokio::test]
async fn extra_old_table_is_refused() {
    use sqlx::{Connection, Executor};
    let fx = SqlFixture::sqlite().await.unwrap();
    let t = fx.options().table;
    let mut admin = sqlx::SqliteConnection::connect(&format!("{}?mode=rwc", fx.url())).await.unwrap();
    let old = format!(
        "CREATE TABLE \"{t}\" (name TEXT NOT NULL PRIMARY KEY, owner TEXT, fence INTEGER NOT NULL, \
         expires_at INTEGER NOT NULL); INSERT INTO \"{t}\" VALUES ('old', NULL, 41, 0)"
    );
    admin.execute(sqlx::AssertSqlSafe(old)).await.unwrap();
    match lock_sql::connect(fx.url(), fx.options()).await {
        Err(lock_core::LockError::Config { reason }) => {
            assert!(reason.contains("holder") && reason.contains("metadata"), "names the columns: {reason}")
        }
        Err(e) => panic!("expected a Config error, got {e}"),
        Ok(_) => panic!("a lease table without the holder columns was used"),
    }
    let columns: i64 =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM pragma_table_info('{t}')")))
            .fetch_one(&mut admin)
            .await
            .unwrap();
    assert_eq!(columns, 4, "no column added");
}

/// Several clients opening one new file at once all connect: switching a new file to WAL is
/// answered `database is locked` without waiting for the busy timeout, and the connect retries
/// it within `connect_timeout` (seen in CI: two `dlock run`s started together on a new file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_concurrent_first_connects_to_a_new_file() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("new.db").display());
        let connects = (0..6).map(|_| lock_sql::connect(&db, lock_sql::SqlOptions::default()));
        for (i, r) in futures::future::join_all(connects).await.into_iter().enumerate() {
            let lock = r.unwrap_or_else(|e| panic!("round {round}, client {i}: {e}"));
            let name = LockName::new(format!("c{i}")).unwrap();
            let lease = lock.try_acquire(&name, &AcquireOptions::new(Duration::from_secs(5))).await.unwrap();
            lease.expect("a free name").release().await.unwrap();
        }
    }
}

/// A release wakes the earliest waiter of this process at once (lock-sql `local.rs`).
#[tokio::test]
async fn extra_a_release_wakes_this_process_s_earliest_waiter() {
    common::check_local_hints(&SqlFixture::sqlite().await.unwrap()).await.unwrap();
}
