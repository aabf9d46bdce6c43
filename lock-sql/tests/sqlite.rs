//! The SQL backend on SQLite: the conformance suite plus SQLite-specific checks.

mod common;

use std::time::Duration;

use common::SqlFixture;

lock_conformance::conformance_tests!(sqlite, || async { crate::common::SqlFixture::sqlite().await });
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName};

#[tokio::test]
async fn extra_hostile_names() {
    common::check_hostile_names(&SqlFixture::sqlite().await.unwrap()).await.unwrap();
}

#[tokio::test]
async fn extra_takeover_bumps_fence() {
    common::check_takeover_fence(&SqlFixture::sqlite().await.unwrap()).await.unwrap();
}

#[tokio::test]
async fn extra_idempotent_and_remaining() {
    common::check_idempotent_and_remaining(&SqlFixture::sqlite().await.unwrap()).await.unwrap();
}

/// Several independent clients (one pool each, as separate processes would have) on one file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_shared_file_counter_is_exact() {
    common::check_counter(&SqlFixture::sqlite().await.unwrap(), 6, 15).await.unwrap();
}

#[tokio::test]
async fn extra_bad_table_is_config_error() {
    let fx = SqlFixture::sqlite().await.unwrap();
    common::check_bad_table(fx.url()).await;
}

#[tokio::test]
async fn extra_bad_urls() {
    for url in ["sqlite", "sqlit://x.db", "oracle://h/db"] {
        let r = lock_sql::connect(url, lock_sql::SqlOptions::default()).await;
        assert!(matches!(r, Err(LockError::Config { .. })), "{url}: {:?}", r.err());
    }
    // A file in a directory that does not exist cannot be created: an error, not a panic.
    let r = lock_sql::connect("sqlite:///nonexistent-dir-dlock/x/locks.db", lock_sql::SqlOptions::default()).await;
    assert!(r.is_err());
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
