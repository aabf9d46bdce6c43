//! The frame every client model's exploration shares, written once: time passes while the
//! model's bound allows, each client offers its steps, and a step is followed by forgetting what
//! can no longer change the outcome. A model's `stateright::Model` impl calls
//! [`Explore::time_and_clients`] and [`Explore::successor`]; Stateright's trait cannot be
//! implemented here for every `Explore` at once (it is another crate's).

use stateright::Model;

use crate::properties::Leases;

/// A model whose state is a clock and clients that each act on their own.
pub(crate) trait Explore: Model<State: Clone + Leases> {
    /// The step in which time passes.
    const TICK: Self::Action;

    /// The steps client `c` may take in `s`.
    fn client_actions(&self, s: &Self::State, c: u8, actions: &mut Vec<Self::Action>);

    /// Carries out `action` on `s`.
    fn step(&self, s: &mut Self::State, action: Self::Action);

    /// Forgets what can no longer change the outcome, so that equal futures are one state.
    fn normalize(&self, _s: &mut Self::State) {}

    /// The passing of time if `may_tick` (the last tick explored is not reached yet, and
    /// whatever else the model waits for first), then every client's steps: the start of the
    /// model's actions.
    fn time_and_clients(&self, s: &Self::State, may_tick: bool, actions: &mut Vec<Self::Action>) {
        if may_tick {
            actions.push(Self::TICK);
        }
        for c in 0..s.client_count() {
            self.client_actions(s, c as u8, actions);
        }
    }

    /// `last` after `action`, normalized: the model's next state.
    fn successor(&self, last: &Self::State, action: Self::Action) -> Option<Self::State> {
        let mut s = last.clone();
        self.step(&mut s, action);
        self.normalize(&mut s);
        Some(s)
    }
}
