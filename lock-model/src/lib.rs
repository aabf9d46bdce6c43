#![doc = include_str!("../README.md")]

//! Exhaustive checks of dlock's lock protocols, as designs.
//!
//! A test against a real server explores one interleaving per run; the holes the reviews found
//! (a grant trusted from a message, a waiter's place given up before its clean-up ran) each
//! needed one particular interleaving of a release, a late or forged message and a waiter that
//! left. The protocols are small enough to explore every interleaving up to a bound, so each is
//! written here as a state machine and checked breadth-first.
//!
//! ## Why Stateright
//! [Stateright](https://docs.rs/stateright) is a maintained Rust model checker: a model is a
//! plain Rust state machine (`Model`: initial states, actions, next state, `always` /
//! `sometimes` properties), checked breadth- or depth-first on all cores, and a violated
//! property comes back as a path of actions (the counterexample trace the tests print). It runs
//! under `cargo test` like any test, so CI checks the models with the code; a TLA+ spec would need
//! a JVM toolchain CI does not have and a second language for the same decisions. Its actor
//! layer (lossy, duplicating networks) is not used: the network here is a few fields of the
//! state, which keeps the fault budget (how many messages may be forged, duplicated, lost)
//! explicit and the state count small.
//!
//! ## What is modelled, and what is only tested
//! - [`handoff`]: the exclusive lock of a single Redis instance as its scripts run it: the
//!   waiter queue with the grant in the release (a release grants the queue's live head and
//!   sends it a message; the message is a hint; the head claims the grant by running its acquire
//!   again; a head that left or died never claims), a free lock's head reserved, and a restart
//!   without data with its quiet period. Forged, duplicated, lost and late messages, lost
//!   replies, waiters that leave (time-out, dropped future) and processes that die are all in the
//!   model; time is abstract ticks with the server's and the clients' clocks at the same rate
//!   (the code's `drift` margin covers a bounded rate difference, not modelled). Its server steps
//!   are compared with the real scripts on a real Redis by the differential test
//!   (`tests/redis_differential.rs`). A switch of the same model checks the design lock-redis runs by
//!   default since: the grant pushed to a head blocked in `BLPOP`, without the claim's round
//!   trip (`handoff::Delivery::Blocking`; lock-redis `blocking.rs`).
//! - [`zk`]: the ZooKeeper recipe (ephemeral sequential nodes, predecessor watches) with the
//!   session as the lease: expiry decided by the leader from its followers' ping answers, a
//!   follower cut off, a client's link that stalls, and the client's validity rule and the
//!   recipe's verdict, lock-zk's own (`lock_zk::decisions`: the session less half a tick and
//!   the client's longest silence; the lowest node holds, the others watch their predecessor).
//! - [`redlock`]: Redlock over three masters: the two rounds (grants with fence floors, then a
//!   majority storing the token), time-outs with requests still in flight, partial grants and
//!   their background undo (by attempt id), a master restarting without its data (quiet period).
//! - [`pg`]: the exclusive lock on PostgreSQL: the lease row by the database's clock, the
//!   waiter queue, the release's provisional grant claimed by the head's owner-checked `UPDATE`,
//!   `NOTIFY` as a hint (lost, duplicated, late, forged), the waiter's two-statement leave and a
//!   clean-up cut short, crashes, renewals, a drift margin; and [`pg::rounds`], renewal rounds
//!   (one statement for every lease due) beside a row another transaction locked.
//! - [`failover`]: Redis with `min_replicas_ack` under failover: one or two replicas with
//!   asynchronous replication, the most advanced replica promoted with what it had, each grant
//!   and renewal followed by `WAIT` on the same connection.
//! - [`mysql`]: the exclusive lock on MySQL / MariaDB, whose waiters poll: the lease row's
//!   `queued_until` summary of the waiter queue, read instead of the queue by a caller not
//!   queued (the light attempt, with its fallback to the queue's own check on a free row),
//!   raised by a refused attempt in the same statement and capping the entry written after it,
//!   and kept by the collector while it covers an entry; answers returned (MariaDB) or read back
//!   by a later `SELECT` (MySQL), lost enqueue answers, waiters that leave, crashes.
//! - Everything else (the Redlock ticket queue, the read-write lock and the semaphore) is tested
//!   against real servers by the conformance suite, not model-checked.
//!
//! Every model has bug switches that put back a design error found before; the tests assert that
//! the checker finds a counterexample with each switch on, so a model that stopped checking
//! anything would fail its own tests.
//!
//! ## Models and code
//! A model proves nothing about the code unless both take the same decisions. [`pg::rounds`]
//! calls lock-core's renewal schedule itself (`lock_core::decisions::renewal_due`) and takes it
//! as a parameter, so a test shows that a broken schedule breaks the model; the clients of
//! [`handoff`] and [`pg`] believe a lease by lock-core's own rule (`valid_until`, through
//! [`shared::belief_end`]); the [`handoff`] model's server steps are run beside lock-redis's
//! scripts on the same inputs by a differential test. What the two queue models share (queue
//! entries, hint messages and their faults, the belief, forgetting and renaming their clients)
//! and every model's record of the tokens taken is [`shared`]; the properties every model checks alike are
//! [`properties`]; the frame every client model explores in (time, each client's steps, the normalized
//! next state) is the crate's `explore`.

mod explore;
pub mod failover;
pub mod handoff;
pub mod mysql;
mod permutations;
pub mod pg;
pub mod properties;
pub mod redlock;
pub mod shared;
pub mod zk;
