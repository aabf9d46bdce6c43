//! The ZooKeeper lock recipe with sessions as leases, as lock-zk runs it against an ensemble.
//!
//! ## The protocol
//! - **Acquire**: the client creates an ephemeral sequential node under the lock (a write, so
//!   through the leader) and looks at the children behind a `sync`; the lowest node holds, with
//!   its czxid as the fencing token. A waiter watches only its predecessor and looks again when
//!   the watch fires.
//! - **The lease is the session.** Only the leader expires sessions, a session timeout after it
//!   last heard of one; through a follower it hears of a session only from the follower's
//!   answers to its pings (every half tick), which list the sessions the follower heard from
//!   since the previous answer. A forwarded write or `sync` refreshes nothing. A reconnection
//!   through a server that reaches the leader revalidates the session at once.
//! - **The client's belief**: a lease is valid until `t0 + bound` by the client's clock, with
//!   `t0` the send instant of the last request the quorum answered (the create, the look behind
//!   a `sync`, a renewal's `sync` and read) and `bound` lock-zk's own rule (`server_bound`, called by [`bound::fixed`]). The
//!   lost signal fires when the client learns the session expired, when its watch reports the
//!   node deleted, or when `valid_until` passes.
//! - **The client's connection**: it pings when idle and drops a connection that answered
//!   nothing for a while, so while connected it is never silent towards its server for more
//!   than [`bound::silence`]; a dropped connection is suspended (the lease stays valid by the
//!   clock alone) until it reconnects.
//!
//! ## Faults in the model
//! Each client is connected through its own follower. A follower may be cut off from the leader
//! at any moment (right after forwarding a create, say): it keeps answering its client's pings
//! but forwards and reports nothing, so its client's writes and `sync`s go unanswered until it
//! reconnects elsewhere. A client's requests may stall on its link for as long as it keeps the
//! connection (it pings at any moment, or stays silent up to [`bound::silence`]), and it may
//! drop the connection and reconnect at the adversary's choice. Answers and pings take no time:
//! validity counts from the send, so a slower answer only shortens a belief.
//!
//! ## Properties
//! - `no two believers`: never two clients that each hold a lease they believe valid by their
//!   own clock.
//! - `tokens increase`: each client that takes the lock has a czxid above every earlier taker's.
//! - `a lost lease is signalled before it is gone`: while a holder believes its lease, its node
//!   is still there at the leader; a lease the leader took away has already run out by the
//!   holder's clock (or been signalled lost) before anyone else can be granted the lock.
//!
//! Time is whole units of the session (10 in the tests, 20 in the deep run: the client's timers
//! exactly); the leader's rounding of expiry up to a tick is ignored (it only ever expires
//! later); clocks run at the same rate (the code's `drift` margin covers a bounded difference).

pub mod bound;
mod model;
mod state;
mod symmetry;

pub use model::{Action, Bugs, Zk};
pub use state::{Client, Link, Session, State};
