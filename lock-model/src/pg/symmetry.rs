//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore.

use super::state::State;

crate::permutations::clients_are_interchangeable!(State);

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        crate::shared::rename_queue_clients!(s, self, perm);
        // A ghost owner (a crash's restored row) is nobody's: it keeps its name.
        let rename = |owner: u8| perm.get(owner as usize).copied().unwrap_or(owner);
        if let Some(r) = s.row.as_mut() {
            r.owner = rename(r.owner);
        }
        if let Some(back) = s.unflushed.as_mut() {
            if let Some(r) = back.row.as_mut() {
                r.owner = rename(r.owner);
            }
            crate::shared::rename_queue(&mut back.queue, perm);
        }
        s
    }
}
