//! One side of a [`KindStore`] (read, write, or the permits of a semaphore) as a
//! [`LeaseStore`], so [`StoreLock`](crate::backend::StoreLock) waits for it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::rules::writer_claim;
use super::store::{KindAttempt, KindGrant, KindStore};
use crate::lease::{ReleaseOutcome, RenewOutcome};
use crate::store::{Claim, LeaseStore, TryLock};
use crate::wake::WakeSubscription;
use crate::{Capabilities, LockError, LockKind, LockName, OwnerId};

/// One side (read, write, or a semaphore of `permits`) of a [`KindStore`] as a [`LeaseStore`].
pub(crate) struct KindSide<B> {
    store: Arc<B>,
    kind: LockKind,
    permits: u32,
}

impl<B> KindSide<B> {
    pub(crate) fn new(store: &Arc<B>, kind: LockKind, permits: u32) -> Self {
        KindSide { store: Arc::clone(store), kind, permits }
    }

    pub(crate) fn store(&self) -> &Arc<B> {
        &self.store
    }
}

impl<B: KindStore> KindSide<B> {
    /// One attempt; a waiting writer's refusal leaves a claim.
    async fn attempt(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
        waiting: bool,
    ) -> Result<TryLock, LockError> {
        let claim = writer_claim(ttl);
        let writer = self.kind == LockKind::Write;
        let attempt = KindAttempt {
            kind: self.kind,
            permits: self.permits,
            name,
            owner,
            ttl,
            claim: (writer && waiting).then_some(claim),
            waiting,
        };
        match self.store.try_lock(attempt).await? {
            // A writer re-tries before the claim lapses, so waiting readers stay held back.
            TryLock::Held { remaining } if writer => {
                Ok(TryLock::Held { remaining: Some(remaining.map_or(claim / 3, |r| r.min(claim / 3))) })
            }
            other => Ok(other),
        }
    }
}

#[async_trait]
impl<B: KindStore> LeaseStore for KindSide<B> {
    fn backend(&self) -> &str {
        self.store.backend()
    }

    /// A waiting writer's refused attempt leaves a short claim that holds back new readers; a
    /// single try does not wait, so it leaves none.
    async fn try_lock(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        self.attempt(claim.name, claim.owner, claim.ttl, waiting).await
    }

    /// A wait that ended without a grant withdraws what it left at once ([`KindStore::abandon`]:
    /// a writer's claim, a queue place) instead of holding others back until it lapses.
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.store.abandon(KindGrant { kind: self.kind, name, owner }).await
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.store.renew(KindGrant { kind: self.kind, name, owner }, ttl).await
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.store.release(KindGrant { kind: self.kind, name, owner }).await
    }

    async fn release_after(&self, name: &LockName, owner: OwnerId, d: Duration) -> Result<ReleaseOutcome, LockError> {
        self.store.release_after(KindGrant { kind: self.kind, name, owner }, d).await
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.store.subscribe(self.kind, name).await
    }

    async fn subscribe_waiter(&self, name: &LockName, owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        self.store.subscribe_waiter(self.kind, name, owner).await
    }

    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
}
