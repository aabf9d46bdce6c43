//! The checks of `common` as tests, written once for every database file (`sqlite.rs`,
//! `postgres.rs`, `mysql.rs`) instead of a copy of each test in each file.

/// `check_tests!(FIXTURE; test => check(args…), …)`: for each pair, a test named `test` that
/// runs `common::check(&FIXTURE().await?, args…)` and fails on its error. `multi` before the
/// list runs them on two worker threads (checks that need tasks to run in parallel).
macro_rules! check_tests {
    ($fx:path; $($test:ident => $check:ident $(($($arg:expr),*))?),* $(,)?) => {$(
        #[tokio::test]
        async fn $test() {
            common::$check(&$fx().await.unwrap() $($(, $arg)*)?).await.unwrap();
        }
    )*};
    (multi $fx:path; $($test:ident => $check:ident $(($($arg:expr),*))?),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            common::$check(&$fx().await.unwrap() $($(, $arg)*)?).await.unwrap();
        }
    )*};
}

/// The checks every database passes, on `FIXTURE`.
macro_rules! extra_tests {
    ($fx:path) => {
        check_tests!($fx;
            extra_hostile_names => check_hostile_names,
            extra_takeover_bumps_fence => check_takeover_fence,
            extra_idempotent_and_remaining => check_idempotent_and_remaining,
            extra_kinds_hostile_names => check_kinds_hostile_names,
            extra_kinds_expiry_and_takeover => check_kinds_expiry_and_takeover,
        );
        check_tests!(multi $fx;
            extra_cancelled_waiters_leave_no_trace => check_cancelled_waiters_leave_no_trace,
        );

        #[tokio::test]
        async fn extra_bad_table_is_config_error() {
            let fx = $fx().await.unwrap();
            common::check_bad_table(fx.url()).await;
        }
    };
}

/// A database server's (PostgreSQL, MySQL) tests on the shared fixture `SqlFixture::DB`:
/// [`extra_tests!`], the checks of a server with its own users and connections, a server from
/// the testkit's provisioner `dlock_testkit::servers::DB::DB` (env URL, else a private local
/// server), the TLS modes against an impostor speaking protocol `Wire::WIRE`, and in module
/// `MODULE` the conformance cases that need control of the server process, against a private
/// server per test from `SqlFixture::PRIVATE` (the shared system server cannot be stopped):
/// durability of fences and leases across a SIGKILL and restart, a paused (SIGSTOP) server, a
/// stopped one, and the nemesis.
#[allow(unused_macros, reason = "sqlite.rs has no server process to control")]
macro_rules! server_extra_tests {
    ($module:ident, $db:ident, $private:ident, $wire:ident) => {
        extra_tests!(SqlFixture::$db);

        /// The provisioned server is one this backend works against.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn extra_provisioned_server() {
            let server = dlock_testkit::servers::$db::$db().await.unwrap();
            common::check_provisioned(&server.url).await;
        }

        /// Verifying TLS modes refuse a self-signed impostor and accept it with its
        /// CA; the weak modes hand it the session (see tests/common/fake_tls.rs).
        #[tokio::test]
        async fn extra_tls_modes_against_an_impostor() {
            common::check_tls_modes(common::Wire::$wire).await;
        }

        check_tests!(SqlFixture::$db;
            extra_release_after_lost_reply => check_release_after_lost_reply,
            extra_overtaken_acquire_is_freed_soon => check_overtaken_acquire_is_freed_soon,
            extra_squatted_tables_are_refused => check_squatted_tables,
            extra_schema_qualified_table => check_qualified_table,
            extra_old_table_is_refused => check_old_table_is_refused,
        );
        check_tests!(multi SqlFixture::$db;
            extra_renewals_not_starved => check_renewals_not_starved,
            extra_late_statements_never_shorten => check_late_statements_never_shorten,
            extra_least_privilege => check_least_privilege,
            extra_counter_is_exact => check_counter(6, 15),
        );

        mod $module {
            server_cases!(crate::common::SqlFixture::$private; fault_server_restart, fault_server_pause, fault_unavailable, nemesis);
        }
    };
}

/// The conformance cases `CASE…` as tests against a fresh server from `PRIVATE` each.
#[allow(unused_macros, reason = "sqlite.rs has no server process to control")]
macro_rules! server_cases {
    ($private:path; $($case:ident),*) => {$(
        #[test]
        fn $case() {
            lock_conformance::harness::run_test(
                stringify!($case),
                lock_conformance::harness::Mode::Strict,
                || async { $private().await },
            );
        }
    )*};
}
