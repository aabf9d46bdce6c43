//! Every checker must be able to fail (Curator's cluster test once had an inverted check whose
//! failures were swallowed). Each test here runs a case against a lease store with one
//! deliberate bug and asserts the case reports `failed`.

use std::sync::Arc;

use lock_conformance::runner::{run_suite, Outcome, RunOptions};
use lock_conformance::Fixture;

#[path = "mutants/kinds.rs"]
mod kinds;
#[path = "mutants/one_watchdog.rs"]
mod one_watchdog;
#[path = "mutants/store.rs"]
mod store;

use store::{Bug, Mutant, Server};

async fn outcomes(bug: Bug, cases: &[&str]) -> Vec<(String, Outcome, String)> {
    let mut out = Vec::new();
    for case in cases {
        let fx = Arc::new(Mutant(Server::new(bug)));
        let report = run_suite(fx, &RunOptions { filter: Some((*case).to_owned()), ..RunOptions::default() }).await;
        for c in report.cases.into_iter().filter(|c| c.name == format!("mutant::{case}")) {
            out.push((c.name, c.outcome, c.detail));
        }
    }
    out
}

/// Every one of the `ran` cases' outcomes is `expected`, and none of the `cases` is missing.
fn assert_outcomes(
    store: impl std::fmt::Debug,
    ran: Vec<(String, Outcome, String)>,
    cases: &[&str],
    expected: Outcome,
) {
    assert_eq!(ran.len(), cases.len(), "{store:?}: not every case ran: {ran:?}");
    for (name, outcome, detail) in ran {
        assert_eq!(outcome, expected, "{store:?}: {name} should be {expected:?}, got {outcome:?}: {detail}");
        eprintln!("{store:?}: {name} {outcome:?} as it should: {detail}");
    }
}

async fn assert_fails(bug: Bug, cases: &[&str]) {
    assert_outcomes(bug, outcomes(bug, cases).await, cases, Outcome::Failed);
}

/// The store with `bug` (a correct variant) passes every one of `cases`.
async fn assert_passes(bug: Bug, cases: &[&str]) {
    assert_outcomes(bug, outcomes(bug, cases).await, cases, Outcome::Passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_store_passes_the_cases_the_mutants_fail() {
    let cases = [
        "mutual_exclusion",
        "counter_exact",
        "fencing_monotonic",
        "manual_renew_extends",
        "renew_is_owner_checked",
        "release_is_owner_checked",
        "expiry_of_vanished_holder",
        "fault_server_restart",
        "fault_partition",
        "fault_entry_deleted",
        "fault_entry_deleted_among_many",
        // Each of these fails on a lease or a StoreLock without its fix:
        // the store's link latency keeps a release in flight when its caller goes away, and cuts
        // the last attempt before a deadline short.
        "release_cancelled",
        "release_retried_after_failure",
        "busy_at_deadline_is_timeout",
        "forever_survives_transient_errors",
        "long_name_prefixes",
        "slow_grant_renewed_in_time",
        "lost_by_valid_until",
        "idle_collected_tokens_rise",
    ];
    let not_passed: Vec<String> = outcomes(Bug::None, &cases)
        .await
        .into_iter()
        .filter(|(_, outcome, _)| *outcome != Outcome::Passed)
        .map(|(name, outcome, detail)| format!("{name}: {outcome:?}: {detail}"))
        .collect();
    assert!(not_passed.is_empty(), "a correct store must pass:\n{}", not_passed.join("\n"));
}

/// One test per mutant: the test's name, the bug, and the cases that must catch it.
macro_rules! caught {
    ($($(#[$doc:meta])* $name:ident: $bug:ident => [$($case:literal),+ $(,)?];)+) => {
        $(
            $(#[$doc])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                assert_fails(Bug::$bug, &[$($case),+]).await;
            }
        )+
    };
}

caught! {
    no_exclusion_is_caught: NoExclusion => [
        "mutual_exclusion", "counter_exact", "try_acquire_semantics", "acquire_timeout", "hostile_names", "nemesis",
    ];
    /// `hold_at_least` rests on an owner-checked renewal that moves the lease's end to `t0 + d`:
    /// a store whose renewal frees the lock lets the next holder in right after the early release.
    a_hold_that_frees_early_is_caught: RenewReleases => ["hold_at_least_early_release"];
    renew_that_releases_is_caught: RenewReleases => [
        "renew_is_owner_checked", "manual_renew_extends", "auto_renew_keeps_lock",
    ];
    release_without_owner_check_is_caught: ReleaseAnyOwner => ["release_is_owner_checked", "fault_partition"];
    repeated_tokens_are_caught: TokensRepeat => [
        "fencing_monotonic", "fenced_register_rejects_former_holder", "fencing_after_expiry", "fault_pause_past_ttl",
    ];
    a_lease_that_never_expires_is_caught: NeverExpires => ["expiry_of_vanished_holder", "fault_partition"];
    a_lease_that_expires_early_is_caught: ExpiresEarly => ["expiry_of_vanished_holder", "auto_renew_keeps_lock"];
    a_false_durable_fencing_claim_is_caught: ClaimsDurableFencing => ["fault_server_restart"];
    colliding_names_are_caught: StripsNames => ["independent_names", "hostile_names"];
    a_renewal_that_recreates_a_deleted_entry_is_caught: RenewUpserts => ["fault_entry_deleted"];
    truncated_names_are_caught: TruncatesNames => ["long_name_prefixes"];
    a_token_handed_out_twice_is_caught: RepeatsStolenToken => [
        "fencing_after_expiry", "fault_pause_past_ttl", "fault_partition",
    ];
    a_collection_that_resets_tokens_is_caught: CollectResetsTokens => ["idle_collected_tokens_rise"];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_false_fifo_claim_is_caught_or_lucky() {
    // Polling waiters come in a random order: 1 in 24 runs may happen to be in order, so try
    // a few times; FIFO must fail at least once.
    for _ in 0..3 {
        if outcomes(Bug::ClaimsFifo, &["fifo_order"]).await.iter().any(|(_, o, _)| *o == Outcome::Failed) {
            return;
        }
    }
    panic!("a polling store claiming fifo passed fifo_order three times");
}

/// The fairness cases pass on a correct queue and fail on a queue that newcomers overtake or
/// whose vanished head never expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_queue_passes_and_its_breaches_are_caught() {
    let fair = ["fifo_order", "fifo_no_overtaking", "fifo_vanished_head"];
    assert_passes(Bug::Fair, &fair).await;
    assert_fails(Bug::FairOvertaken, &["fifo_no_overtaking"]).await;
    assert_fails(Bug::FairHeadStuck, &["fifo_vanished_head"]).await;
}

/// A store that hands the lock to its queue's head with a message passes the grant cases;
/// one whose waiter trusts the message, and one whose departing waiter forgets it may have been
/// handed the lock, are caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_passes_and_its_breaches_are_caught() {
    let grants = ["forged_grant_ignored", "waiter_departed_at_grant", "mutual_exclusion", "fifo_order"];
    assert_passes(Bug::HandOff, &grants).await;
    assert_fails(Bug::TrustsMessage, &["forged_grant_ignored"]).await;
    assert_fails(Bug::AbandonForgetsPlace, &["waiter_departed_at_grant"]).await;
}

/// The departure cases: a correct hand-off passes them; a waiter that forgets, as it leaves at
/// the release, that it may have been handed the lock, one whose leave the store ignores, and a
/// release whose grant to the head is not provisional (a killed head keeps the lock for its
/// ttl) are caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_leaving_at_the_release_are_caught() {
    let races = ["wait_deadline_races_release", "dropped_wait_races_release"];
    let cases = [races[0], races[1], "queued_head_killed"];
    assert_passes(Bug::HandOff, &cases).await;
    assert_fails(Bug::AbandonForgetsPlace, &races).await;
    assert_fails(Bug::LeaveIgnored, &races).await;
    assert_fails(Bug::GrantNotProvisional, &["queued_head_killed"]).await;
}

/// Renewals gathered into one request must still answer each lease: a batch answered with one
/// outcome keeps a deleted lease alive (or loses the live ones with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_renewals_answered_as_one_is_caught() {
    assert_fails(Bug::BatchAnsweredAsOne, &["fault_entry_deleted_among_many"]).await;
}

/// The kinds' fairness cases pass on a read-write lock and semaphore with a correct waiter queue,
/// and each breach is caught: single tries that overtake the queue, readers that join the current
/// readers ahead of a queued writer, a vanished waiter whose entry never lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_kinds_queue_passes_and_its_breaches_are_caught() {
    use kinds::{kinds_outcomes, KindsBug, KINDS_FIFO};
    assert_outcomes(KindsBug::None, kinds_outcomes(KindsBug::None, &KINDS_FIFO).await, &KINDS_FIFO, Outcome::Passed);
    let must_fail: [(KindsBug, &[&str]); 3] = [
        (KindsBug::TryOvertakes, &["rw_fifo_order", "rw_fifo_no_overtaking", "semaphore_fifo_order"]),
        (KindsBug::ReadersJoin, &["rw_fifo_order", "rw_fifo_no_overtaking"]),
        (KindsBug::HeadStuck, &["kinds_fifo_vanished_head"]),
    ];
    for (bug, cases) in must_fail {
        assert_outcomes(bug, kinds_outcomes(bug, cases).await, cases, Outcome::Failed);
    }
}

/// A panicking observer on a client whose leases all renew through one task stops every lease:
/// `panicking_hook_loses_only_its_lease` catches it, and passes on a correct store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watchdog_for_all_is_caught() {
    let case = "panicking_hook_loses_only_its_lease";
    let run = |fx: Arc<dyn Fixture>| async move {
        let report = run_suite(fx, &RunOptions { filter: Some(case.to_owned()), ..RunOptions::default() }).await;
        let c = report.cases.into_iter().find(|c| c.name.ends_with(case)).expect("the case ran");
        (c.outcome, c.detail)
    };
    let (outcome, detail) = run(Arc::new(one_watchdog::OneWatchdog(one_watchdog::server(), Default::default()))).await;
    assert_eq!(outcome, Outcome::Failed, "one watchdog for all should fail {case}, got {outcome:?}: {detail}");
    eprintln!("OneWatchdog: {case} failed as it should: {detail}");
    let correct = Arc::new(Mutant(one_watchdog::server()));
    let (outcome, detail) = run(correct).await;
    assert_eq!(outcome, Outcome::Passed, "a correct store must pass {case}: {detail}");
}
