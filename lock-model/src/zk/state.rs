//! The ZooKeeper model's state: the leader's sessions and nodes, each client's connection
//! through its server, and what each client believes.

use crate::shared::Taken;

/// What one client is doing with the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Has not created its node yet.
    Idle,
    /// Its node is not the lowest; it watches `watch`, the node just below it at its last look.
    Waiting {
        /// The czxid of the watched predecessor.
        watch: u8,
    },
    /// Its node was the lowest at a look the quorum answered: it holds `token` (the node's
    /// czxid), believed valid while `now < valid_until` by its own clock.
    Holding {
        /// The fencing token: the node's czxid.
        token: u8,
        /// By its own clock.
        valid_until: u8,
    },
    /// Released, or told the lease was lost, or its validity ran out (the lost signal).
    Ended,
}

/// The leader's view of one client's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Session {
    /// When the leader last heard of the session (a follower's ping answer listing it, or a
    /// reconnection it revalidated).
    pub heard: u8,
    /// The leader expired it (its nodes are gone); the client does not know until it asks.
    pub expired: bool,
}

/// One client's connection, through the server (a follower) it is connected to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Link {
    /// The client keeps a connection (false: suspended, it will reconnect).
    pub connected: bool,
    /// Its follower is cut off from the leader: it still answers the client's pings, but
    /// forwards nothing and reports nothing.
    pub cut: bool,
    /// When the client's last request or ping reached the follower.
    pub contact: u8,
    /// The follower heard from the session since its last ping answer to the leader.
    pub pending: bool,
    /// The follower's ping answer of this interval is still to go.
    pub due: bool,
}

impl Link {
    /// A connection to a server that reaches the leader, made at `now`.
    pub fn fresh(now: u8) -> Link {
        Link { connected: true, cut: false, contact: now, pending: false, due: false }
    }

    /// Requests reach the leader through it (writes, `sync`).
    pub fn up(&self) -> bool {
        self.connected && !self.cut
    }
}

/// Leader, followers, clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The clock (leader and clients run at the same rate).
    pub now: u8,
    /// The last zxid issued (a create's czxid).
    pub zxid: u8,
    /// The lock's children in creation order: czxid and the client whose session owns the
    /// ephemeral node (sequence order is czxid order: one parent, one leader).
    pub nodes: Vec<(u8, u8)>,
    /// Per client: the leader's view of its session.
    pub sessions: Vec<Session>,
    /// Per client: its connection.
    pub links: Vec<Link>,
    /// Per client: what it believes.
    pub clients: Vec<Client>,
    /// Per client: acquisitions left after the current one.
    pub rounds: Vec<u8>,
    /// Follower cut-offs left in this run.
    pub cuts: u8,
    /// The tokens clients took.
    pub taken: Taken,
    /// A waiter took the lock after its predecessor went (shows the path is reached).
    pub handed_over: bool,
    /// The leader expired a session whose client was holding (shows the path is reached).
    pub expired_under_holder: bool,
}

impl State {
    /// The czxid of `c`'s node, if it has one.
    pub fn node_of(&self, c: u8) -> Option<u8> {
        self.nodes.iter().find(|&&(_, owner)| owner == c).map(|&(z, _)| z)
    }
}

impl crate::properties::Kept for State {
    fn kept(&self, c: usize, token: u8) -> bool {
        self.node_of(c as u8) == Some(token)
    }
}

crate::properties::leases_of_clients!(State);
