//! The lease handle of a [`StoreLock`](super::StoreLock) grant: renewals go through the store's
//! rounds, releases straight to the store.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::lease_store::LeaseStore;
use super::renewals::Renewals;
use crate::lease::{LeaseHandle, ReleaseOutcome, RenewOutcome};
use crate::{LockError, LockName, OwnerId};

pub(super) struct StoreLeaseHandle<S> {
    pub(super) store: Arc<S>,
    pub(super) renewals: Arc<Renewals>,
    pub(super) name: LockName,
    pub(super) owner: OwnerId,
}

#[async_trait]
impl<S: LeaseStore> LeaseHandle for StoreLeaseHandle<S> {
    async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.renewals.renew(&self.name, self.owner, ttl).await
    }
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.store.release(&self.name, self.owner).await
    }
    /// Its own request, not a renewal round: a round bounds itself by the ttl it renews for,
    /// which here is what is left of `hold_at_least` (a few ms near `t0 + d`) and shorter than
    /// one round trip, so a release there answered `Unavailable`. The release path bounds it.
    async fn release_after(&self, after: Duration) -> Result<ReleaseOutcome, LockError> {
        self.store.release_after(&self.name, self.owner, after).await
    }
}
