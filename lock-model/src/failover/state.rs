//! The failover model's state: two nodes and their replication, what each client believes.

use crate::shared::Taken;

/// Owner ids per client (attempts are fewer).
pub(crate) const OWNERS: u8 = 8;

/// One node's lock data (the lease key and the fence counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Data {
    /// The lease: owner id (`State::owner`), token, expiry (absolute, as Redis 7 replicates `PEXPIREAT`).
    pub lease: Option<(u8, u8, u8)>,
    /// The fence counter.
    pub fence: u8,
}

/// One node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// Its data.
    pub data: Data,
    /// Its replication offset: how many writes it has.
    pub offset: u8,
}

/// What one client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Not holding; may try to acquire.
    Idle,
    /// Its attempt's connection broke before the `WAIT` answered: the attempt sends both again
    /// on a fresh connection, as the same owner.
    Retrying,
    /// Its acquire script was granted `token` (sent at `t0`) on the primary of `epoch`, a write
    /// at `offset`; its `WAIT` is still to answer.
    Acking {
        /// Send instant.
        t0: u8,
        /// The token granted.
        token: u8,
        /// The failover epoch of its connection.
        epoch: u8,
        /// The replication offset of its write.
        offset: u8,
    },
    /// Holds `token`, believed valid while `now < valid_until`; a renewal whose `WAIT` is still
    /// to answer: `(t0, epoch, offset)`.
    Holding {
        /// The fencing token.
        token: u8,
        /// By its own clock.
        valid_until: u8,
        /// A renewal awaiting its acknowledgement.
        renewal: Option<(u8, u8, u8)>,
        /// When its latest grant or renewal was sent (the watchdog tries at most once a tick).
        sent: u8,
    },
    /// Its lease was lost (or it released its last one).
    Ended,
}

/// Nodes, replication, clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The clock (every node and client agree).
    pub now: u8,
    /// The primary.
    pub primary: Node,
    /// The replicas (kept sorted: they are interchangeable).
    pub replicas: Vec<Node>,
    /// The primary's writes some replica has not applied yet, oldest first: the data after each
    /// (the last is the primary's offset).
    pub backlog: Vec<Data>,
    /// Failovers so far (a connection made before the latest is broken).
    pub epoch: u8,
    /// Failovers left.
    pub failovers: u8,
    /// Each client's state.
    pub clients: Vec<Client>,
    /// Acquire attempts left per client.
    pub attempts: Vec<u8>,
    /// The tokens clients took.
    pub taken: Taken,
    /// A holder's lease survived a failover (shows the path is reached).
    pub kept_across_failover: bool,
}

impl State {
    /// The owner id of `c`'s current attempt: each acquisition has its own (lock-core's
    /// `OwnerId` per lease), so a grant that comes back after a failover is never taken for a
    /// later attempt's.
    pub fn owner(&self, c: u8) -> u8 {
        c * OWNERS + self.attempts[c as usize]
    }
}

crate::properties::leases_of_clients!(State);

impl crate::properties::Kept for State {
    /// On the current primary: a lease on a replica or a replaced primary is not kept.
    fn kept(&self, c: usize, token: u8) -> bool {
        let me = self.owner(c as u8);
        self.primary.data.lease.is_some_and(|(owner, t, expires)| owner == me && t == token && expires > self.now)
    }
}
