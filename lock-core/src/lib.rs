//! # lock-core
//!
//! The contract of dlock (see docs/contract.md §2–§5) as types:
//!
//! - [`DistributedLock`]: the object-safe trait every backend implements (`Arc<dyn DistributedLock>`).
//! - [`Lease`]: a held lock — [`FencingToken`], `valid_until`, renewal watchdog, [`LostSignal`],
//!   release on drop. Backends supply only a [`backend::LeaseHandle`] (owner-checked
//!   renew and release).
//! - [`backend`]: the backend author's kit — [`backend::LeaseStore`] +
//!   [`backend::StoreLock`] (the waiting machinery for backends with one lease entry
//!   per name), [`backend::KindStore`] for read-write locks and semaphores, the
//!   [`backend::Deadline`] rule, redaction, batching and wake-up helpers. Applications
//!   need only the root.
//! - [`LockName`], [`OwnerId`], [`AcquireOptions`], [`Capabilities`], [`LockError`].
//! - [`MemoryLock`]: the in-memory reference backend, for tests of applications.
//! - [`FencedRegister`]: the protected-resource side of fencing.
//! - With feature `sqlx`: [`FencingToken`] binds as an sqlx parameter (`BIGINT`).
//! - [`Election`]: leader election over any lock ([`Leadership`]: lease, epoch, lost signal);
//!   its observers hear other processes' changes through a backend's [`ChangeFeed`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, DistributedLock, FencedRegister, LockName, MemoryLock};
//!
//! let lock = MemoryLock::new();
//! let budget = FencedRegister::new(100u64);
//! let lease = lock.acquire(&LockName::new("budget")?, &AcquireOptions::new(Duration::from_secs(10))).await?;
//! budget.write(lease.token(), |left| *left -= 7).expect("fresh token");
//! lease.release().await?;
//! assert_eq!(budget.read(), 93);
//! # Ok(()) }
//! ```

mod audit;
pub mod backend;
mod backoff;
mod batch;
mod capabilities;
mod changes;
mod deadline;
mod election;
mod error;
mod events;
mod fenced;
mod handle;
mod holder;
mod kind;
mod kinds;
mod lease;
mod lock;
mod memory;
mod multi;
mod name;
mod options;
mod provider;
mod queue;
#[cfg(feature = "sqlx")]
mod sqlx_token;
mod store;
mod wake;

pub use capabilities::{Capabilities, LeaseModel, WakeMethod};
pub use changes::ChangeFeed;
pub use election::{Election, Leadership};
pub use error::LockError;
pub use events::{EventsRef, LeaseEvents};
pub use fenced::{FencedRegister, StaleToken};
pub use handle::{Handle, Handles, LockHandle, RwLockHandle, SemaphoreHandle, SemaphoreHandles};
pub use holder::{Holder, HolderInfo, MAX_HOLDER_LEN, MAX_METADATA_LEN};
pub use kind::LockKind;
pub use lease::{Lease, LeaseObserver, LostSignal};
pub use lock::{DistributedLock, DistributedLockExt, DistributedRwLock, DistributedSemaphore, LockService};
pub use memory::MemoryLock;
pub use multi::acquire_all;
pub use name::{FencingToken, LockName, OwnerId, MAX_NAME_LEN};
pub use options::{clock_drift, AcquireOptions, WaitPolicy, DEFAULT_TTL};
pub use provider::LockProvider;

/// The lease's pure timing decisions, public so that lock-model's models call the code's own
/// rules instead of copies of them. Not part of the API: no stability promise.
#[doc(hidden)]
pub mod decisions {
    pub use crate::lease::{renewal_due, valid_until};
}
