//! The MySQL / MariaDB statements of the exclusive lock with `queued_until`, as the model's
//! server steps, each one atomic, mirroring `lock-sql/src/dialect/mysql/sql.rs`: the acquire
//! upsert (light or full) with its bump, the enqueue, the entry's delete, the release and the
//! collector's two statements.

use super::model::{Mysql, LIFE, TTL};
use super::state::{place_of, Answer, Attempt, Bump, Entry, Row, State};

impl Mysql {
    /// The acquire upsert (`INSERT … ON DUPLICATE KEY UPDATE`): a missing row is inserted as the
    /// caller's, with no condition at all (`queued_until` 0); an own row is re-granted
    /// (`expires_at = GREATEST(expires_at, now + ttl)`, same fence); else the row goes to the
    /// caller when free or expired and `how`'s condition holds, with a new fence. A refusal
    /// bumps `queued_until` as `bump` says.
    pub fn attempt(&self, s: &mut State, c: u8, how: Attempt, bump: Bump) -> Answer {
        let now = s.now;
        let Some(row) = s.row else {
            return Self::grant(s, c, how.place(), 0);
        };
        if row.owner == Some(c) {
            s.row = Some(Row { expires: row.expires.max(now + TTL), ..row });
            return Answer::Granted(row.token);
        }
        let free = row.owner.is_none() || row.expires <= now;
        let clear = match how {
            Attempt::Light => row.queued_until <= now,
            Attempt::Full { place } => !s.waiter_ahead(c, place),
        };
        if free && clear {
            return Self::grant(s, c, how.place(), row.queued_until);
        }
        let queued_until = match bump {
            Bump::No => row.queued_until,
            Bump::Refused => row.queued_until.max(now + LIFE),
        };
        s.row = Some(Row { queued_until, ..row });
        Answer::Refused { free, queued_until }
    }

    /// A free, expired or missing row becomes `c`'s with a new fence; `overtaken` records a live
    /// entry of another waiter before `c`'s place (the property `no overtaking`).
    fn grant(s: &mut State, c: u8, place: u8, queued_until: u8) -> Answer {
        s.overtaken |= s.waiter_ahead(c, place);
        s.fence += 1;
        s.row = Some(Row { owner: Some(c), token: s.fence, expires: s.now + TTL, queued_until });
        Answer::Granted(s.fence)
    }

    /// The enqueue: `INSERT … ON DUPLICATE KEY UPDATE` of `c`'s entry with
    /// `expires_at = LEAST(now + lifetime, V)` (`V` as `c`'s preceding attempt returned it),
    /// `seq` kept if the entry exists (lapsed or not), else later than every place before it.
    /// The entry's place.
    pub fn enqueue(&self, s: &mut State, c: u8, v: u8) -> u8 {
        let full = s.now + LIFE;
        let expires = if self.bugs.enqueue_ignores_bump || self.bugs.bump_after_enqueue { full } else { full.min(v) };
        if let Some(e) = s.queue.iter_mut().find(|e| e.owner == c) {
            e.expires = expires;
            return e.seq;
        }
        let seq = s.max_seq() + 1;
        s.queue.push(Entry { seq, owner: c, expires });
        seq
    }

    /// (`bump_after_enqueue`) The bump as a statement of its own, after the enqueue:
    /// `UPDATE … SET queued_until = GREATEST(queued_until, now + lifetime)` (nothing when the row
    /// is gone).
    pub fn bump_alone(s: &mut State) {
        let now = s.now;
        if let Some(r) = s.row.as_mut() {
            r.queued_until = r.queued_until.max(now + LIFE);
        }
    }

    /// `DELETE … WHERE owner = <c> OR expires_at <= now`: `c`'s entry and the lapsed ones (the
    /// granted waiter's clean-up, a leave).
    pub fn leave_queue(s: &mut State, c: u8) {
        let now = s.now;
        s.queue.retain(|e| e.owner != c && e.expires > now);
    }

    /// `UPDATE … SET owner = NULL, expires_at = now WHERE owner = <c> AND expires_at > now`.
    pub fn release(s: &mut State, c: u8) {
        if s.live_row().is_some_and(|r| r.owner == Some(c)) {
            let now = s.now;
            s.row = s.row.map(|r| Row { owner: None, expires: now, ..r });
        }
    }

    /// Whether `t` lies `idle` in the past: `t <= now - idle`.
    pub fn idle_past(&self, t: u8, now: u8) -> bool {
        t + self.idle <= now
    }

    /// Whether the lease row is idle for the collector: `expires_at <= now - idle` and
    /// `queued_until <= now - idle` (`collector_ignores_queue`: `expires_at` alone).
    pub fn row_idle(&self, s: &State) -> bool {
        s.row.is_some_and(|r| {
            self.idle_past(r.expires, s.now)
                && (self.bugs.collector_ignores_queue || self.idle_past(r.queued_until, s.now))
        })
    }

    /// `collect_idle(idle)`'s first statement: `DELETE` of the entries with
    /// `expires_at <= now - idle`.
    pub fn collect_entries(&self, s: &mut State) {
        let now = s.now;
        s.queue.retain(|e| !self.idle_past(e.expires, now));
    }

    /// `collect_idle(idle)`'s second statement: `DELETE` of the lease row if it is idle
    /// ([`Mysql::row_idle`]).
    pub fn collect_row(&self, s: &mut State) {
        if self.row_idle(s) {
            s.row = None;
            s.collected = true;
        }
    }
}

impl State {
    /// The highest place any entry or client holds (0: none).
    pub(crate) fn max_seq(&self) -> u8 {
        let entries = self.queue.iter().map(|e| e.seq);
        entries.chain(self.clients.iter().filter_map(place_of)).max().unwrap_or(0)
    }
}
