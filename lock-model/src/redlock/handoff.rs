//! The hand-off's steps (see the module docs of [`crate::redlock`]): the release's grant to
//! the queue's head, the lease step's "handed" answer, and the client's decision on it.

use super::model::{Action, Redlock, MASTERS, QUORUM};
use super::state::{Client, Handed, Key, Master, Op, State, GRANT};

impl Redlock {
    /// The token a lease step on `master` answers "handed" with for the caller's live key `k`:
    /// its grant's `X` while the fence is still `X`; 0 otherwise.
    pub(super) fn handed(&self, master: &Master, k: Key) -> u8 {
        let fresh = self.bugs.claim_ignores_fence || master.fence == k.granted;
        if k.granted > 0 && fresh {
            k.granted
        } else {
            0
        }
    }

    /// The release's grant on `m` to the queue's head `h`, when the key is free after the
    /// release's delete: `X = fence + 1` becomes the fence (a set-if-greater that always
    /// succeeds) and the key `h`'s for the claim window, with no attempt id.
    pub(super) fn grant(&self, s: &mut State, m: u8, h: u8) {
        let now = s.now;
        let master = &mut s.masters[usize::from(m)];
        if master.live(now).is_some() {
            return;
        }
        let x = master.fence + 1;
        if !self.bugs.grant_does_not_store_fence {
            master.fence = x;
        }
        master.key = Some(Key { owner: h, attempt: GRANT, granted: x, expires: now + self.claim });
        if self.bugs.head_trusts_message {
            s.msgs.push((h, x, now));
            s.msgs.sort_unstable();
        }
    }

    /// The token a round 1 holds with, no fence store: the `X` a majority answered "handed"
    /// with (the largest of any majority of "handed" answers, if their tokens need not agree).
    pub(super) fn handed_token(&self, handed: &Handed) -> Option<u8> {
        let count = |x: u8| handed.iter().filter(|&&h| h == x).count() as u32;
        if self.bugs.handed_tokens_need_not_agree {
            let max = handed.iter().copied().max().unwrap_or(0);
            let all = handed.iter().filter(|&&h| h > 0).count() as u32;
            return (max > 0 && all >= QUORUM).then_some(max);
        }
        handed.iter().copied().find(|&x| x > 0 && count(x) >= QUORUM)
    }

    /// The holder releases. Without the hand-off, on every master at once (a slower release
    /// only keeps the key longer, and one acquisition per client means it can only ever free
    /// its own lease), and the client is done. With it, the release script goes out on every
    /// connection (after anything still in flight there), each master granting its head or
    /// not when it runs it; the client is done.
    pub(super) fn release(&self, s: &mut State, c: u8) {
        let i = usize::from(c);
        if self.claim == 0 {
            for m in 0..MASTERS {
                self.apply(s, c, m, Op::Release, None);
            }
            s.clients[i] = Client::Done;
            return;
        }
        for m in 0..MASTERS {
            s.chans[Self::chan(c, m)].push(Op::Release);
        }
        s.clients[i] = Client::Done;
    }

    /// The hand-off's steps of client `c`: a release at the front of a connection run with
    /// any other client as that master's head; (bug) a message to a waiting `c` taken as the
    /// lock.
    pub(super) fn handoff_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        if self.claim == 0 {
            return;
        }
        for m in 0..MASTERS {
            if s.chans[Self::chan(c, m)].first() == Some(&Op::Release) {
                actions.extend((0..self.clients).filter(|&h| h != c).map(|h| Action::Hand(c, m, h)));
            }
        }
        if matches!(s.clients[usize::from(c)], Client::Idle | Client::Round1 { .. }) {
            for (k, _) in s.msgs.iter().enumerate().filter(|(_, msg)| msg.0 == c) {
                actions.push(Action::Trust(c, k));
            }
        }
    }
}
