//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore.

use stateright::Representative;

use super::state::State;

impl Representative for State {
    /// The least of the state and its renamings.
    fn representative(&self) -> State {
        crate::permutations::least_renaming(self, self.clients.len(), State::renamed)
    }
}

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        let to = |c: u8| perm[c as usize];
        for (c, &new) in perm.iter().enumerate() {
            let new = new as usize;
            s.clients[new] = self.clients[c];
            s.polls[new] = self.polls[c];
            s.rounds[new] = self.rounds[c];
            s.strays[new] = self.strays[c];
        }
        if let Some(r) = s.row.as_mut() {
            r.owner = to(r.owner);
        }
        for e in &mut s.queue {
            e.0 = to(e.0);
        }
        for m in &mut s.net {
            m.0 = to(m.0);
        }
        s.net.sort_unstable();
        s
    }
}
