//! Clients are interchangeable (each with its own follower): states that differ only by the
//! clients' names are one state to explore.

use super::state::State;

crate::permutations::clients_are_interchangeable!(State);

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        for (c, &new) in perm.iter().enumerate() {
            let new = new as usize;
            s.clients[new] = self.clients[c];
            s.sessions[new] = self.sessions[c];
            s.links[new] = self.links[c];
            s.rounds[new] = self.rounds[c];
        }
        for node in &mut s.nodes {
            node.1 = perm[node.1 as usize];
        }
        s
    }
}
