//! [`StoreLock`]: a [`LeaseStore`] turned into a [`DistributedLock`] — the single try, the wait
//! (`wait.rs`), the clean-up of what an unfinished acquire left (`pending.rs`) and the leases of
//! its grants, renewed in rounds (`renewals.rs`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{timeout, Instant};

use super::attempt::{attempt, no_answer};
use super::claim::{Claim, TryLock};
use super::handle::{Pushed, StoreLeaseHandle};
use super::lease_store::LeaseStore;
use super::pending::PendingRelease;
use super::renewals::Renewals;
use super::wait::{Granted, Wait};
use crate::audit::audited_force_release;
use crate::lease::LeaseGrant;
use crate::{
    AcquireOptions, Capabilities, ChangeFeed, DistributedLock, FencingToken, HolderInfo, Lease, LockError, LockName,
    LockService, OwnerId,
};

/// Turns a [`LeaseStore`] into a [`DistributedLock`].
pub struct StoreLock<S> {
    store: Arc<S>,
    renewals: Arc<Renewals>,
}

impl<S> Clone for StoreLock<S> {
    fn clone(&self) -> Self {
        StoreLock { store: Arc::clone(&self.store), renewals: Arc::clone(&self.renewals) }
    }
}

impl<S: LeaseStore> StoreLock<S> {
    /// Wraps a store.
    pub fn new(store: S) -> Self {
        StoreLock::from_arc(Arc::new(store))
    }

    /// Wraps a store that other lock kinds share (one backend handle serving every kind).
    pub fn from_arc(store: Arc<S>) -> Self {
        StoreLock { renewals: Arc::new(Renewals::new(Arc::clone(&store))), store }
    }

    /// The wrapped store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The lease of a grant to `owner`: a grant pushed to the wait (`grant.pushed`) is believed
    /// for its window until the lease's first renewal claims it (`handle.rs`).
    fn lease(&self, name: &LockName, owner: OwnerId, grant: Granted, opts: &AcquireOptions) -> Lease {
        let claim = grant.pushed.map(|_| std::sync::Mutex::new(Pushed::Unclaimed(grant.token)));
        let handle = Arc::new(StoreLeaseHandle {
            store: Arc::clone(&self.store),
            renewals: Arc::clone(&self.renewals),
            name: name.clone(),
            owner,
            token: grant.token,
            claim,
        });
        let mut lease_grant = LeaseGrant::new(name.clone(), grant.token, owner, grant.started, handle)
            .with_clock_offset(self.store.capabilities().max_clock_offset);
        if let Some(terms) = grant.pushed {
            lease_grant = lease_grant.provisional(terms.window);
            if terms.deferred_claim {
                lease_grant = lease_grant.claim_deferred();
            }
        }
        Lease::new(lease_grant, opts)
    }
}

/// The longest a wait that timed out spends withdrawing its traces before it answers.
const ABANDON_INLINE: Duration = Duration::from_millis(200);

#[async_trait]
impl<S: LeaseStore> DistributedLock for StoreLock<S> {
    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        self.store.inspect(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        self.store.list(prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        let backend = self.store.backend();
        audited_force_release(backend, name, self.store.inspect(name), self.store.force_release(name)).await
    }

    async fn watch_changes(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        self.store.watch_changes(name).await
    }

    #[tracing::instrument(name = "dlock.try_acquire", level = "debug", skip_all, fields(backend = self.store.backend(), lock = %name))]
    async fn try_acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        opts.validate(&self.store.capabilities())?;
        let owner = OwnerId::random();
        let mut pending = PendingRelease::new(&self.store, name, owner, opts.request_timeout, false);
        let started = Instant::now();
        let claim = Claim::new(name, owner, opts.ttl).holder(opts.holder.as_ref());
        let result = attempt(&*self.store, &claim, opts.request_timeout, false)
            .await
            .unwrap_or_else(|| Err(no_answer(&*self.store, opts.request_timeout)));
        match result {
            Ok(TryLock::Acquired { token }) => {
                pending.armed = false;
                Ok(Some(self.lease(name, owner, Granted::attempted(token, started), opts)))
            }
            Ok(TryLock::Held { .. } | TryLock::Quiet { .. }) => {
                pending.armed = false;
                Ok(None)
            }
            Err(e) => {
                // Outcome unknown: `pending` releases in the background on drop.
                pending.armed = e.outcome_unknown();
                Err(e)
            }
        }
    }

    #[tracing::instrument(name = "dlock.acquire", level = "debug", skip_all, fields(backend = self.store.backend(), lock = %name))]
    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        let caps = self.store.capabilities();
        opts.validate(&caps)?;
        // One owner id for the whole wait: attempts are idempotent for the same owner, so a
        // retry after a lost reply gets the grant back instead of waiting on itself.
        let owner = OwnerId::random();
        let mut pending = PendingRelease::new(&self.store, name, owner, opts.request_timeout, true);
        let claim = Claim::new(name, owner, opts.ttl).holder(opts.holder.as_ref());
        let result = Wait::new(&self.store, claim, opts, &mut pending)
            .run()
            .await
            .map(|granted| self.lease(name, owner, granted, opts));
        if matches!(result, Err(LockError::Timeout { .. })) && pending.waiting {
            // Withdraw what the wait left behind (a queue place) before answering, so the
            // caller's next step never finds its own stale place ahead of it. The server just
            // answered "busy", so this is one quick round trip; one slower than
            // `ABANDON_INLINE`, any other error and a dropped future leave it to `pending`
            // (an unreachable server must not stretch the caller's wait).
            let bound = opts.request_timeout.min(ABANDON_INLINE);
            if let Ok(Ok(())) = timeout(bound, self.store.abandon(name, owner)).await {
                pending.waiting = false;
            }
        }
        result
    }
}

impl<S: LeaseStore> LockService for StoreLock<S> {
    fn backend(&self) -> &str {
        self.store.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
}
