//! PostgreSQL's grant in the release: the hand-off of an exclusive lock to the head of its
//! waiter queue, which the head confirms with one cheap statement of its own.
//!
//! A release (and a waiter's leave, and a refused attempt that finds the lock free but owed to
//! a queued waiter) that frees a name whose queue head is live grants the lease to that head in
//! the same statement — new fence from the row's counter, the head's holder and metadata (its
//! queue entry carries ttl, holder and metadata), the head's entry deleted — and notifies
//! `dlock-grant:<owner>:<fence>` on the head's client's channel.
//!
//! ## The grant is provisional until the head claims it
//!
//! The release's grant lasts [`CLAIM_WINDOW`] (`min(head's ttl, 1 s)`, `expires_at` = the
//! database clock read under the row's lock + that), not the head's ttl: a head that does not
//! take it up (its process died, its future was dropped at that instant) holds the lock that
//! long, and then it is free (the head's entry is gone), for the next waiter or a newcomer.
//! The head **claims** it: one
//! `UPDATE … SET expires_at = now + ttl WHERE name = … AND owner = <head> RETURNING fence`
//! by primary key. The lease the head returns is that statement's answer — the fence read from
//! the row, validity counted from the claim's send instant (contract
//! §3's re-grant: the row is already ours) — never the notification's.
//!
//! The release's commit does not wait for the WAL flush (sql.rs `RELEASE_COMMITS_ASYNC`): the
//! claim's does, and it comes after the release's in the WAL, so a claim acknowledged is a
//! release kept; a crash that loses the release loses no lease (the claim failed with it), and
//! the row is the releaser's again until its lease ends. That saves the hand-off one flush.
//!
//! 1 s: far above what a live head needs (the notification plus one statement, ~1 ms here;
//! a loaded machine's scheduling delays of tens of ms), far below the default ttls. A head whose
//! claim comes later still takes the grant when nobody took the lapsed lock meanwhile (same
//! fence, nobody else held it); else its claim finds the row not its own and it queues again.
//!
//! The bound on an untaken grant: the grant lapses after the claim window; the next waiter
//! re-tries at the latest `4 × max_poll` after its last attempt (≤ 2 s; `StoreLock`'s fallback
//! re-try), and an attempt that finds the provisional grant sleeps only until it lapses, so the
//! next waiter holds within `max(claim window, 4 × max_poll) + one statement` of the release
//! (≤ 2 s + a statement with the defaults); a newcomer's `try_acquire` succeeds once the claim
//! window has passed when nobody else waits.
//!
//! ## A notification is a hint
//!
//! `NOTIFY` needs no privilege, and anyone who can read the queue knows a waiter's owner id and
//! channel: a notification's owner only says which waiter to wake, and its fence is not read
//! at all. A waiter woken by a grant notification runs the claim; when that finds nothing
//! (forged, late, duplicated, or the grant lapsed and went to someone else) it runs its acquire
//! statement as after any wake-up. A forged notification thus costs the waiter one or two
//! statements, never a lease the database did not grant.
//!
//! ## Lost notifications, leaving, vanished heads
//!
//! * A notification lost (listener reconnecting): the head's timer re-try finds the row ours and
//!   re-grants it (the acquire statement re-grants an own row, expired or not, with its fence);
//!   after a reconnect every waiter re-tries at once.
//! * A head whose wait ends without taking a grant (time-out, error, dropped future) leaves the
//!   queue in two statements: its entry goes first (a release in progress locks the head's
//!   entry `FOR UPDATE`, so it either granted before the delete, or skips the deleted entry and
//!   takes the next one); then a statement releases what it was granted and hands the lock on to
//!   the next head (or hands a free lock to it). The waiter's record is forgotten only once both
//!   ran, so a clean-up cut short (its bounded inline run) is finished by the background one.
//! * A head that vanished with a grant in flight: the grant lapses after the claim window (above).
//!   Only heads whose entry is live are granted, so a head that vanished more than its entry's
//!   lifetime (`8 × max_poll + 250 ms`) before the release is never granted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::dialect::Handoff;

/// The payload prefix of a grant's notification: `dlock-grant:<owner>:<fence>`.
pub(crate) const GRANT: &str = "dlock-grant:";

/// How long a release's grant to the queue's head lasts before the head claims it (at most the
/// head's ttl): the bound on a grant nobody takes up (module docs).
pub(crate) const CLAIM_WINDOW: Duration = Duration::from_secs(1);

/// What this client knows of one waiting owner.
#[derive(Default)]
struct Entry {
    /// A grant notification named it since its latest answer: its next attempt claims first.
    granted: bool,
    /// When its latest "still queued" answer arrived, and the holder's remaining lease it
    /// reported; only an answer to a statement sent while the listener listened.
    answered: Option<(Instant, Option<Duration>)>,
}

/// An attempt this soon after a "still queued" answer, with no grant heard, is answered from
/// that answer instead of the database: `StoreLock` re-tries right after subscribing when the
/// listener cannot vouch for the gap (it is reconnecting: `WakeSubscription::live_since`), so
/// that a release in between is not missed, and such a release's grant to us is heard (the
/// expectation is set before the first attempt) and makes the next attempt claim, while a
/// release that granted someone else changes nothing for us. Saves that re-try's commit. Only
/// an answer to a statement sent while the listener listened counts: a grant made after a
/// statement sent before (the listener reconnecting, or not listening while its client was
/// idle, listen.rs) may never be heard, and the attempt must ask the database.
const RECENT: Duration = Duration::from_millis(10);

/// The hand-offs this client's waiters may have been granted, by owner id (32 hex digits).
#[derive(Default)]
pub(crate) struct Handoffs {
    inner: Mutex<Waits>,
}

#[derive(Default)]
struct Waits {
    by_owner: HashMap<String, Entry>,
    /// Since when the listener has heard every notification (`None` while it does not).
    listening: Option<Instant>,
}

impl Handoffs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waits> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Since when the listener hears every notification; `None` once it does not (the
    /// listener sets it with its hub's `live_since`).
    pub(crate) fn set_listening(&self, since: Option<Instant>) {
        self.lock().listening = since;
    }

    /// Whether no wait of this client expects a grant.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().by_owner.is_empty()
    }

    /// A notification: when it names a grant to an owner of ours, returns the key of the waiter
    /// to wake. Only a hint (module docs): whoever sent it, the fence it names is not read.
    pub(crate) fn heard(&self, payload: &str) -> Option<String> {
        let (owner, _fence) = payload.strip_prefix(GRANT)?.split_once(':')?;
        let mut waits = self.lock();
        let e = waits.by_owner.get_mut(owner)?;
        e.granted = true;
        Some(super::wake::waiter(owner))
    }
}

impl Handoff for Handoffs {
    /// A waiting attempt of `owner` starts: from now on its grant notifications are heard.
    /// Called before the attempt is sent, so that no notification of a grant after it is missed.
    fn expect(&self, owner: &str) {
        self.lock().by_owner.entry(owner.to_owned()).or_default();
    }

    /// `owner`'s attempt, sent at `sent`, answered "still queued", the holder's lease
    /// `remaining`; kept only when the listener listened since before `sent` ([`RECENT`]).
    fn queued(&self, owner: &str, remaining: Option<Duration>, sent: Instant) {
        let mut waits = self.lock();
        let heard_since_sent = waits.listening.is_some_and(|since| since <= sent);
        if let Some(e) = waits.by_owner.get_mut(owner) {
            e.answered = heard_since_sent.then(|| (Instant::now(), remaining));
        }
    }

    /// The answer to give an attempt of `owner` without a statement: still queued, the holder's
    /// lease `remaining`, when its latest "still queued" answer came less than [`RECENT`] ago
    /// and no grant was heard since. A wake-up for another reason (a reconnected listener, a
    /// force release) that comes that soon then waits for the waiter's fallback
    /// re-try: latency, never safety (nothing is granted here).
    fn recent(&self, owner: &str, now: Instant) -> Option<Option<Duration>> {
        let mut waits = self.lock();
        // The listener stopped since (reconnecting, or idle): a grant may go unheard.
        waits.listening?;
        let e = waits.by_owner.get_mut(owner)?;
        if e.granted {
            return None;
        }
        let (at, remaining) = e.answered.take()?;
        let age = now.checked_duration_since(at)?;
        (age < RECENT).then(|| remaining.map(|r| r.saturating_sub(age)))
    }

    /// Whether a grant notification named `owner` since its latest answer (cleared): its
    /// attempt then claims before it runs the acquire statement.
    fn claim_due(&self, owner: &str) -> bool {
        self.lock().by_owner.get_mut(owner).is_some_and(|e| std::mem::take(&mut e.granted))
    }

    /// The wait of `owner` ended (granted by a statement, or left).
    fn forget(&self, owner: &str) {
        self.lock().by_owner.remove(owner);
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
    fn a_grant_notification_only_wakes_its_waiter() {
        let h = Handoffs::default();
        h.set_listening(Some(Instant::now()));
        let o = "ab".repeat(16);
        assert_eq!(h.heard(&payload(&o, 5)), None, "not expected: not ours");
        h.expect(&o);
        assert!(!h.claim_due(&o), "no grant heard");
        h.queued(&o, None, Instant::now());
        assert_eq!(h.recent(&o, Instant::now()), Some(None), "just answered: no statement");
        assert_eq!(h.recent(&o, Instant::now()), None, "once");
        h.queued(&o, None, Instant::now());
        assert_eq!(h.heard(&payload(&o, i64::MAX)), Some(super::super::wake::waiter(&o)));
        assert_eq!(h.recent(&o, Instant::now()), None, "a grant heard: never answered without a statement");
        assert!(h.claim_due(&o), "a grant heard: the next attempt claims");
        assert!(!h.claim_due(&o), "once per notification");
        h.forget(&o);
        assert_eq!(h.heard(&payload(&o, 10)), None, "forgotten once the wait ended");
        for bad in ["dlock-grant:", "dlock-grant:x", "dlock-waiter:x:1"] {
            h.expect("x");
            assert_eq!(h.heard(bad), None, "{bad}");
        }
    }

    /// A grant made while the listener did not listen is never heard: an answer to a statement
    /// sent before it listened (again) must not stand in for the database.
    #[test]
    fn only_answers_sent_while_listening_are_reused() {
        let h = Handoffs::default();
        let o = "cd".repeat(16);
        h.expect(&o);
        let before = Instant::now();
        h.queued(&o, None, before);
        assert_eq!(h.recent(&o, Instant::now()), None, "not listening: ask the database");
        h.set_listening(Some(Instant::now()));
        h.queued(&o, None, before);
        assert_eq!(h.recent(&o, Instant::now()), None, "sent before the listener listened again");
        h.queued(&o, None, Instant::now());
        h.set_listening(None);
        assert_eq!(h.recent(&o, Instant::now()), None, "the listener stopped since");
        h.set_listening(Some(before));
        h.queued(&o, None, Instant::now());
        assert_eq!(h.recent(&o, Instant::now()), Some(None), "sent while listening");
        assert!(!h.is_empty());
        h.forget(&o);
        assert!(h.is_empty());
    }
}
