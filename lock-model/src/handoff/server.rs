//! The scripts as the model's server steps, each one atomic, mirroring
//! `lock-redis/src/scripts/exclusive.rs` (and `waiters.rs`, `boot.rs`). Public so that the
//! differential test runs each step and the real script on the same inputs. The blocking
//! delivery's steps (the arm, the release's push, the claim `claim_pushed`) mirror `ARM_SRC`,
//! `grant_head` and `ClaimPushed` there, and are not in the differential test yet.

use super::state::{Block, Grant, State};
use super::{Handoff, BLOCK, CLAIM, ENTRY_LIFE, QUIET, RESERVE, TTL};
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
        let token = s.fence;
        s.owner = Some(Grant { client: head, token, expires: s.now + window, handoff: true });
        // A pushed grant goes without the message, which would only race it (lock-redis
        // `grant_head`).
        if !(self.blocks() && Self::push(s, head, token)) {
            s.net.send(head, token);
        }
    }

    /// Blocking delivery, in the release's script: the grant is pushed onto the head's list when
    /// the head is armed, which uses up the marker; a `BLPOP` blocked there pops it at once
    /// (Redis serves a blocked client when the script that pushed ends). Whether it pushed.
    fn push(s: &mut State, head: u8, token: u8) -> bool {
        let h = head as usize;
        if s.armed[h] <= s.now {
            return false;
        }
        s.armed[h] = 0;
        match s.blocks[h] {
            Block::Blocked { t_s } => s.blocks[h] = Block::Popped { t_s, token },
            _ => s.lists[h].push(token),
        }
        true
    }

    /// The claim of a pushed grant (`ClaimPushed`, the renew script checked against owner and
    /// token): `c`'s live grant with `token` is extended to a full ttl; anything else is left
    /// as it is (it never grants). Whether it extended.
    pub fn claim_pushed(&self, s: &mut State, c: u8, token: u8) -> bool {
        match s.grant_live() {
            Some(g) if g.client == c && g.token == token => {
                s.owner = Some(Grant { expires: s.now + TTL, handoff: false, ..g });
                true
            }
            _ => false,
        }
    }

    /// Blocking delivery: the arm script and the `BLPOP` after it on `c`'s connection, run in
    /// order. The arm marks `c` for [`BLOCK`] ticks and drains its list, so that the `BLPOP`
    /// pops only a grant pushed after the arm ran, hence after its send instant; `true` when
    /// the drain found a grant (the arm's reply: a hint).
    pub fn arm(&self, s: &mut State, c: u8) -> bool {
        let i = c as usize;
        let Block::Sent { t_s } = s.blocks[i] else { return false };
        s.armed[i] = s.now + BLOCK;
        let drained = !self.bugs.pop_without_drain && !s.lists[i].is_empty();
        if drained {
            s.lists[i].clear();
        }
        s.blocks[i] = match s.lists[i].first() {
            Some(&token) => {
                s.lists[i].remove(0);
                Block::Popped { t_s, token }
            }
            None => Block::Blocked { t_s },
        };
        drained
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
    /// was the head of a lock now free, the next head is reserved and woken. Under blocking
    /// delivery it also deletes `c`'s marker and list (empty under the hint delivery): a grant
    /// that reached the list is the lease the release above hands on, and nothing is pushed
    /// for a waiter that left.
    pub fn abandon(&self, s: &mut State, c: u8) {
        s.armed[c as usize] = 0;
        s.lists[c as usize].clear();
        prune(&mut s.queue, s.now);
        let was_head = s.queue.first().is_some_and(|&(q, _)| q == c);
        dequeue(&mut s.queue, c);
        self.release(s, c);
        if was_head && s.grant_live().is_none() {
            Self::reserve(s, true);
        }
    }

    /// The server restarts without its data: lease, queue and boot marker are gone (the token
    /// counter's floor, the server's clock, is not), and the heads' markers and lists (empty
    /// under the hint delivery). A head's `BLPOP` stays blocked, as after a `FLUSHALL`: more
    /// than a real restart allows, whose dropped connection is the `BLPOP` ending at once.
    pub fn restart(s: &mut State) {
        s.owner = None;
        s.queue.clear();
        s.marker = None;
        s.armed.fill(0);
        s.lists.iter_mut().for_each(Vec::clear);
    }
}
