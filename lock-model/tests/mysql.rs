//! The MySQL model: the `queued_until` design holds every property within the bounds, and each
//! design error, switched on, gives a counterexample for the property it breaks.
//!
//! `DLOCK_MODEL_DEEP=1` also explores the longer bounds of [`Mysql::deep`].

use lock_model::mysql::{Bugs, Mysql};

mod common;
use common::Search;

common::model_tests! {
    Mysql, Search::Bfs;
    holds {
        the_summary_survives_two_clients_coming_back: pair,
        the_summary_survives_three_clients: trio,
        the_summary_survives_answers_read_back: read_back,
    }
    deep "a minute" { the_summary_survives_longer_runs_deep: Mysql::deep(Bugs::default()) }
    breaks {
        an_enqueue_past_the_bump_is_overtaken:
            pair(enqueue_ignores_bump) => "no overtaking", "queued_until covers the live queue";
        a_bump_after_the_enqueue_is_overtaken:
            pair(bump_after_enqueue) => "no overtaking", "queued_until covers the live queue";
        a_collector_that_ignores_the_queue_lets_an_insert_overtake:
            pair(collector_ignores_queue) => "no overtaking", "queued_until covers the live queue";
        no_fallback_refuses_a_free_lock_nobody_waits_for:
            pair(no_fallback) => "a try is refused only for a holder or a live waiter";
        a_missing_row_read_back_as_no_cap_is_overtaken:
            read_back(missing_row_uncapped) => "no overtaking", "queued_until covers the live queue";
    }
}
