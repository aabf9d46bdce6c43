//! Redlock over three independent masters, as lock-redis's `RedlockStore` runs it.
//!
//! ## The protocol
//! - **Round 1**: an attempt (with a fresh attempt id) asks every master to take the key for
//!   its owner (a free key, or one the owner already has, which is re-granted with the new
//!   attempt id) and to read the fence floor: the master's counter, at least its clock. The
//!   attempt stops waiting once a majority granted, or once a majority refused or timed out.
//! - **Round 2**: the token is the highest floor read + 1; a majority must store it
//!   (set-if-greater, only a store by this attempt counts) before the lease is taken, valid for
//!   the ttl from the attempt's start, provided that time has not passed.
//! - **Undo**: an attempt without a lease frees, in the background, what it may have taken on
//!   every master that did not answer "held", and only that attempt (the key's attempt id).
//! - **Restart**: a master that lost its data grants nothing for a ttl (the quiet period).
//!
//! ## Faults in the model
//! A client may stop waiting for any master (a time-out) while its request stays in flight and
//! runs later or never; the answers of a finished round are ignored. Requests on one connection
//! run in the order they were sent; a background undo is sent whenever its task gets to run,
//! possibly after the same client's next attempt. A master may restart with its data lost.
//! The waiter queue ordered by tickets decides only *who* is granted next (it refuses, never
//! grants more), so it is left out: exclusion rests on the majority alone.
//!
//! ## Properties
//! - `no two believers`: never two clients that each hold a lease they believe valid by their
//!   own clock.
//! - `tokens increase`: each client that takes the lock has a token above every earlier taker's.
//!
//! Clocks run at the same rate (the code's `drift` margin covers a bounded difference), and the
//! masters' clocks, which floor the tokens, agree and advance between any two requests: with
//! a coarser clock (every request of a tick at the same instant, as masters whose clocks
//! disagree by that much) the checker finds tokens that do not increase: a grant's floor read
//! on a master before an earlier holder's token was stored there, and that master restarted
//! (its counter lost) before the later grant's store reached it. Renewals are not modelled.

mod model;
mod state;
mod symmetry;

pub use model::{Action, Bugs, Redlock, MASTERS, QUORUM};
pub use state::{Client, Key, Master, Op, State};
