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
            // A ghost owner (a crash's restored row) is nobody's: it keeps its name.
            r.owner = perm.get(r.owner as usize).copied().unwrap_or(r.owner);
        }
        rename_queue(&mut s.queue, perm);
        if let Some(back) = s.unflushed.as_mut() {
            if let Some(r) = back.row.as_mut() {
                r.owner = perm.get(r.owner as usize).copied().unwrap_or(r.owner);
            }
            rename_queue(&mut back.queue, perm);
        }
        s.net.rename(perm);
        s
    }
}
