//! The Redlock model: the design holds every property within the bounds, and each known design
//! error, switched back on, gives a counterexample.

use lock_model::redlock::{Bugs, Redlock};

mod common;
use common::{assert_breaks, assert_holds, Search};

#[test]
fn the_design_survives_time_outs_a_restart_and_late_undos() {
    Redlock::checked(Bugs::default()).into_iter().for_each(assert_holds);
}

#[test]
fn the_design_survives_every_fault_of_each_bound_together_deep() {
    common::deep_only("about a minute and a half", || {
        Redlock::deep(Bugs::default()).into_iter().for_each(assert_holds)
    });
}

#[test]
fn an_undo_of_any_attempt_frees_the_next_grant() {
    let bugs = Bugs { undo_frees_any_attempt: true, ..Bugs::default() };
    // A second time-out: the first attempt fails on time-outs alone, then succeeds.
    assert_breaks(Redlock { lose: 2, ..Redlock::retries(bugs) }, &bugs, "no two believers", Search::Dfs);
}

#[test]
fn a_restarted_master_without_a_quiet_period_grants_twice() {
    let bugs = Bugs { no_quiet_period: true, ..Bugs::default() };
    let [_, restarts, _] = Redlock::checked(bugs);
    assert_breaks(restarts, &bugs, "no two believers", Search::Dfs);
}

#[test]
fn the_handoff_survives_partial_grants_a_time_out_and_a_restart() {
    Redlock::handoff_checked(Bugs::default()).into_iter().for_each(assert_holds);
}

#[test]
fn the_handoff_survives_every_fault_over_a_tick_deep() {
    common::deep_only("about a minute and a half", || {
        Redlock::handoff_deep(Bugs::default()).into_iter().for_each(assert_holds)
    });
}

#[test]
fn a_head_that_trusts_the_message_holds_beside_another() {
    let bugs = Bugs { head_trusts_message: true, ..Bugs::default() };
    // Three clients: the release grants one head on one master, another on the other.
    assert_breaks(Redlock::handoff_three(bugs), &bugs, "no two believers", Search::Bfs);
}

#[test]
fn a_left_token_taken_twice_goes_back() {
    let bugs = Bugs { left_token_taken_twice: true, ..Bugs::default() };
    // The first client takes the lock and releases, leaving a token; the second takes it and
    // lets its lease lapse (a 1-tick ttl over one tick); the first, again, takes the same token
    // from the free keys.
    let bound = Redlock { attempts: 2, ttl: 1, ..Redlock::handoff(bugs) };
    common::deep_only("about 40 s", || assert_breaks(bound, &bugs, "tokens increase", Search::Bfs));
}

#[test]
fn blocking_delivery_holds_without_time_and_over_a_tick() {
    Redlock::blocking_checked(Bugs::default()).into_iter().for_each(assert_holds);
}

#[test]
fn blocking_delivery_holds_with_every_fault_deep() {
    common::deep_only("a minute", || Redlock::blocking_deep(Bugs::default()).into_iter().for_each(assert_holds));
}

#[test]
fn blocking_delivery_on_one_push_holds_beside_another() {
    let bugs = Bugs { blocking_holds_on_one_push: true, ..Bugs::default() };
    // Three clients: the release pushes to one waiter on one master and to the other on another.
    let bound = Redlock { clients: 3, max_tick: 0, ..Redlock::blocking_held(bugs) };
    assert_breaks(bound, &bugs, "no two believers", Search::Bfs);
}

#[test]
fn blocking_delivery_counted_from_the_pop_outlasts_its_grants() {
    let bugs = Bugs { blocking_counts_from_pop: true, ..Bugs::default() };
    // The pops arrive a tick after their push: the grants lapse under the belief.
    assert_breaks(Redlock::blocking_held(bugs), &bugs, "a believed lease is kept by a majority", Search::Bfs);
}

#[test]
fn blocking_delivery_counted_from_the_pop_holds_beside_another_deep() {
    let bugs = Bugs { blocking_counts_from_pop: true, ..Bugs::default() };
    // A third client takes the lapsed grants in an ordinary round before the head's second pop
    // arrives (12 steps).
    let bound = Redlock { clients: 3, ..Redlock::blocking_held(bugs) };
    common::deep_only("about 90 s", || assert_breaks(bound, &bugs, "no two believers", Search::Bfs));
}

#[test]
fn blocking_delivery_with_a_stale_arm_outlasts_its_grants() {
    let bugs = Bugs { blocking_stale_arm: true, ..Bugs::default() };
    let bound = Redlock { arms: 3, ..Redlock::blocking_held(bugs) };
    assert_breaks(bound, &bugs, "a believed lease is kept by a majority", Search::Bfs);
}

#[test]
fn blocking_delivery_without_the_release_taking_hands_a_token_twice() {
    let bugs = Bugs { blocking_release_does_not_take: true, ..Bugs::default() };
    // The holder acquires again once the head's pushed grants lapsed, and takes their token.
    let bound = Redlock { attempts: 2, ..Redlock::blocking_held(bugs) };
    assert_breaks(bound, &bugs, "tokens increase", Search::Bfs);
}

#[test]
fn blocking_delivery_whose_undo_frees_a_pushed_lease_outlasts_it() {
    let bugs = Bugs { blocking_undo_frees_pushed: true, ..Bugs::default() };
    // The waiter's fallback re-grants the lease pushed to it on one master and fails (the
    // holder still has the others); its undo frees that lease; the wait goes on and holds on
    // that pop and a later one (13 steps).
    assert_breaks(Redlock::blocking_held(bugs), &bugs, "a believed lease is kept by a majority", Search::Bfs);
}

#[test]
fn blocking_delivery_whose_claim_keeps_the_attempt_id_loses_the_claimed_lease() {
    let bugs = Bugs { blocking_claim_keeps_attempt: true, ..Bugs::default() };
    // The waiter's failed fallback step re-grants the lease pushed to it on one master with its
    // attempt id; the wait holds on that pop and a later one, its claim removes the mark there
    // and keeps the attempt id, and the failed attempt's undo, sent late, frees the claimed
    // lease.
    assert_breaks(Redlock::blocking_held(bugs), &bugs, "a believed lease is kept by a majority", Search::Bfs);
}

#[test]
fn blocking_delivery_whose_claim_grants_takes_a_believed_lease_deep() {
    let bugs = Bugs { blocking_claim_grants: true, ..Bugs::default() };
    // The waiter holds on two pushes until tick 1 and claims; its claims wait. At tick 1 its
    // grants lapse and the former holder acquires again (a 1-tick ttl); a claim arrives on a
    // master that holder was just granted and takes the key from it (14 steps, the claim
    // deferred). Without the switch, breadth-first finds no counterexample within 16 steps (the
    // owner is the acquisition: the holder's late release no longer frees a grant made to its
    // next one).
    let bound = Redlock { attempts: 2, ttl: 1, ..Redlock::blocking_held(bugs) };
    common::deep_only("about two minutes", || {
        assert_breaks(bound, &bugs, "a believed lease is kept by a majority", Search::Bfs)
    });
}

#[test]
fn a_release_that_sets_the_counter_to_its_token_goes_back() {
    let bugs = Bugs { release_sets_token: true, ..Bugs::default() };
    // From client 0's lease (a 1-tick ttl, two attempts each): at tick 1 client 0's lease has
    // lapsed but it has not released; client 1 takes a higher token on masters 0 and 1 and
    // releases, granting both to client 0's acquisition (its queue entry stays until it
    // releases); client 0's release then frees those grants (the same acquisition's) and sets
    // both counters back to its token + 1, which client 1's next acquisition takes there: a
    // majority hands it a token below its previous one (15 steps, breadth-first in release; none
    // within 17 steps without the switch).
    let bound = Redlock { attempts: 2, ttl: 1, held: true, ..Redlock::handoff(bugs) };
    assert_breaks(bound, &bugs, "tokens increase", Search::Bfs);
}
