//! Redlock over N independent masters, with fencing tokens kept monotonic across quorums, and
//! a waiter queue on each master ordered by one ticket per wait, so that every master agrees on
//! the next holder (`crate::scripts::redlock` has the rules and why they cannot livelock).
//!
//! A release leaves the next token on each master, for the queue's head it grants the key to,
//! or for whoever takes a free key next; the taker's lease step confirms it, and with a majority
//! naming one token neither a hand-off nor a free lock's acquire needs a fence store ("Tokens
//! left by the release" in `crate::scripts::redlock`).
//!
//! One file per phase, as [`RedlockStore`]'s methods: `acquire` (the lease step on every
//! master, the fence store that makes the token durable, the undo of a failed attempt),
//! `extend` (the renewal round, and the claim of a pushed grant), `release` (the release round,
//! also a wait's withdrawal) and `blocking` (a waiting head's blocking delivery, which holds on a
//! majority of pushed grants);
//! `store` holds the masters and the [`lock_core::backend::LeaseStore`] that calls the phases.

mod acquire;
mod blocking;
mod extend;
mod release;
mod store;

pub use store::RedlockStore;
