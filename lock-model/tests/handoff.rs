//! The hand-off model: the design holds every property within the bounds, and each known
//! design error, switched back on, gives a counterexample for the property it breaks.
//!
//! `DLOCK_MODEL_DEEP=1` also explores the longer bounds of [`Handoff::deep`] (minutes).

use lock_model::handoff::{Bugs, Handoff};

mod common;
use common::{assert_holds, Search};

common::bug_search!(Handoff, Search::Bfs);

#[test]
fn the_design_survives_forged_duplicated_lost_and_late_messages() {
    assert_holds(Handoff::network(Bugs::default()));
}

#[test]
fn the_design_survives_crashes_and_waiters_that_leave() {
    assert_holds(Handoff::processes(Bugs::default()));
}

#[test]
fn the_design_survives_every_fault_together_deep() {
    common::deep_only("minutes", || {
        for model in Handoff::deep(Bugs::default()) {
            assert_holds(model);
        }
    });
}

#[test]
fn trusting_the_message_gives_two_holders() {
    let bugs = Bugs { trust_message: true, ..Bugs::default() };
    assert_breaks(Handoff::network(bugs), "no two believers");
}

#[test]
fn trusting_the_message_takes_a_forged_token() {
    let bugs = Bugs { trust_message: true, ..Bugs::default() };
    assert_breaks(Handoff::network(bugs), "tokens come from the server");
}

#[test]
fn a_full_ttl_grant_outlives_a_dead_head() {
    let bugs = Bugs { full_ttl_grant: true, ..Bugs::default() };
    assert_breaks(Handoff::processes(bugs), "an untaken grant lapses");
}

#[test]
fn abandon_that_forgets_its_place_first_keeps_the_grant() {
    let bugs = Bugs { abandon_forgets_place_first: true, ..Bugs::default() };
    assert_breaks(Handoff::processes(bugs), "an untaken grant lapses");
}

#[test]
fn abandon_overtaken_by_its_own_attempt_keeps_the_grant() {
    let bugs = Bugs { abandon_overtakes_attempt: true, ..Bugs::default() };
    assert_breaks(Handoff::processes(bugs), "an untaken grant lapses");
}

#[test]
fn the_design_survives_a_restart_without_data() {
    assert_holds(Handoff::restarts(Bugs::default()));
}

#[test]
fn a_restart_without_a_quiet_period_gives_two_holders() {
    let bugs = Bugs { no_quiet_period: true, ..Bugs::default() };
    assert_breaks(Handoff::restarts(bugs), "no two believers");
}
