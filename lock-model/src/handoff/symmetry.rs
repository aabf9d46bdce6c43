//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore (Stateright's symmetry reduction, about half the states for two clients).

use stateright::Representative;

use super::State;

impl Representative for State {
    /// Clients are interchangeable: the least of the states that rename them.
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
        if let Some(g) = s.owner.as_mut() {
            g.client = to(g.client);
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
