//! The two checks every model's tests make, written once: a design holds every property within
//! its bounds, and a bug switched back on gives a counterexample of a named property.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;

use stateright::{Checker, CheckerBuilder, HasDiscoveries, Model, Representative};

/// How a bug search explores: breadth-first finds the shortest trace; depth-first reaches deep
/// counterexamples in bounds too wide to sweep.
#[allow(dead_code)] // each test binary uses the searches its model needs
pub(crate) enum Search {
    Bfs,
    Dfs,
}

/// Explores `model` to the end of its bounds, depth-first and symmetry-reduced (Stateright's
/// breadth-first checker ignores `symmetry()`: depth-first visits half the states with two
/// interchangeable clients, and the order does not matter when every state is visited); every
/// property must hold.
pub(crate) fn assert_holds<M>(model: M)
where
    M: Model + Clone + Debug + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + Representative + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let checker = model.clone().checker().symmetry().threads(2).spawn_dfs().join();
    eprintln!(
        "{model:?}: {} states, {} unique, depth {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth()
    );
    assert!(checker.is_done(), "the exploration must end within its bounds");
    checker.assert_properties();
}

/// Asserts that `model`, whose switched-on bugs are `bugs`, has a counterexample of `property`;
/// prints the trace.
pub(crate) fn assert_breaks<M>(model: M, bugs: &dyn Debug, property: &'static str, search: Search)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + Representative + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let builder: CheckerBuilder<M> =
        model.checker().symmetry().threads(2).finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])));
    let path = match search {
        Search::Bfs => builder.spawn_bfs().join().discovery(property),
        Search::Dfs => builder.spawn_dfs().join().discovery(property),
    }
    .unwrap_or_else(|| panic!("no counterexample of {property:?} with {bugs:?}: the model no longer checks it"));
    eprintln!("{property} broken by {bugs:?}: {:?}", path.into_actions());
}

/// Runs `check`, an exploration at the longer bounds, only under `DLOCK_MODEL_DEEP=1`, and says
/// when it does not (it takes `how_long`).
pub(crate) fn deep_only(how_long: &str, check: impl FnOnce()) {
    if std::env::var_os("DLOCK_MODEL_DEEP").is_none() {
        eprintln!("NOT RUN: the deep bounds take {how_long}; run with DLOCK_MODEL_DEEP=1");
        return;
    }
    check();
}

/// Defines a model's tests as a table, one `#[test]` per row, so that each reads as one line:
/// - `holds { name: bounds, … }`: the design at `$model::bounds(Bugs::default())` holds every
///   property ([`assert_holds`]);
/// - `deep "how long" { name: models }`: every model of `models` holds, under
///   `DLOCK_MODEL_DEEP=1` only ([`deep_only`]);
/// - `breaks { name: bounds(switch) => property, …; … }`: with the bug `switch` back on, the
///   model at `bounds` has a counterexample of each `property`, found by `$search`
///   ([`assert_breaks`]).
///
/// `Bugs` is the caller's: the model's bug switches, all off by default.
#[allow(unused_macros)] // the Redlock tests build their models by hand
macro_rules! model_tests {
    (
        $model:ident, $search:expr;
        $(holds { $($holds:ident: $bounds:ident),+ $(,)? })?
        $(deep $how_long:literal { $deep:ident: $models:expr })?
        $(breaks { $($breaks:ident: $bug_bounds:ident($switch:ident) => $($property:literal),+;)+ })?
    ) => {
        $($(
            #[test]
            fn $holds() {
                common::assert_holds($model::$bounds(Bugs::default()));
            }
        )+)?
        $(
            #[test]
            fn $deep() {
                common::deep_only($how_long, || $models.into_iter().for_each(common::assert_holds));
            }
        )?
        $($(
            #[test]
            fn $breaks() {
                let bugs = Bugs { $switch: true, ..Bugs::default() };
                for property in [$($property),+] {
                    common::assert_breaks($model::$bug_bounds(bugs), &bugs, property, $search);
                }
            }
        )+)?
    };
}
#[allow(unused_imports)]
pub(crate) use model_tests;
