//! The PostgreSQL model's state: the lease row, the waiter queue, the notifications in flight and
//! what each client believes.

use crate::shared::{Hints, Queue, Taken};

/// Which statement an attempt runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stmt {
    /// The acquire statement (with its queue CTE).
    Acquire,
    /// The head's claim: one owner-checked `UPDATE` by primary key that extends its own row.
    Claim,
}

/// A statement still in flight after its client stopped waiting for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InFlight {
    /// An acquire or claim.
    Acquire,
    /// A renewal.
    Renew,
}

/// What one client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Has not asked for the lock yet (or asks again after its previous lease ended).
    Idle,
    /// A statement sent at `t0` awaits the database; `leaving`: its wait ended meanwhile.
    Attempting {
        /// Send instant.
        t0: u8,
        /// Which statement.
        stmt: Stmt,
        /// The wait ended while the statement was in flight.
        leaving: bool,
    },
    /// Its latest attempt, sent at `t0`, answered "queued".
    Waiting {
        /// Send instant of that attempt (read only by a waiter that trusts notifications).
        t0: u8,
    },
    /// Holds a lease with `token`, believed valid while `now < valid_until`.
    Holding {
        /// The fencing token it acts with.
        token: u8,
        /// In the database's ticks (module docs: the slowest clock the drift margin allows).
        valid_until: u8,
        /// Send instant of a renewal statement in flight.
        renewal: Option<u8>,
    },
    /// Its wait ended in a live process: the abandon statements still have to run.
    Leaving {
        /// The first statement (delete the queue entry) ran.
        entry_gone: bool,
    },
    /// Finished leaving.
    Left,
    /// Its lease ended (released, or the lost signal fired) and it asks no more.
    Ended,
    /// Its process died; `held`: while holding a lease it had taken.
    Dead {
        /// It held a lease.
        held: bool,
    },
}

impl Client {
    /// It will never again send anything.
    pub fn gone(self) -> bool {
        matches!(self, Client::Left | Client::Ended | Client::Dead { .. })
    }
}

/// The lease row of the one lock name (`owner` not NULL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Row {
    /// Whose it is.
    pub owner: u8,
    /// Its fence.
    pub token: u8,
    /// `expires_at`, by the database's clock.
    pub expires: u8,
    /// Granted by a release to the queue's head, not claimed yet (the claim window).
    pub provisional: bool,
}

/// The owner of a row restored by a database crash whose owner id is no longer in use (its
/// client released it, or left): nobody's, as a new acquisition comes with a new owner id.
pub const GHOST: u8 = u8::MAX;

/// The database as a crash may bring it back: the row and the queue before the oldest commit
/// that did not wait for the WAL flush (fences are floored by the clock: they never go back).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flushed {
    /// The row.
    pub row: Option<Row>,
    /// The waiter queue.
    pub queue: Queue,
}

/// Database, clients and notifications.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The database's clock.
    pub now: u8,
    /// The row's owner columns, `None` when released (or never granted).
    pub row: Option<Row>,
    /// The row's fence column: the last token issued.
    pub fence: u8,
    /// Waiter queue entries in `seq` order.
    pub queue: Queue,
    /// Each client's state.
    pub clients: Vec<Client>,
    /// Fallback re-tries left per client.
    pub polls: Vec<u8>,
    /// Acquisitions left per client after its current one.
    pub rounds: Vec<u8>,
    /// A statement of a client that is gone (or whose lease ended), still to run on the database.
    pub strays: Vec<Option<InFlight>>,
    /// Grant notifications in flight (recipient and the fence named) and the network's faults.
    pub net: Hints,
    /// Crashes left.
    pub crash: u8,
    /// Database crashes left (each loses what no flush covered yet).
    pub db_crash: u8,
    /// What the database comes back as after a crash now, when a commit is not flushed yet;
    /// kept only while a database crash is left.
    pub unflushed: Option<Flushed>,
    /// Early leaves left.
    pub leave: u8,
    /// Clean-ups that may be cut short (bounded inline run at a deadline) left.
    pub cut: u8,
    /// The tokens clients took.
    pub taken: Taken,
    /// A head claimed a release's provisional grant (shows the path is reached).
    pub handed_over: bool,
    /// A renewal extended a lease (shows the path is reached).
    pub renewed: bool,
    /// A database crash lost a release's grant to the head (shows the path is reached).
    pub grant_lost: bool,
}

impl State {
    /// The row if it is live (`expires_at > now`).
    pub fn live_row(&self) -> Option<Row> {
        self.row.filter(|r| r.expires > self.now)
    }

    /// The row and queue a commit starts from.
    pub fn flushed(&self) -> Flushed {
        Flushed { row: self.row, queue: self.queue.clone() }
    }

    /// A commit from `pre` is over: `durable`, it waited for the WAL flush, which covers every
    /// commit before it (WAL is flushed in order); else, if it changed anything, a crash before
    /// the next flush loses it (and what follows).
    pub fn commit(&mut self, pre: Flushed, durable: bool) {
        if self.db_crash == 0 {
            return;
        }
        if durable {
            self.unflushed = None;
        } else if self.unflushed.is_none() && (pre.row != self.row || pre.queue != self.queue) {
            self.unflushed = Some(pre);
        }
    }
}

crate::properties::leases_of_clients!(State);

impl crate::properties::Kept for State {
    fn kept(&self, c: usize, token: u8) -> bool {
        self.live_row().is_some_and(|r| r.owner == c as u8 && r.token == token)
    }
}

impl crate::properties::Issued for State {
    fn issued(&self) -> u8 {
        self.fence
    }
}
