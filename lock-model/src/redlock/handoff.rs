//! The hand-off's steps (see the module docs of [`crate::redlock`]): the release's grant to
//! the queue's head, the lease step's "handed" answer, and the client's decision on it.

use super::model::{Action, Redlock, MASTERS, QUORUM};
use super::state::{Client, Handed, Key, Master, Op, State, GRANT};

impl Redlock {
    /// The token a lease step on `master` answers "handed" with, taking it: the token the last
    /// release left, while it is still the fence, for a caller that takes a free key or its own
    /// grant (`live`: the key before this step); 0 otherwise.
    pub(super) fn take_left_token(&self, master: &mut Master, live: Option<Key>) -> u8 {
        let takes = live.is_none_or(|k| k.attempt == GRANT);
        if !(takes && master.next > 0 && master.next == master.fence) {
            return 0;
        }
        let token = master.next;
        if !self.bugs.left_token_taken_twice {
            master.next = 0;
        }
        token
    }

    /// The release freed the releaser's key on `m`: the counter is first raised to the
    /// releaser's `token` (set-if-greater, what the claim does: a holder that never claimed
    /// aligns a master that fell behind), then `X = fence + 1` becomes the fence (a
    /// set-if-greater that always succeeds) and is left for the next taker; with a queue's head
    /// `h`, the key is also `h`'s for the claim window, with no attempt id. (Bug
    /// `release_sets_token`: `X` is the carried token + 1 whatever the counter.)
    pub(super) fn leave_token(&self, s: &mut State, m: u8, head: Option<u8>, token: u8) {
        let now = s.now;
        let master = &mut s.masters[usize::from(m)];
        let x = if self.bugs.release_sets_token && token > 0 { token + 1 } else { master.fence.max(token) + 1 };
        master.fence = x;
        master.next = x;
        let Some(h) = head else { return };
        let acq = s.acqs[usize::from(h)];
        let master = &mut s.masters[usize::from(m)];
        master.key = Some(Key { owner: h, acq, attempt: GRANT, expires: now + self.claim, token: 0, pushed: false });
        self.push(s, m, h, x);
        if self.bugs.head_trusts_message {
            s.msgs.push((h, x, now));
            s.msgs.sort_unstable();
        }
    }

    /// The token a round 1 holds with, no fence store: the `X` a majority answered "handed"
    /// with.
    pub(super) fn handed_token(handed: &Handed) -> Option<u8> {
        let count = |x: u8| handed.iter().filter(|&&h| h == x).count() as u32;
        handed.iter().copied().find(|&x| x > 0 && count(x) >= QUORUM)
    }

    /// The holder releases, carrying its token. Without the hand-off, on every master at once (a slower release
    /// only keeps the key longer, and one acquisition per client means it can only ever free
    /// its own lease), and the client is done. With it, the release script goes out on every
    /// connection (after anything still in flight there), each master granting its head or
    /// not when it runs it; the client is done, or idle with attempts left.
    pub(super) fn release(&self, s: &mut State, c: u8) {
        let i = usize::from(c);
        let token = match s.clients[i] {
            Client::Holding { token, .. } => token,
            _ => 0,
        };
        let acq = s.acqs[i];
        if self.claim == 0 {
            for m in 0..MASTERS {
                self.apply(s, c, m, Op::Release { token, acq }, None);
            }
            s.clients[i] = Client::Done;
            return;
        }
        for m in 0..MASTERS {
            s.chans[Self::chan(c, m)].push(Op::Release { token, acq });
        }
        // A client with attempts left may take the lock again, as an application does: a new
        // acquisition, with a fresh owner id (the next generation), and none of the earlier
        // one's arm marks (lock-redis's are per owner id: a release that grants the new
        // acquisition finds none of its own).
        if s.attempts[i] > 0 {
            s.acqs[i] += 1;
            for m in 0..MASTERS {
                s.armed[Self::chan(c, m)] = 0;
            }
            s.clients[i] = Client::Idle;
        } else {
            s.clients[i] = Client::Done;
        }
    }

    /// The hand-off's steps of client `c`: a release at the front of a connection run with
    /// any other client as that master's head; (bug) a message to a waiting `c` taken as the
    /// lock.
    pub(super) fn handoff_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        if self.claim == 0 {
            return;
        }
        for m in 0..MASTERS {
            if matches!(s.chans[Self::chan(c, m)].first(), Some(Op::Release { .. })) {
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
