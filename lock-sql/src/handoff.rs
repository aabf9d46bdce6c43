//! PostgreSQL's grant in the release: the hand-off of an exclusive lock to the head of its
//! waiter queue without a statement of the head's own.
//!
//! A release (and a waiter's leave, and a refused attempt that finds the lock free but owed to
//! a queued waiter) that frees a name whose queue head is live grants the lease to that head in
//! the same statement — new fence from the row's counter, `expires_at` = the database clock read
//! **after the statement locked the lease row** + the head's ttl (its queue entry carries ttl,
//! holder and metadata), the head's entry deleted — and notifies `dlock-grant:<owner>:<fence>`.
//! Only the client holding that waiter records it ([`Handoffs`]) and wakes it; the waiter then
//! holds without another statement.
//!
//! ## Where the head's validity starts (docs/contract.md §3)
//!
//! Not at the notification: the server's lease began at the grant, earlier. The head takes as
//! its start `t_s`, the send instant of its **latest** acquire statement `S` that answered
//! "still queued", and only for a grant whose fence `F` is above the fence `L` that `S` saw:
//!
//! 1. `S` read the lease row under a row lock (its upsert locks the conflicting row, and its
//!    refused branch re-reads it `FOR NO KEY UPDATE`, so `L` is the latest committed version's
//!    fence, not an older snapshot's). The granting statement `G` locks the same row before it
//!    reads the clock. The two locks exclude each other.
//! 2. Fences only grow, one per grant, in the row's commit order. If `G` had locked the row
//!    before `S`, `S` would have waited for `G`'s commit and then seen `G`'s grant or a later
//!    one: owner = us (then `S` answers "granted" itself) or a fence `≥ F` (then `F ≤ L`). So
//!    `F > L` means `G` locked the row after `S` did, hence after `S` was sent: `G`'s clock
//!    reading `X` is later than `t_s`, and the server's `expires_at = X + ttl` is later than
//!    `t_s + ttl`. The usual `drift` margin covers the two clocks' rates.
//! 3. A notification with `F ≤ L` (a grant `S` already saw superseded, delivered late) is
//!    dropped; the waiter runs its statement instead.
//!
//! A long wait since `S` leaves little validity: the head takes a notified grant only while
//! `now < t_s + ttl/2`, else it runs its acquire statement, which finds the row already ours and
//! re-grants it (`expires_at = now + ttl`, same fence: contract §3's re-grant), with validity from
//! that statement's own send instant. A taken grant's watchdog renews on its usual schedule
//! counted from `t_s` (`t_s + ttl/3`), so after a wait of more than ttl/3 its first renewal
//! starts at once. Waiters re-try at least every `4 × max_poll` (≤ 2 s), so with the default
//! ttls the notified grant is almost always the one taken.
//!
//! ## Lost notifications, leaving, vanished heads
//!
//! * A notification lost (listener reconnecting): the head's timer re-try finds the row ours and
//!   re-grants it, as above; after a reconnect every waiter re-tries at once.
//! * A head whose wait ends without taking a grant (time-out, error, dropped future) leaves the
//!   queue in two steps: its entry goes first (a release in progress locks the head's entry
//!   `FOR UPDATE`, so it either granted before the delete, or skips the deleted entry and takes the
//!   next one); then a statement releases what it was granted and hands the lock on to the next
//!   head (or hands a free lock to it), in the release's statement.
//! * A head that vanished with a grant in flight: the grant expires after its ttl like any lease.
//!   Only heads whose entry is live are granted, so a head that vanished more than its entry's
//!   lifetime (`8 × max_poll + 250 ms`) before the release is never granted; one that vanished
//!   in that window holds the lock for its ttl.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The payload prefix of a grant's notification: `dlock-grant:<owner>:<fence>`.
pub(crate) const GRANT: &str = "dlock-grant:";

/// What this client knows of one waiting owner.
#[derive(Default)]
struct Entry {
    /// The highest fence a grant notification named.
    heard: Option<i64>,
    /// The send instant and the seen fence of its latest attempt that answered "still queued".
    seen: Option<(Instant, i64)>,
    /// When that answer arrived, and the holder's remaining lease it reported.
    answered: Option<(Instant, Option<Duration>)>,
}

/// An attempt this soon after a "still queued" answer, with no grant heard, is answered from
/// that answer instead of the database: `StoreLock` re-tries right after subscribing when the
/// listener cannot vouch for the gap (it is reconnecting: `WakeSubscription::live_since`), so
/// that a release in between is not missed, and here such a release's grant to us is recorded
/// (the expectation is set before the first attempt) and taken without a statement, while a
/// release that granted someone else changes nothing for us. Saves that re-try's commit.
const RECENT: Duration = Duration::from_millis(10);

/// The hand-offs this client's waiters expect, by owner id (32 hex digits).
#[derive(Default)]
pub(crate) struct Handoffs {
    inner: Mutex<HashMap<String, Entry>>,
}

impl Handoffs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A waiting attempt of `owner` starts: from now on its grant notifications are recorded.
    /// Called before the attempt is sent, so that no notification of a grant after it is missed.
    pub(crate) fn expect(&self, owner: &str) {
        self.lock().entry(owner.to_owned()).or_default();
    }

    /// `owner`'s attempt sent at `sent` answered "still queued", having seen `fence`.
    pub(crate) fn queued(&self, owner: &str, sent: Instant, fence: i64, remaining: Option<Duration>) {
        if let Some(e) = self.lock().get_mut(owner) {
            e.seen = Some((sent, fence));
            e.answered = Some((Instant::now(), remaining));
        }
    }

    /// The answer to give an attempt of `owner` without a statement: still queued, the holder's
    /// lease `remaining`, when its latest "still queued" answer came less than [`RECENT`] ago
    /// and no grant was heard since. A wake-up for another reason (a reconnected listener, an
    /// older version's release) that comes that soon then waits for the waiter's fallback
    /// re-try: latency, never safety (nothing is granted here).
    pub(crate) fn recent(&self, owner: &str, now: Instant) -> Option<Option<Duration>> {
        let mut map = self.lock();
        let e = map.get_mut(owner)?;
        if e.heard.is_some() {
            return None;
        }
        let (at, remaining) = e.answered.take()?;
        let age = now.checked_duration_since(at)?;
        (age < RECENT).then(|| remaining.map(|r| r.saturating_sub(age)))
    }

    /// The wait of `owner` ended (granted by its own statement, or left).
    pub(crate) fn forget(&self, owner: &str) {
        self.lock().remove(owner);
    }

    /// A notification: when it is a grant to an owner of ours, records it and returns the
    /// key of the waiter to wake.
    pub(crate) fn heard(&self, payload: &str) -> Option<String> {
        let (owner, fence) = payload.strip_prefix(GRANT)?.split_once(':')?;
        let fence = fence.parse::<i64>().ok()?;
        let mut map = self.lock();
        let e = map.get_mut(owner)?;
        e.heard = Some(e.heard.map_or(fence, |f| f.max(fence)));
        Some(crate::wake::waiter(owner))
    }

    /// The grant to `owner` (lease time `ttl`) to take without a statement, with the instant its
    /// validity starts (see the module docs); `None`: run the acquire statement (no grant heard,
    /// one older than the latest "still queued", or too little validity left). Forgets `owner`
    /// when it returns a grant.
    pub(crate) fn take(&self, owner: &str, ttl: Duration, now: Instant) -> Option<(i64, Instant)> {
        let mut map = self.lock();
        let e = map.get_mut(owner)?;
        let fence = e.heard?;
        let (sent, seen) = e.seen?;
        if fence <= seen {
            // Stale: a grant that answer already saw superseded.
            e.heard = None;
            return None;
        }
        if sent.checked_add(ttl / 2).is_none_or(|until| now >= until) {
            // Ours, but too little validity left from `sent`: the statement re-grants it
            // (`heard` stays, so that `recent` does not answer for the database).
            return None;
        }
        map.remove(owner);
        Some((fence, sent))
    }
}

/// The payload of a grant to `owner` with `fence` (what the statements build in SQL; tests).
#[cfg(test)]
fn payload(owner: &str, fence: i64) -> String {
    format!("{GRANT}{owner}:{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_only_grants_after_the_latest_queued_answer() {
        let h = Handoffs::default();
        let (o, ttl) = ("ab".repeat(16), Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(h.heard(&payload(&o, 5)), None, "not expected: not ours");
        h.expect(&o);
        h.queued(&o, t0, 7, None);
        assert_eq!(h.recent(&o, Instant::now()), Some(None), "just answered: no statement");
        assert_eq!(h.recent(&o, Instant::now()), None, "once");
        assert_eq!(h.heard(&payload(&o, 7)), Some(crate::wake::waiter(&o)));
        assert_eq!(h.take(&o, ttl, t0), None, "a grant the queued answer already saw superseded");
        assert!(h.heard(&payload(&o, 8)).is_some());
        assert_eq!(h.take(&o, ttl, t0 + Duration::from_secs(5)), None, "half the ttl gone: run the statement");
        assert_eq!(h.recent(&o, Instant::now()), None, "a grant heard: never answered without a statement");
        h.heard(&payload(&o, 9));
        assert_eq!(h.take(&o, ttl, t0 + Duration::from_secs(1)), Some((9, t0)));
        assert_eq!(h.take(&o, ttl, t0), None, "taken once");
        assert_eq!(h.heard(&payload(&o, 10)), None, "forgotten once taken");
        for bad in ["dlock-grant:", "dlock-grant:x", "dlock-grant:x:y", "dlock-waiter:x:1"] {
            h.expect("x");
            assert_eq!(h.heard(bad), None, "{bad}");
        }
    }
}
