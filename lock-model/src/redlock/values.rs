//! The fence values of a state renumbered to what the model compares, so that equal futures
//! are one state: the masters' clock counts every request, and two states that differ only by
//! how far it ran, with the same order among the fences, floors and tokens, have the same
//! futures.

use super::state::{Block, Client, Op, State};

impl State {
    /// Calls `f` on every fence value: the clock, the fences, the grants' tokens, the tokens
    /// in flight, pushed, read, chosen, held and taken (0, "none", is one of them and stays 0).
    fn fence_values(&mut self, f: &mut impl FnMut(&mut u8)) {
        f(&mut self.micros);
        f(&mut self.taken.max);
        for master in &mut self.masters {
            f(&mut master.fence);
            f(&mut master.next);
            if let Some(key) = master.key.as_mut() {
                f(&mut key.token);
            }
        }
        for op in self.chans.iter_mut().flatten() {
            if let Op::Fence { token, .. } | Op::Claim { token, .. } | Op::Release { token, .. } = op {
                f(token);
            }
        }
        for block in &mut self.blocks {
            if let Block::Popped { token, .. } | Block::Got { token, .. } = block {
                f(token);
            }
        }
        for client in &mut self.clients {
            match client {
                Client::Round1 { floor, handed, .. } => {
                    f(floor);
                    handed.iter_mut().for_each(&mut *f);
                }
                Client::Round2 { token, .. } | Client::Holding { token, .. } => f(token),
                Client::Idle | Client::Done => {}
            }
        }
        for msg in &mut self.msgs {
            f(&mut msg.1);
        }
    }

    /// Renumbers the fence values keeping their order and which ones are one apart (the model
    /// only compares them, takes their maximum and adds 1): a gap of more than 2 becomes 2.
    pub(super) fn compress_fence_values(&mut self) {
        let mut values = vec![0];
        self.fence_values(&mut |v| values.push(*v));
        values.sort_unstable();
        values.dedup();
        let mut renamed = Vec::with_capacity(values.len());
        for (i, &v) in values.iter().enumerate() {
            let new = match i {
                0 => 0,
                _ => renamed[i - 1] + (v - values[i - 1]).min(2),
            };
            renamed.push(new);
        }
        self.fence_values(&mut |v| *v = renamed[values.binary_search(v).unwrap_or(0)]);
    }
}
