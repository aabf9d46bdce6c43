//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore (Stateright's symmetry reduction, about half the states for two clients).

use super::State;
use crate::shared::permute;

crate::permutations::clients_are_interchangeable!(State);

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        crate::shared::rename_queue_clients!(s, self, perm);
        permute(&mut s.blocks, &self.blocks, perm);
        permute(&mut s.arms, &self.arms, perm);
        permute(&mut s.armed, &self.armed, perm);
        permute(&mut s.late, &self.late, perm);
        for (c, &new) in perm.iter().enumerate() {
            s.lists[new as usize].clone_from(&self.lists[c]);
        }
        if let Some(g) = s.owner.as_mut() {
            g.client = perm[g.client as usize];
        }
        s
    }
}
