//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore.

use super::state::OWNERS;
use super::state::{Data, State};
use crate::shared::permute;

crate::permutations::clients_are_interchangeable!(State);

fn rename(data: &mut Data, perm: &[u8]) {
    if let Some(lease) = data.lease.as_mut() {
        // An owner id is its client's number and the attempt's.
        lease.0 = perm[(lease.0 / OWNERS) as usize] * OWNERS + lease.0 % OWNERS;
    }
}

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        permute(&mut s.clients, &self.clients, perm);
        permute(&mut s.attempts, &self.attempts, perm);
        rename(&mut s.primary.data, perm);
        for node in &mut s.replicas {
            rename(&mut node.data, perm);
        }
        s.replicas.sort_unstable();
        for data in &mut s.backlog {
            rename(data, perm);
        }
        s
    }
}
