//! The scripts as the model's server steps, each one atomic, mirroring
//! `lock-redis/src/scripts/exclusive.rs` (and `waiters.rs`, `boot.rs`). Public so that the
//! differential test runs each step and the real script on the same inputs.

use super::state::{Grant, State};
use super::{Handoff, CLAIM, ENTRY_LIFE, QUIET, RESERVE, TTL};
use crate::shared::{dequeue, enqueue, prune};

/// The token a wake-up names: none (it only says "try again").
pub const WAKE: u8 = 0;

impl Handoff {
    /// The release's hand-on (`freed` with `grant_head`): the first live entry gets a
    /// provisional grant with the next token, its entry goes, and it is sent a message.
    fn hand_on(&self, s: &mut State) {
        prune(&mut s.queue, s.now);
        if s.queue.is_empty() {
            s.owner = None;
            return;
        }
        let (head, _) = s.queue.remove(0);
        s.fence += 1;
        let window = if self.bugs.full_ttl_grant { TTL } else { CLAIM };
        s.owner = Some(Grant { client: head, token: s.fence, expires: s.now + window, handoff: true });
        s.net.send(head, s.fence);
    }

    /// `wq_reserve`: the head of a free lock keeps its entry at most [`RESERVE`] more, and is
    /// woken when that cut its entry (or `always`).
    fn reserve(s: &mut State, always: bool) {
        let until = s.now + RESERVE;
        let Some(head) = s.queue.first_mut() else { return };
        let cut = head.1 > until;
        head.1 = head.1.min(until);
        let head = head.0;
        if cut || always {
            s.net.send(head, WAKE);
        }
    }

    /// `quiet_left`: the quiet period left, started by the first acquire that finds the boot
    /// marker missing.
    fn quiet_left(&self, s: &mut State) -> u8 {
        let quiet = if self.bugs.no_quiet_period { 0 } else { QUIET };
        let until = *s.marker.get_or_insert(s.now + quiet);
        until.saturating_sub(s.now)
    }

    /// The acquire script: `Some(token)` granted (or re-granted: a claim), `None` refused (the
    /// caller is queued).
    pub fn acquire(&self, s: &mut State, c: u8) -> Option<u8> {
        prune(&mut s.queue, s.now);
        match s.grant_live() {
            Some(g) if g.client == c => {
                s.owner = Some(Grant { expires: s.now + TTL, handoff: false, ..g });
                return Some(g.token);
            }
            Some(_) => {
                enqueue(&mut s.queue, c, s.now + ENTRY_LIFE);
                return None;
            }
            // An ended lease's owner stays in the name's hash until a grant overwrites it or a
            // release deletes it (lock-redis `scripts/lease.rs`).
            None => {}
        }
        if self.quiet_left(s) > 0 {
            enqueue(&mut s.queue, c, s.now + ENTRY_LIFE);
            return None;
        }
        match s.queue.first() {
            Some(&(head, _)) if head != c => {
                Self::reserve(s, false);
                enqueue(&mut s.queue, c, s.now + ENTRY_LIFE);
                None
            }
            _ => {
                dequeue(&mut s.queue, c);
                s.fence += 1;
                s.owner = Some(Grant { client: c, token: s.fence, expires: s.now + TTL, handoff: false });
                Some(s.fence)
            }
        }
    }

    /// The owner-checked release script: checked against the hash's owner, whose lease may
    /// have ended (nothing overwrote it since), so an ended grant of `c` is handed on too.
    pub fn release(&self, s: &mut State, c: u8) {
        if s.owner.is_some_and(|g| g.client == c) {
            self.hand_on(s);
        }
    }

    /// The abandon script: a grant `c` holds is released and handed on; its entry goes; when it
    /// was the head of a lock now free, the next head is reserved and woken.
    pub fn abandon(&self, s: &mut State, c: u8) {
        prune(&mut s.queue, s.now);
        let was_head = s.queue.first().is_some_and(|&(q, _)| q == c);
        dequeue(&mut s.queue, c);
        self.release(s, c);
        if was_head && s.grant_live().is_none() {
            Self::reserve(s, true);
        }
    }

    /// The server restarts without its data: lease, queue and boot marker are gone (the token
    /// counter's floor, the server's clock, is not).
    pub fn restart(s: &mut State) {
        s.owner = None;
        s.queue.clear();
        s.marker = None;
    }
}
