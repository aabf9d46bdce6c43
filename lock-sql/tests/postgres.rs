//! The SQL backend on PostgreSQL (`DLOCK_TEST_POSTGRES_URL`, default the local test server): the
//! conformance suite plus PostgreSQL-specific checks.

mod common;

use std::time::Duration;

use common::SqlFixture;

lock_conformance::conformance_tests!(postgres, || async { crate::common::SqlFixture::postgres().await });

/// The cases that need control of the server process, against a private server per test
/// (the shared system server cannot be stopped): durability of fences and leases across a
/// SIGKILL and restart, a paused (SIGSTOP) server, a stopped one, and the nemesis.
mod postgres_server {
    macro_rules! server_cases {
        ($($case:ident),*) => {$(
            #[test]
            fn $case() {
                lock_conformance::harness::run_test(stringify!($case), lock_conformance::harness::Mode::Strict, || async {
                    crate::common::SqlFixture::postgres_private().await
                });
            }
        )*};
    }
    server_cases!(fault_server_restart, fault_server_pause, fault_unavailable, nemesis);
}

#[tokio::test]
async fn extra_hostile_names() {
    common::check_hostile_names(&SqlFixture::postgres().await.unwrap()).await.unwrap();
}

#[tokio::test]
async fn extra_takeover_bumps_fence() {
    common::check_takeover_fence(&SqlFixture::postgres().await.unwrap()).await.unwrap();
}

#[tokio::test]
async fn extra_idempotent_and_remaining() {
    common::check_idempotent_and_remaining(&SqlFixture::postgres().await.unwrap()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_counter_is_exact() {
    common::check_counter(&SqlFixture::postgres().await.unwrap(), 6, 15).await.unwrap();
}

#[tokio::test]
async fn extra_bad_table_is_config_error() {
    let fx = SqlFixture::postgres().await.unwrap();
    common::check_bad_table(fx.url()).await;
}

#[tokio::test]
async fn extra_unreachable_is_unavailable() {
    common::check_unreachable("postgres://postgres@127.0.0.1:1/test").await;
}

/// LISTEN/NOTIFY: a waiter gets the lock right after the release, long before any poll or
/// the 10 s lease would have let it in.
#[tokio::test]
async fn extra_notify_wakes_waiter_fast() {
    let fx = SqlFixture::postgres().await.unwrap();
    let latency = common::measure_wake_latency(&fx).await.unwrap();
    eprintln!("postgres wake-up latency after release: {latency:?}");
    assert!(latency < Duration::from_millis(300), "{latency:?}");
}
