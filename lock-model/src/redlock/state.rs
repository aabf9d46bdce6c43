//! The Redlock model's state: the masters, the requests in flight on each client's connection
//! to each master, the background tasks not yet sent, and what each client believes.

use crate::shared::Taken;

/// A request of one client to one master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Round 1: take the key for `attempt` and read the fence floor.
    Acquire {
        /// The attempt id the grant writes.
        attempt: u8,
        /// The acquisition it belongs to (the owner id is the client's and this generation's).
        acq: u8,
    },
    /// Round 2: store `token` if it is above the master's counter (set-if-greater).
    Fence {
        /// The token the attempt chose.
        token: u8,
        /// The attempt storing it (a store writes its token into the attempt's pushed lease).
        attempt: u8,
    },
    /// A failed attempt's undo: free the key if it is still this attempt's.
    Undo {
        /// The failed attempt.
        attempt: u8,
        /// Its acquisition.
        acq: u8,
    },
    /// The owner-checked release (also a wait's withdrawal): frees the key if it is this
    /// owner's; with the hand-off, a free key then goes to the queue's head, if any.
    Release {
        /// The releaser's token (0 for a withdrawal, which holds none): the token left there is
        /// above it, as the claim it replaces would have raised the counter to it.
        token: u8,
        /// The acquisition releasing (or withdrawing): only its key is freed.
        acq: u8,
    },
    /// (blocking delivery) The first renewal of a lease held on pushed grants: extends the key
    /// for the ttl if it is the caller's (whatever its token), raises the counter to `token` and
    /// takes it; never grants.
    Claim {
        /// The token the pops named.
        token: u8,
        /// The acquisition that holds it.
        acq: u8,
    },
}

/// A grant's attempt id: the release's grant names no attempt, so no undo frees it.
pub const GRANT: u8 = 0;

/// (blocking delivery) A claimed lease's attempt id (lock-redis's `a = 'claim'`): no attempt
/// has it, so no undo frees the lease, and it is not a grant (the claim removes `g`), so no
/// lease step takes a token left there.
pub const CLAIM: u8 = u8::MAX;

/// Per master, the token a lease step answered "handed" with (0: not handed).
pub type Handed = [u8; 3];

/// One master's record of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Whose it is: the client...
    pub owner: u8,
    /// ...and which of its acquisitions (lock-redis draws a fresh owner id for each, so a
    /// request of an earlier acquisition never matches a key granted to a later one).
    pub acq: u8,
    /// The attempt that last granted or re-granted it ([`GRANT`] for a release's grant,
    /// [`CLAIM`] once claimed).
    pub attempt: u8,
    /// The tick from which it is gone (PEXPIRE).
    pub expires: u8,
    /// (blocking delivery) The key's `t`: the token a release took for the head it pushed this
    /// grant to, that the owner's attempt took ("handed") or stored there, or that the owner's
    /// claim wrote; 0 otherwise (and always without blocking delivery). The model's release
    /// does not read it (its next token is `max(fence, carried token) + 1`, the fence at least
    /// `t`).
    pub token: u8,
    /// (blocking delivery) The release pushed this lease to its owner (the key's `p`): no undo
    /// of the owner's attempts frees it, even one whose lease step re-granted it, since the
    /// owner's wait may still count its pop. The claim removes it.
    pub pushed: bool,
}

/// One master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Master {
    /// The lock key, if set (it may be past `expires`).
    pub key: Option<Key>,
    /// The fence counter (set-if-greater).
    pub fence: u8,
    /// (hand-off) The token the last release left for the next taker (lock-redis's `next:<token>`
    /// mark in fence-by), 0: none. Good only while it is still the fence; a taker, or a store,
    /// clears it.
    pub next: u8,
    /// After a restart that lost its data, it grants nothing before this tick.
    pub quiet_until: u8,
}

impl Key {
    /// The key is acquisition `acq` of client `c`'s (its owner id).
    pub fn owned_by(&self, c: u8, acq: u8) -> bool {
        self.owner == c && self.acq == acq
    }
}

impl Master {
    /// The key, if it is still live at `now`.
    pub fn live(&self, now: u8) -> Option<Key> {
        self.key.filter(|k| k.expires > now)
    }
}

/// What one client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Between attempts (or before the first).
    Idle,
    /// Round 1 of `attempt`, started at `t0`: masks of the masters that granted, refused
    /// ("held") or failed (timed out), and the highest floor read.
    Round1 {
        /// The attempt id.
        attempt: u8,
        /// Its start instant (the lease's validity counts from it).
        t0: u8,
        /// Masters that granted.
        granted: u8,
        /// Masters that answered "held".
        refused: u8,
        /// Masters that timed out.
        failed: u8,
        /// The highest fence floor the grants read.
        floor: u8,
        /// The masters that answered "handed", with their token.
        handed: Handed,
    },
    /// Round 2 of `attempt`: storing `token` on a majority.
    Round2 {
        /// The attempt id.
        attempt: u8,
        /// Its start instant.
        t0: u8,
        /// The token chosen: the highest floor + 1.
        token: u8,
        /// Masters that refused in round 1 (no undo goes there).
        refused1: u8,
        /// Masters that stored the token.
        stored: u8,
        /// Masters that refused the store or timed out.
        failed: u8,
    },
    /// Holds `token`, believed valid while `now < valid_until`.
    Holding {
        /// The fencing token.
        token: u8,
        /// By its own clock.
        valid_until: u8,
        /// (blocking delivery) The claim of a lease held on pushed grants, due or sent, not
        /// decided yet.
        claim: Option<Claim>,
    },
    /// Released, lapsed, or out of attempts.
    Done,
}

/// (blocking delivery) The first renewal of a lease held on pushed grants: due once the pops
/// made a majority, sent on every master at once at any moment of the belief (lock-core defers
/// it a third into the window), never if the holder releases first (lock-core's `end_claim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Claim {
    /// Its send instant (`None`: due, not sent): a majority's answer extends the belief to it
    /// plus the ttl.
    pub sent: Option<u8>,
    /// Masters that extended the key with the token.
    pub ok: u8,
    /// Masters that did not.
    pub failed: u8,
}

/// (blocking delivery) A waiting client's dedicated connection to one master: its arm and the
/// `BLPOP` after it, sent back to back at `t_s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Block {
    /// No `BLPOP` of this wait's outstanding (none sent, ended, or the connection closed).
    Idle,
    /// Sent at `t_s`, not run yet.
    Sent {
        /// The arm's send instant.
        t_s: u8,
    },
    /// The arm ran; the `BLPOP` blocks.
    Blocked {
        /// The arm's send instant.
        t_s: u8,
    },
    /// A release pushed `token`: the `BLPOP`'s reply is on its way.
    Popped {
        /// The arm's send instant.
        t_s: u8,
        /// The token the release took for the head.
        token: u8,
    },
    /// The reply reached the wait, which counts it.
    Got {
        /// The instant the grant is counted from.
        t_s: u8,
        /// The token it names.
        token: u8,
    },
}

/// Masters, connections, background tasks, clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The clock (masters and clients run at the same rate).
    pub now: u8,
    /// The masters' fine clock (µs in the code), one step per request a master runs: the
    /// masters' clocks are assumed to agree (see the module docs).
    pub micros: u8,
    /// The masters.
    pub masters: Vec<Master>,
    /// Requests sent and not yet run, in order, per client and master (`c * masters + m`): one
    /// connection per master, so they run in the order they were sent.
    pub chans: Vec<Vec<Op>>,
    /// Background tasks spawned but not yet sent (client, master, request): an undo may go out
    /// after the same client's next attempt.
    pub pool: Vec<(u8, u8, Op)>,
    /// Per client.
    pub clients: Vec<Client>,
    /// Per client: attempts left.
    pub attempts: Vec<u8>,
    /// Per client: its current acquisition's generation (its owner id with the client's name):
    /// a release with attempts left starts the next one.
    pub acqs: Vec<u8>,
    /// Per client: the last attempt id used.
    pub last_attempt: Vec<u8>,
    /// Time-outs left in this run.
    pub lose: u8,
    /// Restarts (with the data lost) left in this run.
    pub restart: u8,
    /// The tokens clients took.
    pub taken: Taken,
    /// A client held the lock after another had (shows the path is reached).
    pub second_holder: bool,
    /// A client held on a majority of "handed" answers, without a fence store (shows the
    /// hand-off is reached).
    pub handed_holder: bool,
    /// (bug `head_trusts_message`) The release's messages in flight: recipient, token, tick.
    /// Empty with the switch off: a message is then only a hint, the same as an attempt that
    /// starts at any time.
    pub msgs: Vec<(u8, u8, u8)>,
    /// (blocking delivery) Per client and master (`c * masters + m`): the wait's connection.
    pub blocks: Vec<Block>,
    /// (blocking delivery) Per client and master: the tick the arm's mark ends (0: none).
    pub armed: Vec<u8>,
    /// (blocking delivery) Per client: arms left to send in this run.
    pub arms: Vec<u8>,
    /// (blocking delivery) A client held on pushed grants (shows the fast path is reached).
    pub pushed_holder: bool,
    /// Masters are renamed too by the symmetry reduction (`symmetry.rs`): set by the blocking
    /// delivery's bounds only, so that the others keep the counts they were measured with.
    pub masters_interchangeable: bool,
}

crate::properties::leases_of_clients!(State);
