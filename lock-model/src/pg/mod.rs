//! The exclusive lock on PostgreSQL, as lock-sql runs it: the lease row, the waiter queue, the
//! grant in the release claimed by the head, `NOTIFY` as a hint, the waiter's leave, renewals.
//!
//! ## The protocol (`lock-sql/src/dialect/postgres/`, `lock-sql/src/store/`)
//! - **The row**: owner, fence and `expires_at` by the database's clock. Each statement runs
//!   atomically under the row's lock (`server` mirrors the statements).
//! - **Acquire** (one statement with its queue CTE): an own row is re-granted, expired or not,
//!   with its fence and `expires_at = now + ttl`; a free or expired row goes to the caller when
//!   no live waiter is queued before it (new fence), else to that waiter (as a release would)
//!   and the caller queues; a live row of another queues the caller (or refreshes its entry).
//! - **Release** (owner-checked, live rows only) grants the row to the first live queue entry
//!   **provisionally** (new fence, the claim window [`CLAIM`]), deletes the entry and notifies
//!   the head's client.
//! - **The notification is a hint**: it wakes the head, which runs its **claim** (owner-checked
//!   `UPDATE` that extends its own row to `now + ttl` and returns the fence); a claim that finds
//!   the row not its own falls back to the acquire statement. The lease is the statement's
//!   answer, valid from its send instant.
//! - **Queue entries** live [`ENTRY_LIFE`] ticks after their waiter's latest attempt; a lapsed
//!   entry stays (skipped) until a grant's clean-up or a leave deletes it, and an attempt that
//!   finds its own lapsed entry refreshes it where it stands (`ON CONFLICT` keeps its `seq`).
//! - **Leaving** (a wait that timed out, a dropped future) runs after the waiter's own
//!   statement in flight, then two statements: delete the entry; release a grant it was given
//!   and hand on (that statement also hands a free or expired row to the live head). The waiter's record is forgotten only once both ran, so a clean-up cut short
//!   is finished by the background retry (the same statements later: in the model a cut changes
//!   nothing, since "later" is already every interleaving).
//! - **Renewal**: `UPDATE … SET expires_at = now + ttl WHERE owner = … AND expires_at > now`;
//!   a lease is lost when a renewal finds the row not its own or its validity passes unrenewed.
//!   The renewal rounds (one statement for several leases) are [`rounds`].
//!
//! - **Commits**: a refusal and every release (a grant to the head, or the row freed) commit
//!   without waiting for the WAL flush (`synchronous_commit = off` for that transaction:
//!   `REFUSAL_COMMITS_ASYNC`, `RELEASE_COMMITS_ASYNC` in `sql.rs`); every other write (a grant,
//!   a claim, a renewal, a leave's delete) waits, and its flush covers every commit before it
//!   (WAL is flushed in order), the claim's the grant it claims. The WAL writer flushes the rest
//!   within 0.6 s by default, under a tick.
//!
//! ## Faults in the model
//! Notifications are lost, duplicated, delivered late and in any order, and forged (anyone who
//! can read the queue can `NOTIFY` a waiter's channel, with any fence). A statement's answer is
//! lost after it ran (the client sends it again). Waiters leave with a statement in flight or
//! not; processes die at any point (a statement already sent still runs, a renewal too). The
//! database crashes and comes back with what was flushed: the grant no flush covered is gone
//! while its notification went out, and the row is back as before the release, nobody's
//! ([`GHOST`]) when its client no longer holds it (a new acquisition has a new owner id). The
//! head's claim, durable, is the grant's confirmation: `claim_not_durable` shows why. A lost
//! release that freed the row brings back a lease its holder let go: nobody's, it keeps the
//! others waiting until it ends (`grant_not_durable` shows why the grant, unlike the release,
//! must wait for the flush).
//!
//! ## Properties
//! - `no two believers`: never two clients that each believe they hold a valid lease.
//! - `tokens come from the server`, `tokens increase` (from taker to taker).
//! - `a lost lease is signalled before it is gone`: while a client believes its lease, the row
//!   is its own, with its token, and live.
//! - `an untaken grant lapses`: a provisional grant whose head died or is leaving is live at
//!   most [`CLAIM`] ticks more; a waiter that finished leaving owns no live row at all.
//!
//! ## Time
//! Ticks of the database's clock. A client counts `ttl − drift` on its own clock from the send
//! of the statement that answered (lock-core's own `valid_until`, called by the model); the
//! model takes the slowest clock the drift allowance permits, whose belief ends at `t0 + ttl` in
//! the database's ticks ([`Pg::valid_until`], [`crate::shared::belief_end`]).

mod model;
pub mod rounds;
mod server;
mod state;
mod symmetry;

pub use crate::shared::{NetAction, QueueAction, FORGED};
pub use model::{Action, Bugs, OwnAction, Pg, CLAIM, ENTRY_LIFE, TTL};
pub use state::{Client, Flushed, InFlight, Row, State, Stmt, GHOST};
