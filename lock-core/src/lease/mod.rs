//! A held lock and everything that keeps it: the [`Lease`] guard, its renewal watchdog, its
//! lost signal and its release (docs/contract.md §3). Backends supply a [`LeaseHandle`] and a
//! [`LeaseGrant`]; the rest is written once, here.
//!
//! The state a lease shares lives in one leaf (`shared.rs`, with the backend's part in
//! `handle.rs` and the signal in `signal.rs`); the files that act on it import it and never
//! each other in a circle: `release` ← `loss` ← `renew` ← `watchdog` ← `driver` ← `guard`.
//! This file only names the parts.

mod driver;
mod guard;
mod handle;
mod loss;
mod observer;
mod release;
mod renew;
mod shared;
mod signal;
mod watchdog;

pub use guard::Lease;
pub use handle::{LeaseGrant, LeaseHandle, ReleaseOutcome, RenewOutcome};
pub use observer::{LeaseObserver, LossTrigger};
pub use shared::valid_until;
pub use signal::LostSignal;
pub use watchdog::renewal_due;
