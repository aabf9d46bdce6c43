//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore (Stateright's symmetry reduction, about half the states for two clients).

use super::State;
use crate::shared::{permute, rename_queue};

crate::permutations::clients_are_interchangeable!(State);

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        permute(&mut s.clients, &self.clients, perm);
        permute(&mut s.polls, &self.polls, perm);
        permute(&mut s.rounds, &self.rounds, perm);
        permute(&mut s.strays, &self.strays, perm);
        if let Some(g) = s.owner.as_mut() {
            g.client = perm[g.client as usize];
        }
        rename_queue(&mut s.queue, perm);
        s.net.rename(perm);
        s
    }
}
