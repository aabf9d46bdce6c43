//! # lock-core
//!
//! The contract of dlock (see docs/contract.md §2–§5) as types:
//!
//! - [`DistributedLock`]: the object-safe trait every backend implements (`Arc<dyn DistributedLock>`).
//! - [`Lease`]: a held lock — [`FencingToken`], `valid_until`, renewal watchdog, [`LostSignal`],
//!   release on drop. Backends supply only a [`LeaseHandle`] (owner-checked renew and release).
//! - [`LeaseStore`] + [`StoreLock`]: the waiting machinery (notification or jittered back-off,
//!   timeouts, cancel-safety) for backends with one lease entry per name (Redis, SQL).
//! - [`KindStore`] + [`StoreRwLock`] / [`StoreSemaphore`]: read-write locks and semaphores on
//!   the same machinery; a backend supplies only one attempt, renewal and release per kind.
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

mod backoff;
mod batch;
mod capabilities;
mod changes;
mod driver;
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
pub mod redact;
mod release;
mod renewals;
#[cfg(feature = "sqlx")]
mod sqlx_token;
mod store;
mod wake;
mod watchdog;

pub use backoff::Backoff;
pub use batch::{Batcher, RoundFn};
pub use capabilities::{Capabilities, LeaseModel, WakeMethod};
pub use changes::{ChangeFeed, ChangeSignal};
pub use election::{Election, Leadership};
pub use error::{BoxError, LockError};
pub use events::{EventsRef, LeaseEvents};
pub use fenced::{FencedRegister, StaleToken};
pub use handle::{Handles, LockHandle, RwLockHandle, SemaphoreHandle, SemaphoreHandles};
pub use holder::{Holder, HolderInfo, MAX_HOLDER_LEN, MAX_METADATA_LEN};
pub use kind::LockKind;
pub use kinds::{
    check_permits, permits_mismatch, writer_claim, KindAttempt, KindGrant, KindStore, StoreRwLock, StoreSemaphore,
};
pub use lease::{Lease, LeaseGrant, LeaseHandle, LeaseObserver, LossTrigger, LostSignal, ReleaseOutcome, RenewOutcome};
pub use lock::{DistributedLock, DistributedLockExt, DistributedRwLock, DistributedSemaphore};
pub use memory::MemoryLock;
pub use multi::acquire_all;
pub use name::{escape_prefix, FencingToken, LockName, OwnerId, MAX_NAME_LEN};
pub use options::{clock_drift, AcquireOptions, WaitPolicy, DEFAULT_TTL};
pub use provider::LockProvider;
pub use store::{Claim, LeaseStore, StoreLock, TryLock};
pub use wake::{WakeHub, WakeSubscription};

pub use async_trait::async_trait;
