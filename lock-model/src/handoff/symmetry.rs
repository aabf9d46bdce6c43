//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore (Stateright's symmetry reduction, about half the states for two clients).

use super::State;

crate::permutations::clients_are_interchangeable!(State);

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        crate::shared::rename_queue_clients!(s, self, perm);
        if let Some(g) = s.owner.as_mut() {
            g.client = perm[g.client as usize];
        }
        s
    }
}
