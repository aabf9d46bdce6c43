//! The PostgreSQL model: the design holds every property within the bounds, and each known
//! design error, switched back on, gives a counterexample for the property it breaks.
//!
//! `DLOCK_MODEL_DEEP=1` also explores the longer bounds of [`Pg::deep`] (minutes).

use std::time::Duration;

use lock_core::decisions::renewal_due;
use lock_model::pg::rounds::{self, Rounds};
use lock_model::pg::{Bugs, Pg, TTL};
use tokio::time::Instant;

mod common;
use common::{assert_holds, Search};

common::model_tests! {
    Pg, Search::Bfs;
    holds {
        the_design_survives_forged_duplicated_lost_and_late_notifications: notify,
        the_design_survives_crashes_and_cut_clean_ups: processes,
        the_design_survives_a_database_crash_that_loses_an_unflushed_grant: db_crashes,
    }
    deep "minutes" { the_design_survives_longer_runs_deep: Pg::deep(Bugs::default()) }
    breaks {
        // The head's claim is the grant's durable confirmation: one that does not wait for the
        // flush confirms a grant the crash then loses, and the head holds what the database
        // gave back.
        a_claim_that_does_not_wait_for_the_flush_holds_a_lost_grant:
            db_crashes(claim_not_durable) => "a lost lease is signalled before it is gone", "no two believers";
        // Releases do not wait for the flush; the grants they are followed by do, and their
        // flush covers the release (WAL is flushed in order). A grant that did not wait would
        // confirm what a crash then loses.
        a_grant_that_does_not_wait_for_the_flush_is_lost_with_its_holder_believing:
            db_crashes(grant_not_durable) => "a lost lease is signalled before it is gone", "no two believers";
        trusting_the_notification_gives_two_holders: notify(trust_notify) => "no two believers";
        trusting_the_notification_takes_a_forged_fence: notify(trust_notify) => "tokens come from the server";
        abandon_that_forgets_its_place_first_keeps_the_grant:
            processes(abandon_forgets_place_first) => "an untaken grant lapses";
        a_regrant_that_keeps_the_expiry_gives_two_holders: notify(claim_keeps_expiry) => "no two believers";
        a_regrant_that_keeps_the_expiry_outlives_the_row:
            notify(claim_keeps_expiry) => "a lost lease is signalled before it is gone";
        no_drift_margin_gives_two_holders: notify(no_drift_margin) => "no two believers";
    }
}

#[test]
fn the_renewal_round_survives_a_locked_row() {
    assert_holds(Rounds::small(rounds::Bugs::default()));
}

#[test]
fn a_round_waiting_for_a_locked_row_loses_an_untroubled_lease() {
    let bugs = rounds::Bugs { round_waits_for_locked_rows: true };
    common::assert_breaks(Rounds::small(bugs), &bugs, "an untroubled lease is renewed in time", Search::Bfs);
}

#[test]
fn the_renewal_schedule_is_lock_cores_rounded_up_to_ticks() {
    // lock-core's `renewal_due_table` (lease/watchdog/tests.rs), in whole seconds from now:
    // (valid_until − now, validity, every) → due − now. Its half-second row (a cadence near the
    // validity: 14.5 s) the model's ticks round up: never earlier than lock-core's.
    let table = [((29, 29, 10), 10), ((25, 29, 10), 6), ((10, 29, 10), 0), ((0, 29, 10), 0), ((29, 29, 28), 15)];
    let now = 100;
    for ((left, validity, every), want) in table {
        let got = rounds::due_tick(renewal_due, now, now + left, validity, every) - now;
        assert_eq!(got, want, "left {left}, validity {validity}, every {every}");
    }
}

/// The model runs lock-core's schedule, so a broken schedule in the code is a broken model: one
/// that waits for the end of the validity loses an untroubled lease.
#[test]
fn a_schedule_that_renews_at_the_end_loses_an_untroubled_lease() {
    fn at_the_end(now: Instant, valid_until: Instant, _: Duration, _: Duration) -> Instant {
        valid_until.max(now)
    }
    let model = Rounds { schedule: at_the_end, ..Rounds::small(rounds::Bugs::default()) };
    common::assert_breaks(model, &"renewal at valid_until", "an untroubled lease is renewed in time", Search::Bfs);
}

#[test]
fn the_belief_is_lock_cores_rule_on_the_slowest_clock() {
    use lock_core::decisions::valid_until;
    use lock_model::shared::belief_end;
    // `ttl − drift` from the send on a clock slow by the drift: the whole ttl in server ticks.
    assert_eq!(belief_end(valid_until, 3, TTL), 3 + TTL);
    // A rule that forgot the drift believes into the next tick: the `no_drift_margin` switch.
    assert_eq!(belief_end(|sent, ttl, _| sent.checked_add(ttl), 3, TTL), 3 + TTL + 1);
}
