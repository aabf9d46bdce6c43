//! The exclusive lock of a single Redis instance: its waiter queue with the grant in the release
//! and the restart quiet period, as lock-redis's scripts run them (`ACQUIRE_SRC`, `RELEASE_SRC`,
//! `ABANDON_SRC` in `lock-redis/src/scripts/exclusive.rs`, the queue in `waiters.rs`). The
//! PostgreSQL statements of the same design are [`crate::pg`].
//!
//! ## The protocol
//! - **Acquire** (one script): a lease that is the caller's own is re-granted for a full ttl,
//!   same token (contract §3: this is also how a head *claims* a grant); a lease of another
//!   queues the caller (or pushes its entry's end forward). A free lock in the quiet period
//!   after a restart queues the caller; else it goes to the caller when nobody live is queued
//!   ahead of it, with the next fencing token; a free lock owed to another live head
//!   **reserves** that head (its entry lives at most [`RESERVE`] more, and it is woken) and
//!   queues the caller.
//! - **Release** (one script, owner-checked) hands the lock to the first live queue entry:
//!   a *provisional* grant of [`CLAIM`] ticks with the next token, and a message to that head.
//! - **The message is a hint.** A waiter that hears it runs its acquire again, which claims the
//!   grant (re-grant to the same owner) and answers the server's token; the waiter's validity
//!   counts from that attempt's send instant.
//! - **Leaving** (a wait that timed out, a dropped future, in a live process) runs the abandon
//!   script after any attempt of its own still in flight (same connection, or awaited): a grant
//!   it holds is released and handed on, its entry goes, and when it was the head of a free
//!   lock the next head is reserved, all in one script.
//! - Queue entries stay live for [`ENTRY_LIFE`] ticks after their waiter's latest attempt; a
//!   waiter re-tries on a fallback timer, so a lost message costs latency, never the lock.
//! - **Restart**: a server that lost its data (leases, queue, boot marker) grants nothing for
//!   [`QUIET`] ticks from the first acquire that finds the marker missing; tokens stay above
//!   every earlier one (the scripts floor them by the server's clock).
//!
//! ## Faults in the model
//! Grant messages are lost, duplicated, delivered late and in any order, and forged (a message to
//! any waiter with a token no server issued: anyone who can read the queue and publish). An
//! attempt's reply is lost after the server ran it (the client re-sends). Clients leave while
//! waiting or with an attempt in flight, and die at any point (a request already sent still
//! runs). The server restarts without its data.
//!
//! ## Properties
//! - `no two believers`: never two clients that each hold a lease they believe valid by their own
//!   clock (`now < valid_until`, with `valid_until` lock-core's own rule counted from `t0`, the
//!   send instant of the attempt that answered the grant: [`crate::shared::belief_end`]).
//! - `tokens come from the server`: no client holds a token the server did not issue.
//! - `tokens increase`: each client that takes a lease has a token above every earlier taker's.
//! - `an untaken grant lapses`: a hand-off grant whose waiter died or left is live at most
//!   [`CLAIM`] ticks more; a waiter that finished leaving holds no grant at all.
//!
//! Time is abstract: a tick is the unit of ttl; server and clients share the clock's rate (the
//! code's `drift` margin is what covers a bounded rate difference). The server steps are checked
//! against the real scripts by the differential test (`tests/redis_differential.rs`).

mod model;
mod server;
mod state;
mod symmetry;

pub use crate::shared::{NetAction, QueueAction, FORGED};
pub use model::{Action, OwnAction};
pub use server::WAKE;
pub use state::{Client, Grant, State};

/// Ticks a lease lasts from its grant or claim.
pub const TTL: u8 = 4;
/// Ticks a provisional hand-off grant lasts unless its head claims it.
pub const CLAIM: u8 = 1;
/// Ticks a queue entry stays live after its waiter's latest attempt.
pub const ENTRY_LIFE: u8 = 2;
/// Ticks a head reserved for a free lock keeps its entry at most.
pub const RESERVE: u8 = 1;
/// Ticks a restarted server grants nothing (`restart_quiet_period`, by default the longest ttl).
pub const QUIET: u8 = TTL;

/// Design errors found before, each put back by its switch; every one must give a counterexample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// A waiter takes a grant message as the grant: the message's token, validity from its latest
    /// queued attempt, no server step (the shortcut that trusted `!owner:token:n`).
    pub trust_message: bool,
    /// The release grants the head its whole ttl at once instead of a provisional claim window.
    pub full_ttl_grant: bool,
    /// Abandon gives up the waiter's queue entry first and releases a grant it received in a
    /// second step that can be cut (the background retry then finds nothing to do).
    pub abandon_forgets_place_first: bool,
    /// Abandon can run before the waiter's own attempt still in flight on another connection:
    /// that late attempt then queues, or is granted to, a waiter that is gone.
    pub abandon_overtakes_attempt: bool,
    /// A server restarted without its data grants at once (the empty-restart window before the
    /// boot marker's quiet period).
    pub no_quiet_period: bool,
}

/// One model: the clients, the bounds of the exploration and the bug switches.
#[derive(Clone, Debug)]
pub struct Handoff {
    /// Clients contending for the one lock name.
    pub clients: u8,
    /// The last tick explored.
    pub max_tick: u8,
    /// Forged messages an attacker may send in one run.
    pub forge: u8,
    /// Messages the network may duplicate in one run.
    pub dup: u8,
    /// Messages or replies the network may lose in one run.
    pub lose: u8,
    /// Fallback re-tries each waiter may make without a message.
    pub polls: u8,
    /// Acquisitions each client makes (one after another).
    pub rounds: u8,
    /// Processes that may die in one run.
    pub crash: u8,
    /// Waits that may end early (time-out, dropped future) in one run.
    pub leave: u8,
    /// Server restarts without data in one run.
    pub restart: u8,
    /// Which known errors to put back.
    pub bugs: Bugs,
}

impl Handoff {
    /// The network's faults, as the tests check them: two clients of two acquisitions each over
    /// four ticks, with one forged, one duplicated and one lost message or reply. No fallback
    /// re-tries: a message (forged ones too) already makes a waiter try again at any moment, and
    /// each re-try multiplies the states by four here.
    pub fn network(bugs: Bugs) -> Handoff {
        Handoff { max_tick: 4, forge: 1, dup: 1, lose: 1, ..Handoff::quiet(bugs) }
    }

    /// The processes' faults, as the tests check them: two clients of two acquisitions each over
    /// five ticks, with one crash and one early leave (time-out or dropped future).
    pub fn processes(bugs: Bugs) -> Handoff {
        Handoff { max_tick: 5, polls: 1, crash: 1, leave: 1, ..Handoff::quiet(bugs) }
    }

    /// A restart without data, as the tests check it: two clients of two acquisitions each over
    /// six ticks (the quiet period and a lease after it), one restart, no other fault.
    pub fn restarts(bugs: Bugs) -> Handoff {
        Handoff { max_tick: 6, polls: 1, restart: 1, ..Handoff::quiet(bugs) }
    }

    /// The longer exploration (`DLOCK_MODEL_DEEP=1`): the network's and the processes' faults
    /// each one tick longer, every fault together, and three clients so that a grant passes a
    /// dead or departed head on to a third.
    pub fn deep(bugs: Bugs) -> [Handoff; 4] {
        let all = Handoff {
            max_tick: 5,
            forge: 1,
            dup: 1,
            lose: 1,
            polls: 1,
            crash: 1,
            leave: 1,
            restart: 1,
            ..Handoff::quiet(bugs)
        };
        [
            Handoff { max_tick: 5, ..Handoff::network(bugs) },
            Handoff { max_tick: 6, ..Handoff::processes(bugs) },
            all.clone(),
            Handoff { clients: 3, rounds: 1, max_tick: 4, restart: 0, ..all },
        ]
    }

    /// Two clients of two acquisitions each, no fault, four ticks: the base of the others.
    fn quiet(bugs: Bugs) -> Handoff {
        Handoff {
            clients: 2,
            rounds: 2,
            max_tick: 4,
            forge: 0,
            dup: 0,
            lose: 0,
            polls: 0,
            crash: 0,
            leave: 0,
            restart: 0,
            bugs,
        }
    }
}
