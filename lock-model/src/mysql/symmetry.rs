//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore. The queue's order is its places' (`seq`), never the owners' names: places are
//! distinct, so the `(seq, owner)` order never reaches the tie on `seq` that names would break.

use super::state::State;
use crate::shared::permute;

crate::permutations::clients_are_interchangeable!(State);

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        permute(&mut s.clients, &self.clients, perm);
        permute(&mut s.rounds, &self.rounds, perm);
        for e in &mut s.queue {
            e.owner = perm[e.owner as usize];
        }
        if let Some(owner) = s.row.as_mut().and_then(|r| r.owner.as_mut()) {
            *owner = perm[*owner as usize];
        }
        s
    }
}
