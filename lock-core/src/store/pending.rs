//! The clean-up a wait or a try owes when it ends without a lease (docs/contract.md §4,
//! cancel-safety): armed while an attempt's outcome is unknown, run in the background on drop.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::timeout;

use super::lease_store::LeaseStore;
use crate::{LockName, OwnerId};

/// Cleans up in the background after an attempt or a wait that did not end in a lease: an
/// attempt whose outcome is unknown (lost reply, cancelled future) is released, so a grant
/// nobody knows about never outlives its ttl; a wait that ended without a grant is abandoned
/// ([`LeaseStore::abandon`]).
pub(super) struct PendingRelease<S: LeaseStore> {
    store: Arc<S>,
    name: LockName,
    owner: OwnerId,
    /// An attempt is in flight, or its outcome is unknown.
    pub(super) armed: bool,
    /// A wait is in progress and has no grant yet.
    pub(super) waiting: bool,
    timeout: Duration,
}

impl<S: LeaseStore> PendingRelease<S> {
    /// For a wait (`waiting`), armed by each attempt in turn; for a single try, armed at once:
    /// its one attempt is in flight from the start.
    pub(super) fn new(store: &Arc<S>, name: &LockName, owner: OwnerId, timeout: Duration, waiting: bool) -> Self {
        PendingRelease { store: Arc::clone(store), name: name.clone(), owner, armed: !waiting, waiting, timeout }
    }
}

impl<S: LeaseStore> Drop for PendingRelease<S> {
    fn drop(&mut self) {
        if !self.armed && !self.waiting {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (store, name, owner, t) = (Arc::clone(&self.store), self.name.clone(), self.owner, self.timeout);
            let (release, abandon) = (self.armed, self.waiting);
            rt.spawn(async move {
                if release {
                    let _ = timeout(t, store.release(&name, owner)).await;
                }
                if abandon {
                    let _ = timeout(t, store.abandon(&name, owner)).await;
                }
            });
        }
    }
}
