//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore.

use super::state::State;
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
        if let Some(r) = s.row.as_mut() {
            r.owner = perm[r.owner as usize];
        }
        rename_queue(&mut s.queue, perm);
        s.net.rename(perm);
        s
    }
}
