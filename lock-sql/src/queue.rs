//! The exclusive lock's waiter queue: `<table>_waiters`, one row per waiting `acquire`, so that
//! waiters are served in arrival order and a release wakes one of them.
//!
//! An attempt is granted only when the lease row is free (or expired, or already ours) **and**
//! no live waiter queued before the caller; a caller not (yet) queued counts as queued last, so
//! a newcomer — `try_acquire` included, and the releaser coming straight back — never overtakes
//! a queued waiter. A refused attempt of a waiting `acquire` queues its owner at the database
//! clock in µs (ties broken by owner id) and every later attempt refreshes the entry's expiry
//! while keeping its place; the grant deletes it (with the name's expired entries), and a wait
//! that ends without a grant deletes it too (best effort, in the background).
//!
//! The bound on a vanished head (a waiter whose process died without deleting its entry): its
//! entry stops counting [`lifetime`] after its last refresh, and the next waiter re-tries within
//! its fallback interval after that, so such a head holds the free lock back for at most
//! `12 × max_poll` + 250 ms (`max_poll` = ttl/4 clamped to 20–500 ms: at most 6.25 s, or three
//! ttls for ttls under 2 s). This rests on a waiter attempting at least every `4 × max_poll`,
//! which `StoreLock` guarantees (its fallback re-try when notified, its poll cap otherwise).
//!
//! On PostgreSQL a release grants the lock to the head in the same statement and notifies it
//! with its owner id and the new fence ([`crate::handoff`]): only the client holding that
//! waiter wakes it, and a release nobody waits for or observes sends no notification. Election observers' rows (crate::observers)
//! share the table with the place `i64::MAX`: never ahead of a waiter, never the head. MySQL
//! and SQLite cannot notify; their waiters poll, and the queue makes the polls fair.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use lock_core::OwnerId;

/// How an exclusive acquire attempt stands to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// `try_acquire`: granted only when nobody live is queued; never queued.
    No,
    /// An attempt of a waiting `acquire`: when refused, queue (or refresh) the owner's entry for
    /// `lifetime_ms`; `seq` is its place once queued; `first`: the wait's first attempt, before
    /// which the owner has no entry to delete.
    Queue { lifetime_ms: i64, seq: Option<i64>, first: bool },
}

impl Wait {
    /// The caller's place: live waiters queued before it hold it back (`i64::MAX`: behind all).
    pub(crate) fn place(self) -> i64 {
        match self {
            Wait::Queue { seq: Some(seq), .. } => seq,
            _ => i64::MAX,
        }
    }

    /// How long a refused attempt's entry lives, in ms; 0: not queued.
    pub(crate) fn lifetime_ms(self) -> i64 {
        match self {
            Wait::Queue { lifetime_ms, .. } => lifetime_ms,
            Wait::No => 0,
        }
    }

    /// Whether the caller holds an entry to delete when granted.
    pub(crate) fn queued(self) -> bool {
        matches!(self, Wait::Queue { seq: Some(_), .. })
    }

    /// Whether the caller may hold an entry: queued, or an earlier attempt of this wait may have
    /// queued it without its place coming back. `false` lets a grant skip the queue clean-up.
    pub(crate) fn may_be_queued(self) -> bool {
        matches!(self, Wait::Queue { first: false, .. })
    }
}

/// How long a waiter's entry counts after its last attempt: twice the longest gap between two
/// attempts of a waiter (`4 × max_poll`, see the module docs), plus room for a slow statement.
pub(crate) fn lifetime(max_poll: Duration) -> Duration {
    max_poll.saturating_mul(8) + Duration::from_millis(250)
}

/// The places of this client's waiting acquires, by owner: `None` once an attempt may have
/// queued it without the place coming back (cancelled, failed), so that the end of the wait
/// still deletes the entry.
#[derive(Default)]
pub(crate) struct Places {
    inner: Mutex<HashMap<OwnerId, Option<i64>>>,
    /// Owners granted after their wait was queued: others queue behind them too, likely, so
    /// their release goes straight to the statement that hands off (see [`Places::waited`]).
    waited: Mutex<HashSet<OwnerId>>,
}

/// Past this many unreleased queued grants (leases lost or dropped unreleased) the record is
/// cleared: a forgotten owner only costs its release one more statement, never safety.
const WAITED_CAP: usize = 4096;

impl Places {
    pub(crate) fn get(&self, owner: OwnerId) -> Option<i64> {
        self.lock().get(&owner).copied().flatten()
    }

    /// A waiting attempt of `owner` starts: it may queue it. Whether it is the wait's first
    /// (`owner` had no record: no attempt of this wait can have queued it).
    pub(crate) fn touch(&self, owner: OwnerId) -> bool {
        let mut places = self.lock();
        let first = !places.contains_key(&owner);
        places.entry(owner).or_insert(None);
        first
    }

    pub(crate) fn set(&self, owner: OwnerId, seq: i64) {
        self.lock().insert(owner, Some(seq));
    }

    /// Forgets `owner`'s place; whether it had one.
    pub(crate) fn take(&self, owner: OwnerId) -> bool {
        self.lock().remove(&owner).is_some()
    }

    /// `owner` was granted: forgets its place and records whether its wait had been queued.
    pub(crate) fn granted(&self, owner: OwnerId) {
        if let Some(Some(_)) = self.lock().remove(&owner) {
            let mut waited = self.waited.lock().unwrap_or_else(|e| e.into_inner());
            if waited.len() >= WAITED_CAP {
                waited.clear();
            }
            waited.insert(owner);
        }
    }

    /// Whether `owner`'s grant came after its wait was queued (forgets it): a release then
    /// skips the cheaper statement that frees the row only while nobody is queued, which
    /// would refuse and cost a round trip (crate::dialect::Dialect::release_unqueued).
    pub(crate) fn waited(&self, owner: OwnerId) -> bool {
        self.waited.lock().unwrap_or_else(|e| e.into_inner()).remove(&owner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<OwnerId, Option<i64>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_and_lifetimes() {
        assert_eq!(Wait::No.place(), i64::MAX);
        assert_eq!(Wait::No.lifetime_ms(), 0);
        assert!(!Wait::No.may_be_queued());
        let fresh = Wait::Queue { lifetime_ms: 9, seq: None, first: true };
        assert_eq!((fresh.place(), fresh.queued(), fresh.may_be_queued()), (i64::MAX, false, false));
        let unknown = Wait::Queue { lifetime_ms: 9, seq: None, first: false };
        assert_eq!((unknown.place(), unknown.queued(), unknown.may_be_queued()), (i64::MAX, false, true));
        let queued = Wait::Queue { lifetime_ms: 9, seq: Some(5), first: false };
        assert_eq!((queued.place(), queued.queued(), queued.lifetime_ms(), queued.may_be_queued()), (5, true, 9, true));
        assert_eq!(lifetime(Duration::from_millis(500)), Duration::from_millis(4250));
        let places = Places::default();
        let o = OwnerId::random();
        assert!(places.touch(o), "the wait's first attempt");
        assert_eq!(places.get(o), None, "may be queued, place unknown");
        assert!(!places.touch(o), "a later attempt, after one that may have queued it");
        places.set(o, 7);
        assert!(!places.touch(o));
        assert_eq!(places.get(o), Some(7));
        assert!(places.take(o));
        assert!(!places.take(o));
        assert!(places.touch(o), "a new wait after the grant");
        places.granted(o);
        assert!(!places.waited(o), "granted at its first attempt: never queued");
        places.touch(o);
        places.set(o, 8);
        places.granted(o);
        assert!(places.waited(o), "granted after it was queued");
        assert!(!places.waited(o), "once");
    }
}
