//! The `min_replicas_ack` failover model: the design holds every property within the bounds,
//! and a `WAIT` on another connection gives a counterexample.
//!
//! `DLOCK_MODEL_DEEP=1` also explores the longer bounds of [`Failover::deep`].

use lock_model::failover::{Bugs, Failover};

mod common;
use common::{assert_holds, Search};

common::bug_search!(Failover, Search::Bfs);

#[test]
fn acknowledged_grants_survive_a_failover() {
    assert_holds(Failover::small(Bugs::default()));
}

#[test]
fn acknowledged_grants_survive_a_failover_with_two_replicas() {
    assert_holds(Failover::two_replicas(Bugs::default()));
}

#[test]
fn promoting_a_replica_that_is_not_the_most_advanced_loses_the_lease() {
    let bugs = Bugs { promote_any_replica: true, ..Bugs::default() };
    assert_breaks(Failover::two_replicas(bugs), "a lost lease is signalled before it is gone");
}

#[test]
fn promoting_a_replica_that_is_not_the_most_advanced_gives_two_holders() {
    let bugs = Bugs { promote_any_replica: true, ..Bugs::default() };
    assert_breaks(Failover::two_replicas(bugs), "no two believers");
}

#[test]
fn acknowledged_grants_survive_a_failover_deep() {
    common::deep_only("longer", || {
        for model in Failover::deep(Bugs::default()) {
            assert_holds(model);
        }
    });
}

#[test]
fn a_wait_on_another_connection_gives_two_holders() {
    let bugs = Bugs { wait_on_other_connection: true, ..Bugs::default() };
    assert_breaks(Failover::small(bugs), "no two believers");
}

#[test]
fn a_wait_on_another_connection_outlives_the_lease() {
    let bugs = Bugs { wait_on_other_connection: true, ..Bugs::default() };
    assert_breaks(Failover::small(bugs), "a lost lease is signalled before it is gone");
}

#[test]
fn a_wait_on_another_connection_repeats_a_token() {
    let bugs = Bugs { wait_on_other_connection: true, ..Bugs::default() };
    assert_breaks(Failover::small(bugs), "tokens increase");
}
