//! Clients are interchangeable: states that differ only by the clients' names are one state to
//! explore. So are the masters, which the blocking delivery's bounds use (the other bounds keep
//! the counts they were measured with).

use std::sync::LazyLock;

use super::model::MASTERS;
use super::state::{Client, State};
use crate::permutations::{all, least_renaming};

/// Every order of the masters.
static MASTER_ORDERS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| all(usize::from(MASTERS)));

impl stateright::Representative for State {
    fn representative(&self) -> State {
        let by_clients = |s: &State| least_renaming(s, s.clients.len(), State::renamed);
        if !self.masters_interchangeable {
            return by_clients(self);
        }
        MASTER_ORDERS.iter().map(|perm| by_clients(&self.masters_renamed(perm))).min().unwrap_or_else(|| self.clone())
    }
}

impl State {
    /// This state with master `m` called `perm[m]`: its record, connections, marks, and the
    /// masks and answers that name it.
    fn masters_renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        let n = usize::from(MASTERS);
        let bits = |mask: u8| (0..n).filter(|&m| mask & (1 << m) != 0).fold(0u8, |acc, m| acc | 1 << perm[m]);
        for (m, &new) in perm.iter().enumerate() {
            let new = usize::from(new);
            s.masters[new] = self.masters[m];
            for c in 0..self.clients.len() {
                s.chans[c * n + new] = self.chans[c * n + m].clone();
                s.blocks[c * n + new] = self.blocks[c * n + m];
                s.armed[c * n + new] = self.armed[c * n + m];
            }
        }
        for task in &mut s.pool {
            task.1 = perm[usize::from(task.1)];
        }
        s.pool.sort_unstable();
        for client in &mut s.clients {
            match client {
                Client::Round1 { granted, refused, failed, handed, .. } => {
                    (*granted, *refused, *failed) = (bits(*granted), bits(*refused), bits(*failed));
                    let was = *handed;
                    for (m, &new) in perm.iter().enumerate() {
                        handed[usize::from(new)] = was[m];
                    }
                }
                Client::Round2 { refused1, stored, failed, .. } => {
                    (*refused1, *stored, *failed) = (bits(*refused1), bits(*stored), bits(*failed));
                }
                Client::Holding { claim: Some(claim), .. } => {
                    (claim.ok, claim.failed) = (bits(claim.ok), bits(claim.failed))
                }
                _ => {}
            }
        }
        s
    }

    /// This state with client `c` called `perm[c]`.
    fn renamed(&self, perm: &[u8]) -> State {
        let mut s = self.clone();
        let masters = usize::from(MASTERS);
        for (c, &new) in perm.iter().enumerate() {
            let new = usize::from(new);
            s.clients[new] = self.clients[c];
            s.attempts[new] = self.attempts[c];
            s.last_attempt[new] = self.last_attempt[c];
            s.acqs[new] = self.acqs[c];
            s.arms[new] = self.arms[c];
            for m in 0..masters {
                s.chans[new * masters + m] = self.chans[c * masters + m].clone();
                s.blocks[new * masters + m] = self.blocks[c * masters + m];
                s.armed[new * masters + m] = self.armed[c * masters + m];
            }
        }
        for master in &mut s.masters {
            if let Some(k) = master.key.as_mut() {
                k.owner = perm[usize::from(k.owner)]; // its generation is the same client's
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
