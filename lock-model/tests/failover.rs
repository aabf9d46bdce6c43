//! The `min_replicas_ack` failover model: the design holds every property within the bounds,
//! and a `WAIT` on another connection gives a counterexample.
//!
//! `DLOCK_MODEL_DEEP=1` also explores the longer bounds of [`Failover::deep`].

use lock_model::failover::{Bugs, Failover};

mod common;
use common::Search;

common::model_tests! {
    Failover, Search::Bfs;
    holds {
        acknowledged_grants_survive_a_failover: small,
        acknowledged_grants_survive_a_failover_with_two_replicas: two_replicas,
    }
    deep "longer" { acknowledged_grants_survive_a_failover_deep: Failover::deep(Bugs::default()) }
    breaks {
        promoting_a_replica_that_is_not_the_most_advanced_loses_the_lease:
            two_replicas(promote_any_replica) => "a lost lease is signalled before it is gone";
        promoting_a_replica_that_is_not_the_most_advanced_gives_two_holders:
            two_replicas(promote_any_replica) => "no two believers";
        a_wait_on_another_connection_gives_two_holders: small(wait_on_other_connection) => "no two believers";
        a_wait_on_another_connection_outlives_the_lease:
            small(wait_on_other_connection) => "a lost lease is signalled before it is gone";
        a_wait_on_another_connection_repeats_a_token: small(wait_on_other_connection) => "tokens increase";
    }
}
