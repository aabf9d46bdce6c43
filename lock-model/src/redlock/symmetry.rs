//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore.

use super::model::MASTERS;
use super::state::State;

crate::permutations::clients_are_interchangeable!(State);

impl State {
    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        let masters = usize::from(MASTERS);
        for (c, &new) in perm.iter().enumerate() {
            let new = usize::from(new);
            s.clients[new] = self.clients[c];
            s.attempts[new] = self.attempts[c];
            s.last_attempt[new] = self.last_attempt[c];
            for m in 0..masters {
                s.chans[new * masters + m] = self.chans[c * masters + m].clone();
            }
        }
        for master in &mut s.masters {
            if let Some(k) = master.key.as_mut() {
                k.owner = perm[usize::from(k.owner)];
            }
        }
        for msg in &mut s.msgs {
            msg.0 = perm[usize::from(msg.0)];
        }
        s.msgs.sort_unstable();
        for task in &mut s.pool {
            task.0 = perm[usize::from(task.0)];
        }
        s.pool.sort_unstable();
        s
    }
}
