//! The lease handle of a [`StoreLock`](super::StoreLock) grant: renewals go through the store's
//! rounds, releases straight to the store. A grant the server pushed to the wait
//! ([`PushedGrant`](crate::backend::PushedGrant)) is claimed by the lease's first renewal, here,
//! with [`LeaseStore::claim`], which never grants anew: so a release need not wait for a claim
//! in flight, and a claim that arrives after the release changes nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::lease_store::LeaseStore;
use super::renewals::Renewals;
use crate::lease::{LeaseHandle, ReleaseOutcome, RenewOutcome};
use crate::{FencingToken, LockError, LockName, OwnerId};

pub(super) struct StoreLeaseHandle<S> {
    pub(super) store: Arc<S>,
    pub(super) renewals: Arc<Renewals>,
    pub(super) name: LockName,
    pub(super) owner: OwnerId,
    /// The lease's token, which its release passes on ([`LeaseStore::release_held`]).
    pub(super) token: FencingToken,
    /// A pushed grant's claim: `None` for a grant an attempt's reply made.
    pub(super) claim: Option<Mutex<Pushed>>,
}

/// Where the claim of a pushed grant stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pushed {
    /// Not claimed yet: the grant's token.
    Unclaimed(FencingToken),
    /// The server confirmed the grant for a whole ttl: renewals as usual.
    Claimed,
    /// The grant was not this lease's any more, or the lease was released before its claim.
    Gone,
}

impl<S> StoreLeaseHandle<S> {
    fn pushed(&self) -> Option<Pushed> {
        self.claim.as_ref().map(|c| *c.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records a claim's answer, unless a release came first (`Gone` stays).
    fn claimed(&self, token: FencingToken, outcome: RenewOutcome) {
        if let Some(c) = &self.claim {
            let mut state = c.lock().unwrap_or_else(|e| e.into_inner());
            if *state == Pushed::Unclaimed(token) {
                *state = if outcome == RenewOutcome::Renewed { Pushed::Claimed } else { Pushed::Gone };
            }
        }
    }

    /// Before a release: a grant not claimed yet never is after it.
    fn end_claim(&self) {
        if let Some(c) = &self.claim {
            let mut state = c.lock().unwrap_or_else(|e| e.into_inner());
            if let Pushed::Unclaimed(_) = *state {
                *state = Pushed::Gone;
            }
        }
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseHandle for StoreLeaseHandle<S> {
    async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError> {
        match self.pushed() {
            Some(Pushed::Unclaimed(token)) => {
                let outcome = self.store.claim(&self.name, self.owner, token, ttl).await?;
                self.claimed(token, outcome);
                Ok(outcome)
            }
            Some(Pushed::Gone) => Ok(RenewOutcome::NotOwner),
            Some(Pushed::Claimed) | None => self.renewals.renew(&self.name, self.owner, ttl).await,
        }
    }
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.end_claim();
        self.store.release_held(&self.name, self.owner, self.token).await
    }
    /// Its own request, not a renewal round: a round bounds itself by the ttl it renews for,
    /// which here is what is left of `hold_at_least` (a few ms near `t0 + d`) and shorter than
    /// one round trip, so a release there answered `Unavailable`. The release path bounds it.
    async fn release_after(&self, after: Duration) -> Result<ReleaseOutcome, LockError> {
        self.end_claim();
        self.store.release_after(&self.name, self.owner, after).await
    }
}
