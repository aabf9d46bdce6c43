//! Views of a lease handed out beside the guard: a read-only observer for tasks, and the
//! trigger a backend keeps to declare the lease lost from outside the watchdog.

use std::sync::Arc;

use tokio::time::Instant;

use super::shared::Shared;
use super::signal::LostSignal;
use crate::{FencingToken, LockName};

/// Lets a backend declare a lease lost from outside the watchdog (e.g. a ZooKeeper session
/// expired or a lock node was deleted).
#[derive(Clone)]
pub struct LossTrigger {
    shared: Arc<Shared>,
}

impl LossTrigger {
    pub(super) fn new(shared: &Arc<Shared>) -> Self {
        LossTrigger { shared: Arc::clone(shared) }
    }

    /// Fires the lease's lost signal with this reason (once; later calls do nothing).
    pub fn fire(&self, reason: &str) {
        self.shared.declare_lost(reason);
    }
}

/// A read-only view of a [`Lease`](crate::Lease): token, validity and lost signal.
#[derive(Clone)]
pub struct LeaseObserver {
    shared: Arc<Shared>,
}

impl LeaseObserver {
    pub(super) fn new(shared: &Arc<Shared>) -> Self {
        LeaseObserver { shared: Arc::clone(shared) }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.shared.name
    }
    /// The fencing token.
    pub fn token(&self) -> FencingToken {
        self.shared.token
    }
    /// See [`Lease::is_valid`](crate::Lease::is_valid).
    pub fn is_valid(&self) -> bool {
        self.shared.is_valid()
    }
    /// See [`Lease::valid_until`](crate::Lease::valid_until).
    pub fn valid_until(&self) -> Instant {
        self.shared.valid_until()
    }
    /// See [`Lease::lost`](crate::Lease::lost).
    pub fn lost(&self) -> LostSignal {
        self.shared.lost.clone()
    }
}
