//! # lock-conformance
//!
//! The dlock conformance suite (docs/contract.md §7): the same safety cases for every backend, written once
//! as plain `pub async fn case(fx: &dyn Fixture) -> CaseResult` checks ([`cases`]), plus an
//! in-process TCP fault proxy ([`proxy`]), a runner that returns a report ([`runner`]) and the
//! in-memory reference fixture ([`memory`]): what it takes to certify a backend. The test servers
//! the bundled backends are certified against live in the unpublished `dlock-testkit` crate of
//! the dlock workspace.
//!
//! ## Certifying a backend (yours or ours)
//!
//! 1. Implement [`Fixture`]: a label, and a factory of **fresh, independent** clients (each its
//!    own connections and session, as a separate process would have).
//! 2. Call the macro once in a test file: one named test per case, `<module>::<case>`.
//!
//! ```ignore
//! // tests/conformance.rs of your crate
//! lock_conformance::conformance_tests!(mybackend, || async { MyFixture::start().await });
//! ```
//!
//! Add `, strict` as a third argument when your fixture provisions its own server: then a
//! fault case that is `not_applicable` only because a hook is missing fails instead of passing.
//!
//! The factory runs once per test, so every case gets a fresh fixture (and, if the fixture
//! starts one, a fresh server): `cargo nextest run` runs them in parallel processes. A test
//! fails on `failed` or `skipped` with the detail, and passes on `not_applicable` after
//! printing `NOT APPLICABLE <backend>::<case>: <reason>` to stderr. The module also gets a guard
//! test, `conformance_case_list_is_complete`, which fails if the macro's list and
//! [`all_cases`] ever differ.
//!
//! Or run the suite yourself and read the report ([`runner::run_suite`]); that is what
//! `dlock conformance --config FILE` does against a deployment:
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! use std::sync::Arc;
//! use lock_conformance::{memory::MemoryFixture, runner::{run_suite, RunOptions}};
//! let report = run_suite(Arc::new(MemoryFixture::new()), &RunOptions {
//!     filter: Some("fencing".into()),
//!     parallelism: 2,
//!     ..RunOptions::default()
//! }).await;
//! println!("{}", serde_json::to_string_pretty(&report).unwrap());
//! assert!(report.ok());
//! # }
//! ```
//!
//! `examples/custom_backend.rs` of the `dlock-cli` package is a complete third-party backend
//! certified in a few lines (`cargo run --example custom_backend`).
//!
//! ## Fault hooks
//!
//! The `fault_*` cases and the `nemesis` need ways to hurt the deployment. A fixture offers
//! what it can; for the rest the cases report `not_applicable` **with the reason** (never a
//! silent pass):
//!
//! - [`Fixture::linked_client`]: a client whose network the suite can partition, slow down and
//!   reset ([`ClientLink`]). The usual way: start a [`proxy::FaultProxy`] in front of the server
//!   and connect that client through [`proxy::FaultProxy::local_addr`]; for several servers
//!   (Redlock) use a [`proxy::ProxyGroup`].
//! - [`Fixture::server`]: stop (SIGKILL), start, pause (SIGSTOP/SIGCONT) a server the fixture
//!   owns ([`ServerControl`]); dlock-testkit's `LocalServer` does this for a local binary.
//! - [`Fixture::deployment`]: node faults of a replicated deployment ([`DeploymentControl`]: a
//!   member or the primary killed and restarted, a failover, a member's peer links cut) that the
//!   nemesis adds to its faults. For a deployment, [`Fixture::server`] acts on the whole of it
//!   (every member stopped, paused, started), so the single-server cases keep their meaning.
//! - [`Fixture::delete_entry`]: delete a held lock's server-side entry behind the holder's
//!   back (Redis `DEL`, a SQL `UPDATE … SET owner = NULL`, deleting the ZooKeeper node),
//!   keeping the fencing state.
//! - [`Fixture::collect_idle`]: remove an idle name's fencing state as the backend's idle
//!   collection does (the next token must still be higher).
//! - [`Fixture::expiry_bound`]: how long a vanished holder keeps a lock — the ttl for per-lock
//!   leases, the session timeout for per-session ones (ZooKeeper).
//! - [`Fixture::base_ttl`]: the lease time of timing cases; bounds are generous multiples of it.
//! - [`Fixture::queued_waiter`]: a waiter in a process of its own that `queued_head_killed`
//!   kills with SIGKILL while it is queued: [`waiter_process::ChildWaiter`] re-runs the test
//!   binary on the ignored test that [`waiter_child_test!`] defines, which connects from a target
//!   string the fixture chooses (not applicable without it, with the reason).
//!
//! A fixture for a networked backend, with both hooks:
//!
//! ```ignore
//! use std::sync::Arc;
//! use lock_conformance::{async_trait, proxy::FaultProxy, ClientLink, Fixture, LinkedClient, ServerControl};
//! use dlock_testkit::servers::TestServer; // or however your tests get a server
//! use lock_core::{DistributedLock, LockError};
//!
//! struct MyFixture { server: TestServer }
//!
//! #[async_trait]
//! impl Fixture for MyFixture {
//!     fn backend(&self) -> &str { "mybackend" }
//!     async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
//!         Ok(Arc::new(MyLock::connect(&self.server.url).await?))
//!     }
//!     async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
//!         let Some(addr) = self.server.addr else { return Ok(None) };
//!         let proxy = FaultProxy::start(addr).await?;          // one proxy per linked client
//!         let client = MyLock::connect(&format!("my://{}", proxy.local_addr())).await?;
//!         Ok(Some(LinkedClient { client: Arc::new(client), link: proxy }))
//!     }
//!     fn server(&self) -> Option<Arc<dyn ServerControl>> { self.server.control() }
//!     fn provenance(&self) -> String { self.server.provenance() }
//! }
//! ```
//!
//! [`impl_fixture!`] writes the label and the client factories (exclusive, and read-write and
//! semaphore where the backend has them) from one expression each; the hooks follow as above.
//!
//! ## The cases
//!
//! [`all_cases`] lists them (name, one line each). By theme: exclusion (`mutual_exclusion`,
//! `counter_exact`, `independent_names`), fencing (`fencing_monotonic`,
//! `fenced_register_rejects_former_holder`, `fencing_after_expiry`), the lease (`lease_validity`,
//! `auto_renew_keeps_lock`, `manual_renew_extends`, `expiry_of_vanished_holder`,
//! `release_is_owner_checked`, `renew_is_owner_checked`, `lost_signal`, `release_idempotent`,
//! `drop_releases`, `run_locked`), waiting (`try_acquire_semantics`, `acquire_timeout`,
//! `cancel_safety`, `wake_latency`, `fifo_order`, `fifo_no_overtake`), names and inputs (`hostile_names`,
//! `invalid_input`, `declared_kinds`), the other kinds (`rw_lock`, `semaphore`), faults
//! (`fault_pause_past_ttl`, `fault_connection_cut`, `fault_partition`, `fault_latency`,
//! `fault_server_pause`, `fault_server_restart`, `fault_unavailable`, `fault_entry_deleted`,
//! `fault_entry_deleted_among_many`) and
//! the randomized `nemesis`; then, appended: several locks at once (`acquire_all_*`), the server's
//! bound on validity (`validity_within_server_bound`), re-grants (`regrant_extends_lease`), the
//! quiet period after an empty restart (`fault_restart_quiet_period`), release cancelled at each
//! await point (`release_cancelled`), retried after a failure (`release_retried_after_failure`),
//! whose answer was lost with the connection (`release_reply_lost`), a slow grant renewed in
//! time (`slow_grant_renewed_in_time`), the lost signal by `valid_until` (`lost_by_valid_until`),
//! busy at the deadline is `Timeout` (`busy_at_deadline_is_timeout`), `WaitPolicy::Forever`
//! outlasting transient errors (`forever_survives_transient_errors`), long look-alike names
//! (`long_name_prefixes`), and the read-write lock and semaphore under faults
//! (`kinds_pause_past_ttl`, `kinds_server_pause`, `kinds_nemesis`), leader election (`election_nemesis`, `election_resign_hands_over`,
//! `election_observers_converge`, `election_observers_notified`), run-once jobs (`hold_at_least_early_release`,
//! `hold_at_least_late_release`), the fairness a `fifo` backend owes (`fifo_no_overtaking`,
//! `fifo_vanished_head`) and the same for its read-write locks and semaphores when their own
//! capabilities declare `fifo` (`rw_fifo_order`: reader, writer, reader served in arrival order,
//! no reader joining the readers ahead of a queued writer; `rw_fifo_no_overtaking`: neither the
//! releasing reader nor a newcomer overtakes a queued writer; `semaphore_fifo_order`: freed
//! permits go to the waiters in arrival order, never to a `try_acquire`;
//! `kinds_fifo_vanished_head`: a waiter that registered and vanished, through
//! `Fixture::lease_stores`, holds the next back for a bounded time only), forged grant messages
//! that must not make a waiter hold (`forged_grant_ignored`, through [`Fixture::forge_grant`]), a
//! grant to a waiter that left at that instant (`waiter_departed_at_grant`, bounded by
//! [`Fixture::untaken_grant_bound`]), a panicking hook that loses only its own lease
//! (`panicking_hook_loses_only_its_lease`), waiters that leave a few ms before or after the
//! release — their `wait(d)` runs out (`wait_deadline_races_release`), their polled future is
//! dropped (`dropped_wait_races_release`): they hold the lease, or the lock is free within
//! 100 ms — and a queued waiter in another process killed with SIGKILL
//! (`queued_head_killed`, through [`Fixture::queued_waiter`]). Each runs under
//! an overall time limit ([`Case::time_limit`]): a hang is a failure with a clear detail, never
//! a stuck test.
//!
//! Every checker can fail: `tests/mutants.rs` runs cases against lease stores with one
//! deliberate bug each (no exclusion, a renew that releases, a release without owner check,
//! repeated tokens, a token handed out twice after a takeover, leases that never or too early
//! expire, colliding or truncated names, false `fifo` and `durable_fencing` claims, a queue that
//! newcomers overtake or whose vanished head never expires, a read-write lock and semaphore whose
//! queue single tries overtake — `tests/mutants/kinds.rs` —, a hand-off whose waiter trusts the
//! grant message or forgets, when it leaves, that it may have been handed the lock, one that
//! ignores a leaving waiter, one whose grant to the queue's head runs for the head's whole ttl
//! instead of a claim window, and a client
//! whose leases all renew through one task that a panicking hook ends) and asserts
//! the cases report `failed`; its correct store, with link latency, must pass the release,
//! deadline and renewal cases that fail on a `Lease`/`StoreLock` without their fixes.
//!
//! ## Capabilities decide what applies
//!
//! Every case reads the backend's [`lock_core::Capabilities`] and checks each promise made:
//! `fifo` → `fifo_order`, `fifo_no_overtake`, `fifo_no_overtaking`, `fifo_vanished_head` (and,
//! read from the kind client, `rw_fifo_order`, `rw_fifo_no_overtaking`, `semaphore_fifo_order`,
//! `kinds_fifo_vanished_head`); `durable_fencing` → tokens rise across `fault_server_restart`;
//! `durable_leases` → a holder keeps its lease across it (and otherwise must be told it lost
//! it); `lease_model` → how a holder "vanishes" (stops renewing for per-lock leases; is cut off
//! by its link for per-session ones); `wake` → the wake-up latency bound; `min_ttl`/`max_ttl` →
//! option validation; `rw_lock` / `semaphore` → the `rw_lock` and `semaphore` cases, which fail
//! when a declared kind's fixture offers no client of that kind.
//!
//! ## Servers for the bundled backends
//!
//! The dlock workspace's own tests get theirs from `dlock-testkit` (a dev-dependency, not
//! published): a URL in `DLOCK_TEST_<BACKEND>_URL`; else a container when that crate is built
//! with its `containers` feature and `docker info` answers; else a local server binary started
//! on a free port in a temp dir and stopped by PID. It prints which one it used.
//!
//! ## Knobs
//!
//! - `DLOCK_NEMESIS_SECS` (default 4): how long the nemesis runs; `DLOCK_NEMESIS_SEED` replays one.
//! - `DLOCK_TEST_<BACKEND>_URL`: use an existing server (fault cases needing server control are
//!   then `not_applicable`).

pub mod cases;
pub mod fixture;
pub mod forgery;
#[doc(hidden)]
pub mod harness;
pub mod memory;
pub mod proxy;
pub mod runner;
pub mod waiter_process;

pub use async_trait::async_trait;
/// What [`impl_fixture!`] names from `lock_core`, whatever the caller imports.
#[doc(hidden)]
pub mod __private {
    pub use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName};
}
pub use cases::{all_cases, Case, CaseError, CaseResult};
pub use fixture::{
    kind_lease_stores, ClientLink, DeploymentControl, DownSwitch, Fixture, LabelledStores, LinkedClient, ServerControl,
};

/// Generates one test per conformance case, in a module named `$module`, each calling
/// `$factory` (a closure returning a future of `Result<impl Fixture, LockError>`) for a fresh
/// fixture. Each test runs on a multi-threaded tokio runtime with 2 workers (what
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` gives, without requiring the
/// calling crate to enable tokio's macros). Also generates the guard test
/// `conformance_case_list_is_complete`.
///
/// With a third argument `strict`, a case that is `not_applicable` only because the fixture
/// lacks a fault hook ([`Fixture::linked_client`], [`Fixture::server`]) fails — unless the
/// server came from `DLOCK_TEST_<BACKEND>_URL` ([`Fixture::provenance`] starting with `env `).
/// The bundled backends use it, so none of them silently skips a case its capabilities allow.
///
/// ```ignore
/// lock_conformance::conformance_tests!(memory, || async {
///     Ok::<_, lock_core::LockError>(lock_conformance::memory::MemoryFixture::new())
/// });
/// lock_conformance::conformance_tests!(redis, || async { RedisFixture::start().await }, strict);
/// ```
///
/// With `strict, one_fixture(n)` it generates a single test, `$module::suite`, that runs every
/// case (n at a time) against one fixture: for a deployment too costly to start per case (a
/// ZooKeeper ensemble, Redis with Sentinel). `cargo nextest` runs each test in its own process,
/// so this is how a test binary shares one deployment. The fixture must then hold up to every
/// case in turn, faults included.
///
/// ```ignore
/// lock_conformance::conformance_tests!(ensemble, || async { EnsembleFixture::start().await }, strict, one_fixture(4));
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (@mode $mode:ident, $module:ident, $factory:expr) => {
        $crate::__conformance_module! {
            $mode, $module, $factory,
            [
                mutual_exclusion,
                counter_exact,
                independent_names,
                fencing_monotonic,
                fenced_register_rejects_former_holder,
                fencing_after_expiry,
                lease_validity,
                auto_renew_keeps_lock,
                manual_renew_extends,
                expiry_of_vanished_holder,
                release_is_owner_checked,
                renew_is_owner_checked,
                lost_signal,
                release_idempotent,
                drop_releases,
                run_locked,
                try_acquire_semantics,
                acquire_timeout,
                cancel_safety,
                wake_latency,
                fifo_order,
                fifo_no_overtake,
                hostile_names,
                invalid_input,
                declared_kinds,
                rw_lock,
                semaphore,
                fault_pause_past_ttl,
                fault_connection_cut,
                fault_partition,
                fault_latency,
                fault_server_pause,
                fault_server_restart,
                fault_unavailable,
                fault_entry_deleted,
                fault_entry_deleted_among_many,
                nemesis,
                acquire_all_holds_every_name,
                acquire_all_releases_on_failure,
                acquire_all_opposite_orders,
                validity_within_server_bound,
                regrant_extends_lease,
                fault_restart_quiet_period,
                release_cancelled,
                release_retried_after_failure,
                release_reply_lost,
                busy_at_deadline_is_timeout,
                forever_survives_transient_errors,
                long_name_prefixes,
                kinds_pause_past_ttl,
                kinds_server_pause,
                kinds_nemesis,
                slow_grant_renewed_in_time,
                lost_by_valid_until,
                election_nemesis,
                election_resign_hands_over,
                election_observers_converge,
                election_observers_notified,
                hold_at_least_early_release,
                hold_at_least_late_release,
                inspect_reports_holder,
                inspect_list_by_prefix,
                inspect_hostile_holder,
                fifo_no_overtaking,
                fifo_vanished_head,
                rw_fifo_order,
                rw_fifo_no_overtaking,
                semaphore_fifo_order,
                kinds_fifo_vanished_head,
                idle_collected_tokens_rise,
                forged_grant_ignored,
                waiter_departed_at_grant,
                panicking_hook_loses_only_its_lease,
                handles,
                wait_deadline_races_release,
                dropped_wait_races_release,
                queued_head_killed,
            ]
        }
    };
    ($module:ident, $factory:expr, strict, one_fixture($parallelism:expr)) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn suite() {
                $crate::harness::run_suite_test($crate::harness::Mode::Strict, $parallelism, $factory);
            }
        }
    };
    ($module:ident, $factory:expr, strict) => {
        $crate::conformance_tests!(@mode Strict, $module, $factory);
    };
    ($module:ident, $factory:expr $(,)?) => {
        $crate::conformance_tests!(@mode Lenient, $module, $factory);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_module {
    ($mode:ident, $module:ident, $factory:expr, [$($case:ident),* $(,)?]) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[test]
                fn $case() {
                    $crate::harness::run_test(stringify!($case), $crate::harness::Mode::$mode, $factory);
                }
            )*

            #[test]
            fn conformance_case_list_is_complete() {
                $crate::harness::check_case_list(&[$(stringify!($case)),*]);
            }
        }
    };
}
