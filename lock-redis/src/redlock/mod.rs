//! Redlock over N independent masters, with fencing tokens kept monotonic across quorums, and
//! a waiter queue on each master ordered by one ticket per wait, so that every master agrees on
//! the next holder (`crate::scripts::redlock` has the rules and why they cannot livelock).
//!
//! One file per phase, as [`RedlockStore`]'s methods: `acquire` (the lease step on every
//! master, the fence store that makes the token durable, the undo of a failed attempt),
//! `extend` (the renewal round) and `release` (the release round, also a wait's withdrawal);
//! `store` holds the masters and the [`lock_core::backend::LeaseStore`] that calls the phases.

mod acquire;
mod extend;
mod release;
mod store;

pub use store::RedlockStore;
