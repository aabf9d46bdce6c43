//! Read-write locks and semaphores for backends with lease entries (Redis, SQL), written once
//! (docs/contract.md §5.2, §5.3).
//!
//! A backend implements [`KindStore`] — one attempt, renewal, release and wake-up subscription
//! of one grant of a given [`LockKind`] — and [`StoreRwLock`] / [`StoreSemaphore`] assemble the
//! traits from it: each side (read, write, permit) is a [`LeaseStore`](crate::backend::LeaseStore)
//! over that store (`side.rs`), so [`StoreLock`](crate::backend::StoreLock) gives waiting,
//! back-off, time-outs, cancel-safety and the lease watchdog. The rules every such backend shares
//! live in `rules.rs`, once: the writer's claim ([`writer_claim`]), the permits check
//! ([`check_permits`]) and the permits-mismatch error ([`permits_mismatch`]). This file only
//! names the parts.

mod rules;
mod rw;
mod semaphore;
mod side;
mod store;

pub use rules::{check_permits, permits_mismatch, writer_claim};
pub use rw::StoreRwLock;
pub use semaphore::StoreSemaphore;
pub use store::{KindAttempt, KindGrant, KindStore};
