//! The MySQL model's state: the lease row with its `queued_until`, the waiter queue, what each
//! client is doing, and the flags the properties read.

use crate::shared::Taken;

/// The place of a caller that is not queued: behind every waiter (`i64::MAX` in the store).
pub const LAST: u8 = u8::MAX;

/// The lease row of the one lock name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Row {
    /// `owner`; `None` once released (`owner = NULL`), or when nobody's lease is live any more
    /// (the model forgets the owner of an expired row: no client attempts as that owner again).
    pub owner: Option<u8>,
    /// The fence of the lease (0 once it expired: only a live lease's fence is read).
    pub token: u8,
    /// `expires_at`, by the database's clock.
    pub expires: u8,
    /// `queued_until`: no live entry of the row's queue expires after it. 0 when the row is
    /// inserted; it only grows while the row exists.
    pub queued_until: u8,
}

/// One entry of the waiter queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// Its place: the database's clock when it was inserted, later than every place before it
    /// (the model keeps the places' order only: they are renumbered 1, 2, … as they stand).
    pub seq: u8,
    /// Its waiter.
    pub owner: u8,
    /// `expires_at`: live while `now < expires`.
    pub expires: u8,
}

/// Which attempt a client sent, for what it does with the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Then {
    /// `try_acquire`'s light attempt.
    Try,
    /// A waiting acquire's light attempt (not queued); `entry`: it may hold an entry.
    Acquire {
        /// It may hold an entry (its enqueue's answer was lost), to delete when granted.
        entry: bool,
    },
    /// The fallback (full, place last) of a waiting acquire (`wait`) or a `try_acquire`.
    Fallback {
        /// A waiting acquire.
        wait: bool,
        /// It may hold an entry, to delete when granted.
        entry: bool,
    },
    /// A queued waiter's poll (full, its place); `fresh`: its entry was not due for a rewrite,
    /// so the attempt did not bump and a refusal leaves the entry as it is.
    Poll {
        /// Its place.
        seq: u8,
        /// Not due for a rewrite.
        fresh: bool,
    },
}

impl Then {
    /// Whether the caller may hold an entry to delete when granted.
    pub fn entry(self) -> bool {
        match self {
            Then::Try => false,
            Then::Acquire { entry } | Then::Fallback { entry, .. } => entry,
            Then::Poll { .. } => true,
        }
    }
}

/// What one client is doing. Each step of a client is one statement, run atomically; time may
/// pass between any two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Has not asked for the lock yet (or asks again after releasing).
    Idle,
    /// A waiting acquire whose enqueue ran but whose answer was lost: it does not know its
    /// place, so it attempts as a caller that is not queued (light, then the fallback) and
    /// deletes its entry when granted (the store's `Wait::may_be_queued`).
    Unplaced,
    /// Its light attempt found the row free but `queued_until` ahead: the full attempt with the
    /// place last (the fallback) is its next statement. `wait`: a waiting `acquire` (it queues
    /// when refused), else `try_acquire`; `entry`: it may hold an entry (after a lost answer).
    Fallback {
        /// A waiting acquire.
        wait: bool,
        /// It may hold an entry, to delete when granted.
        entry: bool,
    },
    /// (`read_back`) Its attempt ran; the `SELECT` that reads the row back (owner, fence,
    /// `queued_until`) is its next statement: MySQL without `RETURNING` learns the answer
    /// there.
    Reading {
        /// The attempt.
        then: Then,
        /// Its send instant (a grant's lease counts from it).
        t0: u8,
        /// The attempt's refusal found the row free and no other waiter live (read by
        /// `a try is refused only for a holder or a live waiter`; not the client's).
        for_nothing: bool,
    },
    /// A waiting acquire was refused: its enqueue is the next statement, with the
    /// `queued_until` its attempt returned.
    Enqueue {
        /// `V`: the row's `queued_until` after the attempt (its bump included).
        v: u8,
    },
    /// (`bump_after_enqueue`) Enqueued at `seq`; the separate bump is its next statement.
    Bump {
        /// Its place.
        seq: u8,
    },
    /// Queued at `seq` (as the enqueue answered): it polls with the full attempt.
    Queued {
        /// Its place, kept while it waits even once its entry is gone.
        seq: u8,
        /// Its entry was written in this tick: a refused poll does not rewrite it yet.
        fresh: bool,
    },
    /// Holds a lease with `token`, believed while `now < valid_until`.
    Holding {
        /// The fence it acts with.
        token: u8,
        /// The end of its belief, in the database's ticks.
        valid_until: u8,
        /// It was granted while it may hold an entry: deleting it is its next statement.
        entry: bool,
    },
    /// Gave up waiting and deleted its entry.
    Left,
    /// Its lease ended (released, or its validity passed) and it asks no more.
    Ended,
    /// Its process died: its entry lapses, its lease expires.
    Dead,
}

/// Database, clients and what the properties look back on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The database's clock (the clients' too).
    pub now: u8,
    /// The lease row; `None` before the first insert and after the collector deleted it.
    pub row: Option<Row>,
    /// The last fence issued (lock-sql floors fences by the clock in µs, so a row inserted
    /// anew after the collector's delete still issues a higher one).
    pub fence: u8,
    /// The waiter queue in `(seq, owner)` order, lapsed entries included until deleted.
    pub queue: Vec<Entry>,
    /// Each client's state.
    pub clients: Vec<Client>,
    /// Acquisitions left per client after its current one.
    pub rounds: Vec<u8>,
    /// Waits that may still end early.
    pub leave: u8,
    /// Crashes left.
    pub crash: u8,
    /// Enqueue answers that may still be lost.
    pub lose: u8,
    /// The tokens clients took.
    pub taken: Taken,
    /// A free row was granted while a live entry of another waiter stood before the caller.
    pub overtaken: bool,
    /// A `try_acquire` was refused while the row was free and no other waiter was live.
    pub refused_for_nothing: bool,
    /// A fallback granted a free row the light attempt had refused (shows the path is reached).
    pub fallback_granted: bool,
    /// The collector deleted the lease row (shows the path is reached).
    pub collected: bool,
}

impl State {
    /// The row if its lease is live (`owner` set, `expires_at > now`).
    pub fn live_row(&self) -> Option<Row> {
        self.row.filter(|r| r.owner.is_some() && r.expires > self.now)
    }

    /// Whether `e` is live (`expires_at > now`).
    pub fn live(&self, e: &Entry) -> bool {
        e.expires > self.now
    }

    /// Whether a live entry of a waiter other than `c` stands before place `place`.
    pub fn waiter_ahead(&self, c: u8, place: u8) -> bool {
        self.queue.iter().any(|e| e.owner != c && self.live(e) && e.seq < place)
    }

    /// Whether the row is free to `c` by the full condition with the place last: no live lease
    /// of another, no live entry of another.
    pub fn free_for(&self, c: u8) -> bool {
        self.live_row().is_none_or(|r| r.owner == Some(c)) && !self.waiter_ahead(c, LAST)
    }

    /// Whether every live entry expires by the row's `queued_until` (a live entry without a
    /// row is not covered).
    pub fn queue_covered(&self) -> bool {
        self.queue.iter().filter(|e| self.live(e)).all(|e| self.row.is_some_and(|r| e.expires <= r.queued_until))
    }
}

crate::properties::leases_of_clients!(State);

impl crate::properties::Kept for State {
    fn kept(&self, c: usize, token: u8) -> bool {
        self.live_row().is_some_and(|r| r.owner == Some(c as u8) && r.token == token)
    }
}

/// Which grant condition an acquire upsert carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attempt {
    /// `owner = me OR ((owner IS NULL OR expires_at <= now) AND queued_until <= now)`: no
    /// reference to the queue table. For a caller that is not queued (its place is last).
    Light,
    /// `owner = me OR ((owner IS NULL OR expires_at <= now) AND NOT EXISTS (live entry of
    /// another with (seq, owner) < (place, me)))`: the queue subquery.
    Full {
        /// The caller's place: its entry's `seq`, or [`LAST`].
        place: u8,
    },
}

impl Attempt {
    /// The caller's place.
    pub(crate) fn place(self) -> u8 {
        match self {
            Attempt::Light => LAST,
            Attempt::Full { place } => place,
        }
    }
}

/// Whether a refusal bumps `queued_until` in the same statement (to `now + lifetime`): when the
/// caller may follow it with its enqueue (lock-sql binds the lifetime, else 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bump {
    /// No bump (`try_acquire`; a poll whose entry is not due for a rewrite; `bump_after_enqueue`).
    No,
    /// A refusal bumps.
    Refused,
}

/// What the upsert answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Granted, with this fence.
    Granted(u8),
    /// Refused; `free`: the row had no live lease (so the queue or its summary refused);
    /// `queued_until`: the row's after the statement (its bump included), `V`.
    Refused {
        /// The row was free or expired.
        free: bool,
        /// `V`.
        queued_until: u8,
    },
}

/// The place client state `c` holds, if queued.
pub(crate) fn place_of(c: &Client) -> Option<u8> {
    match *c {
        Client::Queued { seq, .. } | Client::Bump { seq } => Some(seq),
        Client::Reading { then: Then::Poll { seq, .. }, .. } => Some(seq),
        _ => None,
    }
}
