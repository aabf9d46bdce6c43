//! The hand-off model: the design holds every property within the bounds, and each known
//! design error, switched back on, gives a counterexample for the property it breaks; the same
//! for the blocking delivery (lock-redis `blocking.rs`: `Handoff::blocking_network` and the others).
//!
//! `DLOCK_MODEL_DEEP=1` also explores the longer bounds of [`Handoff::deep`] (minutes).

use lock_model::handoff::{Bugs, Handoff};

mod common;
use common::Search;

common::model_tests! {
    Handoff, Search::Bfs;
    holds {
        the_design_survives_forged_duplicated_lost_and_late_messages: network,
        the_design_survives_crashes_and_waiters_that_leave: processes,
        the_design_survives_a_restart_without_data: restarts,
        the_blocking_delivery_survives_lost_replies: blocking_network,
        the_blocking_delivery_survives_crashes_and_waiters_that_leave: blocking_processes,
        the_blocking_delivery_survives_a_restart_without_data: blocking_restarts,
    }
    deep "minutes" { the_design_survives_every_fault_together_deep: Handoff::deep(Bugs::default()) }
    breaks {
        trusting_the_message_gives_two_holders: network(trust_message) => "no two believers";
        trusting_the_message_takes_a_forged_token: network(trust_message) => "tokens come from the server";
        a_full_ttl_grant_outlives_a_dead_head: processes(full_ttl_grant) => "an untaken grant lapses";
        abandon_that_forgets_its_place_first_keeps_the_grant:
            processes(abandon_forgets_place_first) => "an untaken grant lapses";
        abandon_overtaken_by_its_own_attempt_keeps_the_grant:
            processes(abandon_overtakes_attempt) => "an untaken grant lapses";
        a_restart_without_a_quiet_period_gives_two_holders: restarts(no_quiet_period) => "no two believers";
        a_pop_without_the_arms_drain_gives_two_holders: blocking_network(pop_without_drain) => "no two believers";
        a_pop_counted_from_its_reply_gives_two_holders:
            blocking_network(pop_counts_from_reply) => "no two believers";
        a_pop_taken_by_a_later_wait_goes_back_in_tokens:
            blocking_network(pop_after_wait_ends) => "tokens increase";
        a_lapsed_pop_taken_goes_back_in_tokens: blocking_network(take_lapsed_pop) => "tokens increase";
        a_claim_that_runs_after_the_release_and_grants_goes_back_in_tokens:
            blocking_network(claim_after_release) => "tokens increase", "a claim after its release changes nothing";
    }
}
