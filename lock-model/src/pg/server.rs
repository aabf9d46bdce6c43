//! The PostgreSQL statements of the exclusive lock as the model's server steps, each one atomic
//! (the row's lock, then the statement), mirroring `lock-sql/src/dialect/postgres/sql.rs`.

use super::model::{Pg, CLAIM, ENTRY_LIFE, TTL};
use super::state::{Client, Row, State, GHOST};
use crate::shared::enqueue;

impl Pg {
    /// The expiry a re-grant of an own row (the claim, the acquire's own-row branch) writes:
    /// `now + ttl`, as the client counts its validity from that statement's send.
    fn regrant_expiry(&self, s: &State, row: Row) -> u8 {
        if self.bugs.claim_keeps_expiry {
            row.expires
        } else {
            s.now + TTL
        }
    }

    /// Queues `c`, or refreshes its entry where it stands, lapsed or not (`ON CONFLICT DO
    /// UPDATE` keeps the entry's `seq`): a lapsed entry nothing deleted yet comes back in its
    /// old place.
    fn enqueue(s: &mut State, c: u8) {
        enqueue(&mut s.queue, c, s.now + ENTRY_LIFE);
    }

    /// The first live queue entry's waiter (lapsed entries are skipped, and stay).
    fn live_head(s: &State) -> Option<u8> {
        s.queue.iter().find(|&&(_, end)| end > s.now).map(|&(c, _)| c)
    }

    /// `DELETE … WHERE owner = <c> OR expires_at <= now`: `c`'s entry and the lapsed ones (a
    /// grant's clean-up, a leave).
    fn drop_entry_and_lapsed(s: &mut State, c: u8) {
        let now = s.now;
        s.queue.retain(|&(q, end)| q != c && end > now);
    }

    /// The release's grant: the first live entry gets the row provisionally (the claim window
    /// `min(ttl, 1 s)`) with a new fence, its entry is deleted, and its client is notified;
    /// with no live entry the row is freed.
    pub fn hand_on(s: &mut State) {
        let Some(i) = s.queue.iter().position(|&(_, end)| end > s.now) else {
            s.row = None;
            return;
        };
        let (head, _) = s.queue.remove(i);
        s.fence += 1;
        s.row = Some(Row { owner: head, token: s.fence, expires: s.now + CLAIM, provisional: true });
        s.net.send(head, s.fence);
    }

    /// The acquire statement: `Some(token)` granted, `None` queued. An own row is re-granted,
    /// expired or not, with its fence; a free or expired row goes to the caller only when no
    /// live waiter is queued before it, else it is handed to that waiter and the caller queues.
    pub fn acquire(&self, s: &mut State, c: u8) -> Option<u8> {
        let pre = s.flushed();
        let reply = self.acquire_statement(s, c);
        // A grant commits durably (`grant_not_durable`: it does not); a refusal (and the hand-on
        // after it) does not wait for the flush.
        s.commit(pre, reply.is_some() && !self.bugs.grant_not_durable);
        reply
    }

    fn acquire_statement(&self, s: &mut State, c: u8) -> Option<u8> {
        match s.row {
            Some(r) if r.owner == c => {
                let expires = self.regrant_expiry(s, r);
                s.row = Some(Row { expires, provisional: false, ..r });
                Self::drop_entry_and_lapsed(s, c);
                Some(r.token)
            }
            Some(r) if r.expires > s.now => {
                Self::enqueue(s, c);
                None
            }
            _ => match Self::live_head(s) {
                // Refused, queued (or refreshed where it stood), then the hand-on the store
                // runs after a refusal on a free row: the first live entry, now maybe its own.
                Some(head) if head != c => {
                    Self::enqueue(s, c);
                    Self::hand_on(s);
                    None
                }
                _ => {
                    Self::drop_entry_and_lapsed(s, c);
                    s.fence += 1;
                    s.row = Some(Row { owner: c, token: s.fence, expires: s.now + TTL, provisional: false });
                    Some(s.fence)
                }
            },
        }
    }

    /// The claim: `UPDATE … SET expires_at = now + ttl WHERE name = … AND owner = <c> RETURNING
    /// fence`. `None`: the row is not `c`'s (the client falls back to the acquire statement).
    /// Its commit waits for the flush, which covers the grant it claims (`claim_not_durable`:
    /// it does not).
    pub fn claim(&self, s: &mut State, c: u8) -> Option<u8> {
        let r = s.row.filter(|r| r.owner == c)?;
        let pre = s.flushed();
        let expires = self.regrant_expiry(s, r);
        s.row = Some(Row { expires, provisional: false, ..r });
        s.commit(pre, !self.bugs.claim_not_durable);
        Some(r.token)
    }

    /// The renewal: `UPDATE … SET expires_at = now + ttl WHERE … owner = <c> AND expires_at >
    /// now`; whether it renewed.
    pub fn renew(s: &mut State, c: u8) -> bool {
        match s.live_row() {
            Some(r) if r.owner == c => {
                let pre = s.flushed();
                s.row = Some(Row { expires: s.now + TTL, ..r });
                s.commit(pre, true);
                true
            }
            _ => false,
        }
    }

    /// The owner-checked release (live rows only), with the grant to the queue's head.
    pub fn release(s: &mut State, c: u8) {
        if s.live_row().is_some_and(|r| r.owner == c) {
            Self::hand_on_committed(s);
        }
    }

    /// [`Pg::hand_on`] as one statement's commit, which does not wait for the flush
    /// (`RELEASE_COMMITS_ASYNC`): a grant to the head is confirmed by the head's durable claim,
    /// and a crash that loses a release that freed the row brings back a lease its holder has
    /// let go (nobody's, [`GHOST`]), which only keeps the others waiting until it ends.
    fn hand_on_committed(s: &mut State) {
        let pre = s.flushed();
        Self::hand_on(s);
        s.commit(pre, false);
    }

    /// A leave's first statement: `DELETE` of the waiter's entry and the lapsed ones (a durable
    /// commit).
    pub fn leave_queue(s: &mut State, c: u8) {
        let pre = s.flushed();
        Self::drop_entry_and_lapsed(s, c);
        if pre.queue != s.queue {
            s.commit(pre, true);
        }
    }

    /// A leave's second statement (`hand_on`): releases a grant `c` was given meanwhile and
    /// hands the lock on; a free or expired row goes to the queue's live head too (and stays as
    /// it is when nobody live is queued). The differential test found the model's first version,
    /// a plain release, leaving an expired row where the statement hands it on.
    pub fn leave_hand_on(s: &mut State, c: u8) {
        match s.live_row() {
            Some(r) if r.owner == c => Self::hand_on_committed(s),
            None if Self::live_head(s).is_some() => Self::hand_on_committed(s),
            _ => {}
        }
    }

    /// The database crashes and comes back with what was flushed: a grant or refusal no flush
    /// covered is gone (the notification it sent is not). A row it brings back whose client
    /// no longer holds it is nobody's ([`GHOST`]).
    pub fn db_crash(s: &mut State) {
        let Some(back) = s.unflushed.take() else { return };
        s.grant_lost |= s.row.is_some_and(|r| r.provisional && back.row.is_none_or(|b| b.token != r.token));
        s.row = back.row.map(|r| {
            let held = s
                .clients
                .get(r.owner as usize)
                .is_some_and(|c| matches!(c, Client::Holding { token, .. } if *token == r.token));
            if held {
                r
            } else {
                Row { owner: GHOST, ..r }
            }
        });
        s.queue = back.queue;
    }
}
