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
//! On PostgreSQL a release grants the lock to the head in the same statement, provisionally
//! until the head claims it, and notifies it with its owner id (`dialect/postgres/handoff.rs`):
//! only the client holding that waiter wakes it, and a release nobody waits for or observes
//! sends no notification. Election observers' rows (`dialect/postgres/observers.rs`) share the
//! table with the place `i64::MAX`: never ahead of a waiter, never the head. MySQL
//! and SQLite cannot notify; their waiters poll, and the queue makes the polls fair. A refused
//! attempt there also learns how many live waiters are ahead of it, and the waiter polls by that
//! place ([`queued_poll`]): the head and the one behind it every millisecond or two, the others
//! less often. Such an attempt rewrites its entry only once a quarter of the entry's lifetime has
//! passed ([`Places::refresh_due`]); in between it is one statement that also counts the waiters
//! ahead, not two.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use lock_core::OwnerId;
use tokio::time::Instant;

/// How an exclusive acquire attempt stands to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// `try_acquire`: granted only when nobody live is queued; never queued.
    No,
    /// An attempt of a waiting `acquire`: when refused, queue (or refresh) the owner's entry for
    /// `lifetime_ms`; `seq` is its place once queued; `first`: the wait's first attempt, before
    /// which the owner has no entry to delete; `refresh`: a refusal must write the entry (not
    /// queued yet, or written a quarter of its lifetime ago), else the databases that poll skip
    /// that statement and only count the waiters ahead ([`Places::refresh_due`]).
    Queue { lifetime_ms: i64, seq: Option<i64>, first: bool, refresh: bool },
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

    /// Whether a refusal must (re)write the caller's entry.
    pub(crate) fn refresh(self) -> bool {
        match self {
            Wait::Queue { seq: None, .. } => true,
            Wait::Queue { refresh, .. } => refresh,
            Wait::No => false,
        }
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
    inner: Mutex<HashMap<OwnerId, Place>>,
    /// Owners granted after their wait was queued: others queue behind them too, likely, so
    /// their release goes straight to the statement that hands off (see [`Places::waited`]).
    waited: Mutex<HashSet<OwnerId>>,
}

/// Past this many unreleased queued grants (leases lost or dropped unreleased) the record is
/// cleared: a forgotten owner only costs its release one more statement, never safety.
const WAITED_CAP: usize = 4096;

/// One waiting acquire's record: its place once known, and (polling databases) how many live
/// waiters were ahead at its latest attempt and for how many attempts in a row.
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    seq: Option<i64>,
    ahead: Option<i64>,
    streak: u32,
    /// When an attempt last (re)wrote the entry.
    written: Option<Instant>,
}

impl Places {
    pub(crate) fn get(&self, owner: OwnerId) -> Option<i64> {
        self.lock().get(&owner).and_then(|p| p.seq)
    }

    /// A waiting attempt of `owner` starts: it may queue it. Whether it is the wait's first
    /// (`owner` had no record: no attempt of this wait can have queued it).
    pub(crate) fn touch(&self, owner: OwnerId) -> bool {
        let mut places = self.lock();
        let first = !places.contains_key(&owner);
        places.entry(owner).or_default();
        first
    }

    /// Whether the next refusal of `owner` must rewrite its entry, which lives `lifetime`: not
    /// queued yet, or last written a quarter of that ago (so three attempts in a row may fail
    /// or be late before the entry lapses).
    pub(crate) fn refresh_due(&self, owner: OwnerId, lifetime: Duration, now: Instant) -> bool {
        match self.lock().get(&owner) {
            Some(Place { seq: Some(_), written: Some(at), .. }) => now.saturating_duration_since(*at) >= lifetime / 4,
            _ => true,
        }
    }

    /// A refused attempt queued `owner` at `seq` (`written`: it (re)wrote the entry at
    /// `sent`), with `ahead` live waiters before it (when the database said): how long it
    /// should wait before its next attempt ([`queued_poll`]), when nothing will notify it.
    pub(crate) fn set(&self, owner: OwnerId, seq: i64, ahead: Option<i64>, written: Option<Instant>) -> Duration {
        let mut places = self.lock();
        let place = places.entry(owner).or_default();
        place.streak = if place.ahead == ahead && ahead.is_some() { place.streak.saturating_add(1) } else { 0 };
        (place.seq, place.ahead) = (Some(seq), ahead);
        if written.is_some() {
            place.written = written;
        }
        ahead.map_or(QUEUED_POLL_MAX_HEAD, |ahead| queued_poll(ahead, place.streak))
    }

    /// Whether `owner` has a record (a waiting acquire that may be queued).
    pub(crate) fn has(&self, owner: OwnerId) -> bool {
        self.lock().contains_key(&owner)
    }

    /// Forgets `owner`'s place; whether it had one.
    pub(crate) fn take(&self, owner: OwnerId) -> bool {
        self.lock().remove(&owner).is_some()
    }

    /// `owner` was granted: forgets its place and records whether its wait had been queued.
    pub(crate) fn granted(&self, owner: OwnerId) {
        if let Some(Place { seq: Some(_), .. }) = self.lock().remove(&owner) {
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<OwnerId, Place>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The shortest wait between two attempts of a queued waiter of a polling database (MySQL,
/// SQLite): the head's, at first.
const QUEUED_POLL_MIN: Duration = Duration::from_millis(1);

/// The head's longest: a long hold costs the head one attempt per 10 ms, as every queued waiter
/// cost before places were known.
const QUEUED_POLL_MAX_HEAD: Duration = Duration::from_millis(10);

/// The longest of a waiter behind the head; well inside the `4 × max_poll` (≥ 80 ms) within
/// which every waiter re-tries (the module docs).
const QUEUED_POLL_MAX: Duration = Duration::from_millis(40);

/// How long a queued waiter of a database that cannot notify waits before its next attempt,
/// with `ahead` live waiters queued before it, the same number for the `streak` attempts before
/// this one. Nothing tells such a waiter that its turn came, so each hand-off waits for the next
/// head's next poll: the head and the waiter behind it (the head by its next attempt, likely)
/// poll often, each further waiter ahead doubles the wait (each must be served first), and so
/// does every fourth attempt that found the same number ahead (a long hold, or a queue that
/// does not move). Before places were known
/// every queued waiter polled every 10 ms: hand-offs took 8–13 ms on MariaDB (BENCHMARKS.md).
pub(crate) fn queued_poll(ahead: i64, streak: u32) -> Duration {
    let doublings = u32::try_from(ahead.max(1) - 1).unwrap_or(u32::MAX).saturating_add(streak / 4).min(16);
    let cap = if ahead <= 0 { QUEUED_POLL_MAX_HEAD } else { QUEUED_POLL_MAX };
    QUEUED_POLL_MIN.saturating_mul(1 << doublings).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_and_lifetimes() {
        assert_eq!(Wait::No.place(), i64::MAX);
        assert_eq!(Wait::No.lifetime_ms(), 0);
        assert!(!Wait::No.may_be_queued());
        assert!(!Wait::No.refresh());
        let fresh = Wait::Queue { lifetime_ms: 9, seq: None, first: true, refresh: false };
        assert_eq!((fresh.place(), fresh.queued(), fresh.may_be_queued()), (i64::MAX, false, false));
        assert!(fresh.refresh(), "not queued: a refusal writes the entry whatever the record says");
        let unknown = Wait::Queue { lifetime_ms: 9, seq: None, first: false, refresh: false };
        assert_eq!((unknown.place(), unknown.queued(), unknown.may_be_queued()), (i64::MAX, false, true));
        let queued = Wait::Queue { lifetime_ms: 9, seq: Some(5), first: false, refresh: false };
        assert_eq!((queued.place(), queued.queued(), queued.lifetime_ms(), queued.may_be_queued()), (5, true, 9, true));
        assert!(!queued.refresh());
        assert_eq!(lifetime(Duration::from_millis(500)), Duration::from_millis(4250));
        let places = Places::default();
        let o = OwnerId::random();
        assert!(places.touch(o), "the wait's first attempt");
        let (life, t0) = (Duration::from_millis(400), Instant::now());
        assert!(places.refresh_due(o, life, t0), "not queued yet");
        assert_eq!(places.get(o), None, "may be queued, place unknown");
        assert!(!places.touch(o), "a later attempt, after one that may have queued it");
        places.set(o, 7, None, Some(Instant::now()));
        assert!(!places.touch(o));
        assert_eq!(places.get(o), Some(7));
        let written = t0.checked_add(Duration::from_millis(1)).unwrap_or(t0);
        places.set(o, 7, Some(0), Some(written));
        assert!(!places.refresh_due(o, life, written + Duration::from_millis(99)), "written recently");
        places.set(o, 7, Some(0), None);
        assert!(places.refresh_due(o, life, written + Duration::from_millis(100)), "a quarter of its lifetime ago");
        assert!(places.take(o));
        assert!(!places.take(o));
        assert!(places.touch(o), "a new wait after the grant");
        places.granted(o);
        assert!(!places.waited(o), "granted at its first attempt: never queued");
        places.touch(o);
        places.set(o, 8, None, None);
        places.granted(o);
        assert!(places.waited(o), "granted after it was queued");
        assert!(!places.waited(o), "once");
    }

    #[test]
    fn queued_polls_by_place() {
        let ms = Duration::from_millis;
        // (ahead, streak, wait)
        let table = [
            (0, 0, ms(1)),
            (0, 3, ms(1)),
            (0, 4, ms(2)),
            (0, 12, ms(8)),
            (0, 16, ms(10)),
            (0, u32::MAX, ms(10)),
            (1, 0, ms(1)),
            (2, 0, ms(2)),
            (3, 4, ms(8)),
            (5, 0, ms(16)),
            (6, 0, ms(32)),
            (7, 0, ms(40)),
            (i64::MAX, u32::MAX, ms(40)),
            (-1, 0, ms(1)),
        ];
        for (ahead, streak, want) in table {
            assert_eq!(queued_poll(ahead, streak), want, "ahead {ahead}, streak {streak}");
        }
        let (places, o) = (Places::default(), OwnerId::random());
        places.touch(o);
        assert_eq!(places.set(o, 1, None, None), QUEUED_POLL_MAX_HEAD, "no count: the old 10 ms");
        let waits: Vec<Duration> = [2, 2, 1, 0, 0, 0, 0, 0].iter().map(|&a| places.set(o, 1, Some(a), None)).collect();
        assert_eq!(
            waits,
            [ms(2), ms(2), ms(1), ms(1), ms(1), ms(1), ms(1), ms(2)],
            "the streak restarts when the place moves"
        );
        assert_eq!(places.get(o), Some(1));
    }
}
