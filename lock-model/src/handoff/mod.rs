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
//!
//! ## Blocking delivery (built: lock-redis `blocking.rs`)
//! [`Delivery::Blocking`] switches the model to a design that takes the claim's round trip off
//! the hand-off's critical path (`BENCHMARKS.md`, the Redis hand-off against its baseline);
//! [`Delivery::Hint`], the default here, is the protocol above, which lock-redis runs where
//! blocking delivery is off (a Cluster, `min_replicas_ack`, `blocking_handoff = false`).
//! Like lock-redis, a release that pushes sends no message, and the claim is the renew script
//! checked against owner and token (`claim_pushed`), which never grants. lock-redis differs
//! from this switch in one way, which only removes behaviours: the arm marks only a queued
//! owner whose entry takes grants (else it answers at once).
//! - A waiter keeps a dedicated connection and sends on it, at its instant `t_s`, an **arm**
//!   script and `BLPOP <its grant list> <timeout>`, back to back. The server runs the arm, then
//!   the `BLPOP`: the arm marks the waiter armed for [`BLOCK`] ticks and **drains** its list (a
//!   grant found there comes back in the arm's reply as a hint: the waiter's acquire claims it,
//!   as above); the `BLPOP` blocks until a push, or ends without one (its timeout, a closed
//!   connection) and the waiter arms again.
//! - The release, when it grants the head provisionally (as above), pushes the grant's token
//!   onto the head's list instead of sending the message if the head is armed, and clears the
//!   mark.
//! - A `BLPOP` that pops a token: the head holds at once with that token, believing it until
//!   `t_s` plus the claim window (lock-core's rule, [`crate::shared::belief_end`]). The push ran
//!   after the arm (whose drain removed anything older), the arm after `t_s`, so the server's
//!   provisional grant ends no sooner; the lease is the head's, and only its own scripts or the
//!   window's end take it away. A pop that arrives once that belief has ended is a hint (the
//!   head runs its acquire): taken, it would be a lease already gone, whose token may be below
//!   a later taker's (`take_lapsed_pop`).
//! - A `BLPOP`'s reply belongs to the wait that sent it: a wait that ends by its own acquire
//!   (the hint came first) or by leaving closes the connection. Kept open, a later wait of the
//!   same client takes the earlier wait's grant, which it may have held and released since
//!   (`pop_after_wait_ends`).
//! - The head then claims in the background (the renew script checked against owner and
//!   token), sent at any moment: lock-core defers it a third into the window, so that a hold
//!   shorter than that never claims. A claim that extended the grant extends its belief to the
//!   claim's send instant plus the ttl; otherwise (the window ended first) the belief stays at
//!   the window's end. An acquire already in flight when the grant pops stands for that claim,
//!   already sent. The claim never grants: with the acquire script as the claim, a claim that
//!   ran after the window granted the head a new lease on a free lock, which the head did not
//!   take and which kept the lock until its release (or its ttl, had it died).
//! - The head may release before its claim (in lock-redis the claim is sent by a background
//!   driver, so this was already so before the deferral). A claim not sent yet then never is
//!   (lock-core's `end_claim`). A claim already sent may run at the server after the release,
//!   after the next holder's grant too: the model lets it run at any later moment, more than
//!   the connection allows (there the claim runs before the release sent after it). Checked
//!   against owner and token, it finds the grant released or lapsed and changes nothing; its
//!   answer goes to a lease that is over. A naive claim that re-created the pushed lease on a
//!   free key would give the client its old token again (`claim_after_release`).
//! - A head that died leaves its grant to lapse after the window, as above. A waiter that
//!   leaves ignores a popped grant: its abandon, which also deletes its mark and list,
//!   releases and hands on the grant, as above.
//!
//! It rests on these assumptions: each waiting head has one dedicated connection whose replies
//! arrive in order, so a `BLPOP`'s reply is the server's answer to that head's own arm (and
//! `t_s`), which no publisher can forge; a forged push needs write rights on the lock's keys,
//! which can break any lock anyway (not modelled); the server runs the arm and then its `BLPOP`
//! with nothing between them that matters (one server step, at any instant after `t_s`; a push
//! between them would be popped at once, and it too came after the arm).
//!
//! The model checks, besides the properties above, `a believed lease is the server's until a
//! restart` (no belief, of a popped grant or of its claim, outlasts the server's lease), `a
//! claim after its release changes nothing`, and that a blocked head is handed the lock and
//! that a claim is still out after its release, at all, under the faults that reach the design:
//! [`Handoff::blocking_network`] (a lost reply: the head's connection dropping with its popped
//! grant, or a claim's reply), [`Handoff::blocking_processes`] (a crash, a leave) and
//! [`Handoff::blocking_restarts`], each explored to its end in 3 to 5 s on two cores (0.81 M,
//! 0.75 M and 1.45 M unique states, 2.8 M, 3.9 M and 5.0 M visited), where a fault more (a
//! forged hint, a fallback re-try) gives more than thirty million. It lets any waiter arm, head
//! or not, twice in a run; lets a `BLPOP` end at any moment while its mark lives on (the two
//! timers, a closed connection: the case the drain is for); keeps a `BLPOP` blocked across a restart, as after `FLUSHALL` (a
//! real restart drops the connection: a `BLPOP` that ends at once). The arm's reply wakes the
//! waiter as the arm runs: the grant it drained had the release's message, with every fault of
//! the hints. The mark the release checks is not what makes the design safe (without it, every
//! property still holds: the drain is); it keeps grants out of the lists of heads that are not
//! listening. The model does not check a script: there is none yet, so the differential test
//! (`tests/redis_differential.rs`) covers the hint delivery only. Nor three clients
//! ([`Handoff::deep`] is the hint delivery's), nor the cost: a connection per waiting head.

mod blocking;
mod model;
mod server;
mod state;
mod symmetry;

pub use crate::shared::{NetAction, QueueAction, FORGED};
pub use blocking::BlockAction;
pub use model::{Action, OwnAction};
pub use server::WAKE;
pub use state::{Block, Claim, Client, Grant, State};

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
/// Blocking delivery: ticks a head's arm marker lives after its arm ran, the `BLPOP`'s timeout.
/// The `BLPOP` itself may end sooner (its own timer, a connection closed): a marker that outlives
/// its `BLPOP` is the case the arm's drain is for.
pub const BLOCK: u8 = 2;

/// How a release's grant reaches the queue's head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Today's: a hint message; the head's acquire claims the grant (the module docs).
    #[default]
    Hint,
    /// lock-redis's default (`blocking.rs`): the head blocks in `BLPOP` on a list of its own and the release
    /// pushes the grant there ("Blocking delivery" in the module docs).
    Blocking {
        /// Arm-and-`BLPOP` requests each client may send in one run (a `BLPOP` that ended
        /// without a grant is re-armed).
        arms: u8,
    },
}

/// Design errors found before, the blocking delivery's unsound shortcuts (the four after
/// `no_quiet_period`, found with this model) and a naive claim after the release (the last), each
/// put back by its switch; every one must give a counterexample.
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
    /// Blocking delivery: the arm does not drain the head's list, so its `BLPOP` pops at once a
    /// grant pushed before the arm, and the head counts it from the arm's send instant.
    pub pop_without_drain: bool,
    /// Blocking delivery: the head counts a popped grant from the instant the `BLPOP`'s reply
    /// arrives instead of the arm's send instant.
    pub pop_counts_from_reply: bool,
    /// Blocking delivery: a wait that ended by its own acquire keeps its connection, and a later
    /// wait of the same client takes that `BLPOP`'s reply: a grant of the earlier wait.
    pub pop_after_wait_ends: bool,
    /// Blocking delivery: a popped grant whose window, counted from the arm's send instant, has
    /// passed when the reply arrives is taken anyway, instead of being a hint.
    pub take_lapsed_pop: bool,
    /// Blocking delivery: the release does not end the claim of a popped grant (lock-core
    /// without `end_claim`: one not sent yet still goes out), and a claim that runs after the
    /// release is a naive "take it again" that re-creates the pushed lease on a free key (a
    /// `SET NX` of owner and token, where the claim script changes nothing): the client's next
    /// acquire is then answered the old token again.
    pub claim_after_release: bool,
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
    /// How the release's grant reaches the head.
    pub delivery: Delivery,
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
            delivery: Delivery::Hint,
        }
    }

    /// The blocking delivery under the network's faults that reach its connection: a lost reply
    /// (a popped grant's, the connection dropping; a claim's) over four ticks, two arms per
    /// client. Forged and duplicated hints only make a waiter run its acquire, as under
    /// [`Handoff::network`]; with them the states pass thirty million (8 s per million
    /// unique on two cores): left out.
    pub fn blocking_network(bugs: Bugs) -> Handoff {
        Handoff { forge: 0, dup: 0, ..Self::blocking(Handoff::network(bugs), 2) }
    }

    /// The blocking delivery under the processes' faults: [`Handoff::processes`] with two arms
    /// per client and no fallback re-try (with one, more than thirty million states).
    pub fn blocking_processes(bugs: Bugs) -> Handoff {
        Handoff { polls: 0, ..Self::blocking(Handoff::processes(bugs), 2) }
    }

    /// The blocking delivery with a restart without data: [`Handoff::restarts`] with two arms
    /// per client and no fallback re-try (with one, more than thirty million states).
    pub fn blocking_restarts(bugs: Bugs) -> Handoff {
        Handoff { polls: 0, ..Self::blocking(Handoff::restarts(bugs), 2) }
    }

    fn blocking(bounds: Handoff, arms: u8) -> Handoff {
        Handoff { delivery: Delivery::Blocking { arms }, ..bounds }
    }

    /// Grants can be pushed to a blocked head.
    pub(crate) fn blocks(&self) -> bool {
        matches!(self.delivery, Delivery::Blocking { .. })
    }
}
