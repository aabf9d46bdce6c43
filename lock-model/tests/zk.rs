//! The ZooKeeper model: lock-zk's validity rule holds every property within the bounds, and the
//! rules it replaced, switched back on, give counterexamples.
//!
//! `DLOCK_MODEL_DEEP=1` also explores the longer bounds of [`Zk::deep`] (minutes).

use lock_model::zk::{bound, Bugs, Zk};

mod common;
use common::Search;

#[test]
fn the_validity_is_lock_zks_bound_in_whole_units() {
    // lock-zk's rule, called by the model: a 10-unit session with a 2-unit tick allows 4.5
    // units, 4 in whole units (the model's client may stay silent 5 units, not 4.5); the deep
    // run's twentieths of a session are exact (20 − 1 − 9).
    assert_eq!(Zk::small(Bugs::default()).validity(), 4);
    assert_eq!(Zk::deep(Bugs::default()).validity(), 10);
}

#[test]
fn the_bound_matches_lock_zk_at_every_tick() {
    // lock-zk's `the_bound_allows_for_the_leaders_lag` table, (session, tick) → bound in ms,
    // each row in a unit that divides the session into twentieths and the tick into halves:
    // the model's units give lock-zk's values.
    let table = [
        ((10_000, 2_000), 500, 4_500),
        ((4_000, 2_000), 200, 1_200),
        ((60_000, 2_000), 1_000, 32_000),
        ((2_000, 2_000), 100, 600),
        ((2_000, 200), 100, 1_000),
        ((400, 200), 20, 120),
    ];
    for ((session, tick), unit, want) in table {
        let got = u32::from(bound::fixed((session / unit) as u8, (tick / unit) as u8)) * unit;
        assert_eq!(got, want, "session {session} ms, tick {tick} ms");
    }
}

common::model_tests! {
    Zk, Search::Bfs;
    holds { the_design_survives_a_cut_follower_and_a_stalled_link: small }
    deep "minutes" { the_design_survives_the_exact_client_timers_deep: [Zk::deep(Bugs::default())] }
    breaks {
        three_quarters_of_the_session_gives_two_holders: small(renewals_ignore_ping_gap) => "no two believers";
        three_quarters_of_the_session_outlives_the_node:
            small(renewals_ignore_ping_gap) => "a lost lease is signalled before it is gone";
        the_ping_gap_alone_outlives_the_node:
            small(bound_ignores_half_tick) => "a lost lease is signalled before it is gone";
    }
}
