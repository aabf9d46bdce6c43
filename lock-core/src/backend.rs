//! The backend author's kit: what a crate that implements a lock backend uses, and an
//! application does not. Applications use the crate root (the lock traits, [`Lease`](crate::Lease),
//! [`AcquireOptions`](crate::AcquireOptions), [`LockError`](crate::LockError), names, election…).
//!
//! Two ways to write a backend (docs/contract.md §9):
//!
//! - **A lease entry per name** (Redis, SQL): implement [`LeaseStore`] — one owner-checked try,
//!   renew and release, optionally release hints ([`WakeHub`], [`WakeSubscription`]) — and wrap
//!   it in [`StoreLock`], which adds waiting, back-off, time-outs, cancel-safety and the lease
//!   watchdog. Read-write locks and semaphores: implement [`KindStore`] and use
//!   [`StoreRwLock`] / [`StoreSemaphore`], with the shared rules [`writer_claim`],
//!   [`check_permits`] and [`permits_mismatch`].
//! - **`DistributedLock` directly** (memory, ZooKeeper): build each grant's lease from a
//!   [`LeaseGrant`] and your [`LeaseHandle`] with [`Lease::new`](crate::Lease::new), declare
//!   losses the watchdog cannot see through a [`LossTrigger`], and answer a wait's end with a
//!   [`Deadline`]. A backend whose kinds are recipes over one queue (ZooKeeper, etcd) keeps
//!   each call's deadline, back-off and outage in an [`AcquireClock`], ends a pass with a
//!   [`Stop`], and implements [`QueueLock`] to get its read-write lock and semaphore.
//!
//! Either way: hide secrets of URLs in every message with [`redact`], gather many leases'
//! requests into one round trip with a [`Batcher`], space retries with a [`Backoff`], and tell
//! observers of holder changes through a [`ChangeSignal`]. An operator's `force_release` leaves its
//! audit line through [`audited_force_release`].

pub mod redact;

/// The audit line of an operator's `force_release` (who was evicted), written once.
pub use crate::audit::{audited_force_release, AUDIT_TARGET};

/// Jittered exponential back-off between retries.
pub use crate::backoff::Backoff;
/// Gathering many leases' requests into rounds (one statement, pipeline or `sync` each).
pub use crate::batch::Batcher;
/// The producer side of a [`ChangeFeed`](crate::ChangeFeed).
pub use crate::changes::ChangeSignal;
/// The end of one acquire wait and the answer owed when it comes.
pub use crate::deadline::Deadline;
/// Read-write locks and semaphores over a [`KindStore`], with the rules every such backend shares.
pub use crate::kinds::{
    check_permits, permits_mismatch, writer_claim, KindAttempt, KindGrant, KindStore, StoreRwLock, StoreSemaphore,
};
/// What a backend hands to [`Lease::new`](crate::Lease::new), and the answers of its handle.
pub use crate::lease::{LeaseGrant, LeaseHandle, LossTrigger, ReleaseOutcome, RenewOutcome};
/// Escaping a name prefix for a store's pattern or `LIKE` search (`list`).
pub use crate::name::escape_prefix;
/// A handle that is every lock kind at once, as a [`LockProvider`](crate::LockProvider).
pub use crate::provider::EveryKind;
/// The shared parts of a queue-recipe backend: the per-call clock, a pass's end, and the
/// read-write lock and semaphore over "acquire this kind".
pub use crate::queue::{AcquireClock, QueueKind, QueueLock, Stop};
/// The one-entry-per-name machinery: the store trait, its attempt, and the lock it becomes.
pub use crate::store::{Claim, LeaseStore, StoreLock, TryLock};
/// Release hints for waiters: one hub per connection, one subscription per waiting name, and a
/// wait's own channel for grants the server pushes to it alone.
pub use crate::wake::{PushSender, PushedGrant, WakeHub, WakeSubscription};
/// The attribute the store and lock traits are written with, so a backend needs no own
/// `async-trait` dependency to implement them.
pub use async_trait::async_trait;
