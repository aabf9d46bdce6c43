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
}

impl State {
    /// `c` holds a lease it believes valid.
    pub fn believes(&self, c: usize) -> bool {
        matches!(self.clients[c], Client::Holding { valid_until, .. } if self.now < valid_until)
    }

    /// The row if it is live (`expires_at > now`).
    pub fn live_row(&self) -> Option<Row> {
        self.row.filter(|r| r.expires > self.now)
    }
}
