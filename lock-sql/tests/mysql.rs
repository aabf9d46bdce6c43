//! The SQL backend on MySQL/MariaDB (`DLOCK_TEST_MYSQL_URL`, default the local test server): the
//! conformance suite plus MySQL-specific checks.

mod common;
#[macro_use]
mod extras;

use std::time::Duration;

use common::SqlFixture;

lock_conformance::conformance_tests!(mysql, || async { crate::common::SqlFixture::mysql().await });

server_extra_tests!(mysql_server, SqlFixture::mysql, crate::common::SqlFixture::mysql_private);

#[tokio::test]
async fn extra_unreachable_is_unavailable() {
    common::check_unreachable("mysql://root@127.0.0.1:1/test").await;
    common::check_unreachable("mariadb://root@127.0.0.1:1/test").await;
}

/// Polling: a waiter gets the lock within its capped back-off after the release.
#[tokio::test]
async fn extra_poll_wakes_waiter() {
    let fx = SqlFixture::mysql().await.unwrap();
    let latency = common::measure_wake_latency(&fx).await.unwrap();
    eprintln!("mysql wake-up latency after release: {latency:?}");
    assert!(latency < Duration::from_millis(1000), "{latency:?}");
}

/// MySQL proper has no `INSERT … RETURNING`; on MariaDB the same two-statement path (upsert,
/// then read the row back) is forced by `DLOCK_SQL_MYSQL_RETURNING=0`. Run under nextest, this
/// test has its process to itself; under `cargo test` other tests of this binary may take the
/// same path meanwhile, which is equally correct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_mysql_path_without_returning() {
    std::env::set_var("DLOCK_SQL_MYSQL_RETURNING", "0");
    let fx = SqlFixture::mysql().await.unwrap();
    common::check_idempotent_and_remaining(&fx).await.unwrap();
    common::check_hostile_names(&fx).await.unwrap();
    common::check_counter(&fx, 5, 10).await.unwrap();
    common::check_takeover_fence(&fx).await.unwrap();
}

/// `lock_conformance::servers::mysql::mysql()` (env URL, else a private local server) gives a
/// server this backend works against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_provisioned_server() {
    use lock_core::{AcquireOptions, DistributedLock, LockName};
    let server = lock_conformance::servers::mysql::mysql().await.unwrap();
    let lock = lock_sql::connect(&server.url, lock_sql::SqlOptions::default()).await.unwrap();
    let name = LockName::new("provisioned").unwrap();
    let lease = lock.try_acquire(&name, &AcquireOptions::new(Duration::from_secs(2))).await.unwrap().expect("free");
    lease.release().await.unwrap();
}

/// Durable fencing is declared only when InnoDB writes its log at every commit (issue 10.13):
/// the setting is global, so lock-sql checks it at connect. A private server, switched to 2
/// (commits survive a crash of mysqld but not of the host) and back to 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_durable_fencing_follows_innodb_flush_setting() {
    use lock_conformance::servers::mysql::MysqlServer;
    use lock_core::{DistributedLock, DistributedSemaphore};
    use sqlx::{Connection, Executor};
    let server = MysqlServer::start_local().await.expect("a private mariadb server");
    let mut admin = sqlx::MySqlConnection::connect(server.url()).await.unwrap();
    let options = lock_sql::SqlOptions::default();
    for (flush, durable) in [(2, false), (0, false), (1, true)] {
        admin
            .execute(sqlx::AssertSqlSafe(format!("SET GLOBAL innodb_flush_log_at_trx_commit = {flush}")))
            .await
            .unwrap();
        let lock = lock_sql::connect(server.url(), options.clone()).await.unwrap();
        assert_eq!(lock.capabilities().durable_fencing, durable, "innodb_flush_log_at_trx_commit = {flush}");
        let sem = lock_sql::connect_semaphore(server.url(), options.clone()).await.unwrap();
        assert_eq!(sem.capabilities().durable_fencing, durable, "semaphore, innodb_flush_log_at_trx_commit = {flush}");
    }
}
