//! The Redlock model: the design holds every property within the bounds, and each known design
//! error, switched back on, gives a counterexample.

use std::collections::BTreeSet;

use lock_model::redlock::{Bugs, Redlock};
use stateright::{Checker, HasDiscoveries, Model};

/// Explores `model` to the end of its bounds; every property must hold.
fn assert_holds(model: Redlock) {
    let checker = model.clone().checker().symmetry().threads(2).spawn_bfs().join();
    eprintln!(
        "{model:?}: {} states, {} unique, depth {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth()
    );
    assert!(checker.is_done(), "the exploration must end within its bounds");
    checker.assert_properties();
}

/// Asserts that `model` (with its bug switched on) has a counterexample of `property`; prints
/// the trace. Depth-first: the counterexamples are deep and the bounds too wide to sweep.
fn assert_breaks(model: Redlock, property: &'static str) {
    let bugs = model.bugs;
    let checker = model
        .checker()
        .symmetry()
        .threads(2)
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_dfs()
        .join();
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("no counterexample of {property:?} with {bugs:?}: the model no longer checks it"));
    eprintln!("{property} broken by {bugs:?}: {:?}", path.into_actions());
}

#[test]
fn the_design_survives_time_outs_and_a_restart() {
    assert_holds(Redlock::small(Bugs::default()));
}

#[test]
fn the_design_survives_re_tries_and_late_undos() {
    assert_holds(Redlock::retries(Bugs::default()));
}

#[test]
fn an_undo_of_any_attempt_frees_the_next_grant() {
    let bugs = Bugs { undo_frees_any_attempt: true, ..Bugs::default() };
    // A second time-out: the first attempt fails on time-outs alone, then succeeds.
    assert_breaks(Redlock { lose: 2, ..Redlock::retries(bugs) }, "no two believers");
}

#[test]
fn a_restarted_master_without_a_quiet_period_grants_twice() {
    let bugs = Bugs { no_quiet_period: true, ..Bugs::default() };
    assert_breaks(Redlock::small(bugs), "no two believers");
}
