//! The shared acquire machinery for backends that keep one lease entry per lock name (Redis,
//! SQL): a backend implements [`LeaseStore`] — one-shot try, renew, release, and optionally
//! wake-up subscriptions — and [`StoreLock`] turns it into a [`DistributedLock`](crate::DistributedLock)
//! with waiting, back-off, timeouts, cancel-safety and the [`Lease`](crate::Lease) watchdog.
//!
//! The parts import one way: `claim` and `lease_store` are the leaves; `attempt`, `pending`,
//! `renewals` and `handle` build on them; `wait` on those; `lock` (the `StoreLock` itself) on
//! all. This file only names them.

mod attempt;
mod claim;
mod handle;
mod lease_store;
mod lock;
mod pending;
mod renewals;
mod wait;

pub use claim::{Claim, TryLock};
pub use lease_store::LeaseStore;
pub use lock::StoreLock;
