//! The Redis single-instance model's state: the lease key, the waiter queue, the boot marker,
//! the messages in flight and what each client believes.

use crate::shared::{Hints, Queue, Taken};

/// What one client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Has not asked for the lock yet.
    Idle,
    /// An acquire sent at `t0` awaits the server; `leaving`: its wait ended meanwhile.
    Attempting {
        /// Send instant.
        t0: u8,
        /// The wait ended while the attempt was in flight.
        leaving: bool,
    },
    /// Its latest attempt, sent at `t0`, answered "queued".
    Waiting {
        /// Send instant of that attempt.
        t0: u8,
    },
    /// Holds a lease with `token`, believed valid while `now < valid_until`.
    Holding {
        /// The fencing token it acts with.
        token: u8,
        /// By its own clock.
        valid_until: u8,
        /// Blocking delivery: the claim of a popped grant, not answered yet. The holder may
        /// release first ([`Claim`]).
        claim: Option<Claim>,
    },
    /// Its wait ended in a live process; the abandon step still has to run (`release_only`: with
    /// the bug, only its second step is left).
    Leaving {
        /// The entry is already gone, the release of a grant is still to run.
        release_only: bool,
    },
    /// Finished leaving.
    Left,
    /// Released its lease.
    Done,
    /// Its process died; `held`: while holding a lease it had taken.
    Dead {
        /// It held a lease.
        held: bool,
    },
}

impl Client {
    /// It will never again send anything.
    pub fn gone(self) -> bool {
        matches!(self, Client::Left | Client::Done | Client::Dead { .. })
    }
}

/// Blocking delivery: where the claim of a popped grant stands until its answer. lock-core
/// defers it a third into the grant's window, so the holder may release before either step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Claim {
    /// Not sent yet: a release first means it never is (lock-core's `end_claim`).
    Due,
    /// Sent at this instant: a release first leaves it in flight, to run at the server after
    /// the release ([`State::late`]).
    Sent(u8),
}

/// A client's dedicated connection under blocking delivery: its arm and `BLPOP`, sent together
/// at `t_s` and run by the server one after the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Block {
    /// Nothing outstanding on it.
    Idle,
    /// Sent, not run yet.
    Sent {
        /// Send instant.
        t_s: u8,
    },
    /// The arm ran; the `BLPOP` waits for a push.
    Blocked {
        /// Send instant.
        t_s: u8,
    },
    /// The `BLPOP` popped `token`; the reply is on its way.
    Popped {
        /// Send instant of the arm and `BLPOP`.
        t_s: u8,
        /// The grant's token.
        token: u8,
    },
}

/// The lease key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grant {
    /// Whose it is.
    pub client: u8,
    /// Its fencing token.
    pub token: u8,
    /// The tick from which it is gone.
    pub expires: u8,
    /// Granted by a release to a queue head that has not claimed it yet.
    pub handoff: bool,
}

/// Server, clients and network.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The server's clock (the clients' run at the same rate).
    pub now: u8,
    /// The lease, if one was granted (it may be past `expires`).
    pub owner: Option<Grant>,
    /// The last token issued.
    pub fence: u8,
    /// The waiter queue.
    pub queue: Queue,
    /// The boot marker: `None` after a restart until an acquire sets it, then the end of the
    /// quiet period it started (`Some(0)`: marked long ago).
    pub marker: Option<u8>,
    /// Each client's state.
    pub clients: Vec<Client>,
    /// Fallback re-tries left per client.
    pub polls: Vec<u8>,
    /// Acquisitions left per client after its current one.
    pub rounds: Vec<u8>,
    /// A request of a client that is gone, still to run on the server.
    pub strays: Vec<bool>,
    /// Wake-up and grant messages in flight, and the network's fault budgets.
    pub net: Hints,
    /// Crashes left.
    pub crash: u8,
    /// Early leaves left.
    pub leave: u8,
    /// Restarts left.
    pub restart: u8,
    /// The tokens clients took.
    pub taken: Taken,
    /// A queued waiter took a lease handed to it by a release (shows the path is reached).
    pub handed_over: bool,
    /// Blocking delivery (all idle or empty under the hint delivery): each client's dedicated
    /// connection.
    pub blocks: Vec<Block>,
    /// Arm-and-`BLPOP` requests left per client.
    pub arms: Vec<u8>,
    /// Each client's arm marker: the tick from which it is gone (0: none).
    pub armed: Vec<u8>,
    /// Each client's grant list, oldest first. At most one token: a push needs the marker, which
    /// the push clears and only an arm sets, and each arm empties the list (its drain, or with
    /// the bug its `BLPOP`).
    pub lists: Vec<Vec<u8>>,
    /// Blocking delivery: each client's claim sent before its release, by the token it claims,
    /// still to run at the server: at any moment after the release, the next holder's grant
    /// included (more than its connection allows, where the claim runs before the release that
    /// follows it). Its answer is ignored: the lease it was for is over.
    pub late: Vec<Option<u8>>,
    /// A claim that ran after its client's release changed the lease.
    pub late_claim_changed: bool,
}

impl State {
    /// The lease if it is live.
    pub fn grant_live(&self) -> Option<Grant> {
        self.owner.filter(|g| g.expires > self.now)
    }

    /// The server keeps the lease `c` holds: live, its own, the token it acts with.
    pub fn kept(&self, c: usize) -> bool {
        let Client::Holding { token, .. } = self.clients[c] else { return false };
        self.grant_live().is_some_and(|g| usize::from(g.client) == c && g.token == token)
    }

    pub(super) fn take(&mut self, c: u8, token: u8, valid_until: u8) {
        self.taken.take(token);
        self.clients[c as usize] = Client::Holding { token, valid_until, claim: None };
    }
}

crate::properties::leases_of_clients!(State);

impl crate::properties::Issued for State {
    fn issued(&self) -> u8 {
        self.fence
    }
}
