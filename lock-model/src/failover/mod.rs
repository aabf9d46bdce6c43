//! Redis with `min_replicas_ack` under failover: a primary and its replicas with asynchronous
//! replication, a replica promoted (losing what it had not received), and lock-redis's
//! acknowledged grant and renewal (`RedisStore::acquire_acked` / `renew_acked` in
//! `lock-redis/src/single/store.rs`).
//!
//! ## The protocol
//! - **Acquire**: the acquire script on the primary (a live lease of another refuses; a free
//!   key, or the caller's own, is granted: the next token, or the same one, with `PX ttl`), then
//!   `WAIT 1` **on the same connection, in the same attempt**: it counts the replicas that have
//!   that connection's writes. Acknowledged: the lease, valid from the script's send. Not
//!   acknowledged (the wait timed out): the grant is released and the attempt answers
//!   `Unavailable`. A connection that broke between the two (a failover) makes the attempt send
//!   both again on a fresh connection, as the same owner (`run_idempotent`).
//! - **Renew**: the renew script (owner-checked, extends to `now + ttl`), then `WAIT` alike;
//!   not acknowledged, the lease keeps its previous validity and the watchdog tries again.
//! - **Release**: the owner-checked release script.
//!
//! ## Faults
//! Replication is asynchronous: each replica applies the primary's writes in order, whenever it
//! gets to them. A failover promotes the replica with the largest replication offset (Sentinel's
//! choice with equal `replica-priority`), with whatever it had applied; the old primary and the
//! other replicas come back as the new primary's replicas, resynchronised (writes the new
//! primary lacks are gone), and every client connection to the old primary breaks. A `WAIT` times
//! out at any moment the adversary likes, with the count it has then.
//!
//! ## Properties
//! - `no two believers`, `tokens increase` (from taker to taker).
//! - `a lost lease is signalled before it is gone`: while a client believes its lease, the
//!   current primary has it (its owner, its token, live).
//!
//! Assumptions: one replica ([`Failover::small`]) or two ([`Failover::two_replicas`]); with two,
//! `min_replicas_ack = 1` is safe only because the promoted replica is the most advanced one
//! (lock-redis's docs ask this of Sentinel): the `promote_any_replica` switch shows the lease
//! lost otherwise. The nodes' clocks agree (lock-redis subtracts `max_clock_offset` for what
//! they do not); the old primary stops serving as it is replaced (a partitioned old primary
//! that keeps answering counts no replica in its `WAIT`, so it could only refuse).

mod model;
mod state;
mod symmetry;

pub use model::{Action, Bugs, Failover, TTL};
pub use state::{Client, Data, Node, State};
