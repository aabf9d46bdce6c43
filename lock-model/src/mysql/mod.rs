//! The exclusive lock on MySQL / MariaDB with the lease row's `queued_until` summary of the
//! waiter queue: an attempt by a caller that is not queued reads the summary, not the queue.
//!
//! ## The protocol (`lock-sql/src/queue.rs`, `lock-sql/src/dialect/mysql/`)
//! MySQL has no `NOTIFY`: waiters poll, and the queue makes the polls fair. Every acquire
//! attempt is one atomic upsert on the lease row (`INSERT … ON DUPLICATE KEY UPDATE`: a missing
//! row is inserted as the caller's, with no condition). The queue subquery of its grant
//! condition costs MariaDB 60-100 µs of planning per attempt, so the row keeps `queued_until`
//! (0 when inserted, it only grows; the collector's delete of the row resets it) and:
//! - **Light attempt** (a caller that is not queued: place last): granted when
//!   `owner = me OR ((owner IS NULL OR expires_at <= now) AND queued_until <= now)`.
//! - **Full attempt** (a queued waiter's polls, and the fallback): granted when
//!   `owner = me OR ((owner IS NULL OR expires_at <= now) AND NOT EXISTS (live entry of another
//!   with (seq, owner) < (place, me)))`, the condition before `queued_until`.
//! - **Bump**: a refused attempt that its caller may follow with its enqueue (a waiting
//!   acquire's attempt while not queued, its fallback, a poll whose entry is due for a rewrite)
//!   sets, in the same statement, `queued_until = GREATEST(queued_until, now + lifetime)`, and
//!   the client learns the result `V`.
//! - **Enqueue** (a statement of its own, later): the caller's entry gets
//!   `expires_at = LEAST(now + lifetime, V)`, its `seq` kept if the entry exists (lapsed or
//!   not), else `now` (later than every place before it).
//! - **Fallback**: a light attempt refused while the row was free (by `queued_until` alone) is
//!   run again at once as a full attempt with the place last: the waiters may all have left
//!   while `queued_until` still lies ahead.
//! - **Polls**: a queued waiter's full attempt with its place; a refusal rewrites the entry
//!   (bump, then enqueue) once it was written in an earlier tick (the store: a quarter of its
//!   lifetime ago), else it waits. Granted, the waiter deletes its entry (a statement of its
//!   own, with the lapsed entries); a waiter that gives up deletes it too; a dead waiter's lapses.
//! - **Release**: `owner = NULL, expires_at = now` (owner-checked, live rows only).
//! - **Collector** (`collect_idle(idle)`, two statements): deletes the entries with
//!   `expires_at <= now - idle`; deletes the lease row if `expires_at <= now - idle AND
//!   queued_until <= now - idle`.
//!
//! The claim: every live entry expires by its row's `queued_until`, and the row exists while it
//! has a live entry; so the light condition grants only where the full one with the place last
//! would, and no insert grants past a live waiter.
//!
//! ## The answers: returned or read back
//! MariaDB 10.5+ returns the row (owner, fence, `V`) from the upsert itself (`RETURNING`).
//! MySQL reads it back with a `SELECT` of its own after the upsert ([`Mysql::read_back`]):
//! time and other clients' statements, the collector's included, pass between the two. The
//! client takes the attempt as granted when the row read is its own (lock-sql checks the owner
//! only), as refused by the summary alone when it has no live lease, and `V` as the row's
//! `queued_until`, 0 when the row is gone (an entry capped by it is written lapsed:
//! `missing_row_uncapped` shows why it must not be "no cap"). A grant whose read-back comes
//! after its lease ended and the row was collected is one way to that missing row.
//!
//! ## The model
//! Each statement is one atomic step, each client's in order; time passes (a tick) between any
//! two. The clients' clocks are the database's (a lease is believed until the `expires_at` it
//! was granted with: lock-core's rule, [`crate::shared::belief_end`], with no drift between
//! the clocks). Each acquisition is a `try_acquire` (light, then the fallback) or a waiting
//! `acquire` (light, the fallback, enqueue, polls); a queued waiter may give up, any client may
//! die (its entry lapses, its lease expires), an enqueue's answer may be lost after it ran (the
//! waiter, its place unknown, attempts as a caller not queued and meets its own entry's
//! summary: the store's `Wait::may_be_queued`), the collector's statements run at any time.
//! Places are kept in order only: the store's `seq` is the clock in µs, distinct in practice,
//! so the order of two places is that of their inserts. Renewals are not modelled (a lease only
//! ends).
//!
//! The model's lifetime ([`LIFE`]) and ttl ([`TTL`]) are both two ticks; the store's lifetime
//! is longer than its ttl (`8 × max_poll + 250 ms`). The design's claim does not depend on
//! either: it compares stored values, never the clock's rate.
//!
//! ## Properties
//! - `no two believers`, `tokens increase`, `a lost lease is signalled before it is gone`.
//! - `no overtaking`: an attempt that grants a free, expired or missing row to caller `c` at
//!   place `p` finds no live entry of another waiter with a place before `p` (the light attempt's
//!   and the insert's place is last: no live entry of another at all).
//! - `queued_until covers the live queue`: every live entry expires by the row's
//!   `queued_until`, and the row exists while it has one (the design's claim).
//! - `a try is refused only for a holder or a live waiter`: a `try_acquire`'s final refusal was
//!   given with a live lease of another on the row or a live entry of another waiter (and, read
//!   back, the client still finds one): a free row and no live waiter are granted, however far
//!   `queued_until` lies ahead (the fallback's task).
//! - `sometimes`: the fallback grants a free row the summary refused; the collector deletes the
//!   lease row; a queued waiter is served.

mod model;
mod server;
mod state;
mod symmetry;

pub use model::{Action, Bugs, Mysql, LIFE, TTL};
pub use state::{Answer, Attempt, Bump, Client, Entry, Row, State, Then, LAST};
