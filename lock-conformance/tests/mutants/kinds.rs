//! A read-write lock and semaphore store with a waiter queue, declaring `fifo`, correct or with
//! one bug, for the kinds' fairness cases (`cases/kinds_fifo.rs`): every one of them must pass
//! on the correct queue and fail on the broken one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_conformance::runner::{run_suite, Outcome, RunOptions};
use lock_conformance::{async_trait, Fixture};
use lock_core::{
    backend::{
        KindAttempt, KindGrant, KindStore, LeaseStore, ReleaseOutcome, RenewOutcome, StoreRwLock, StoreSemaphore,
        TryLock,
    },
    Capabilities, DistributedLock, DistributedRwLock, DistributedSemaphore, FencingToken, LockError, LockKind,
    LockName, MemoryLock, OwnerId,
};
use tokio::time::Instant;

/// How long a queue entry counts after the waiter's last attempt (StoreLock's waiters poll at
/// least every 125 ms for the 500 ms ttl).
const ENTRY_LIFE: Duration = Duration::from_millis(600);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum KindsBug {
    /// Correct: grants in queue order as far as the kind allows.
    None,
    /// Only waiting attempts respect the queue: a single try (`try_acquire_*`, the releaser's, a
    /// newcomer's) takes what fits ahead of queued waiters.
    TryOvertakes,
    /// A reader that fits next to the current readers goes in, whoever is queued (a queued
    /// writer is overtaken by later readers).
    ReadersJoin,
    /// Queue entries never lapse: a waiter that vanished blocks the ones behind it for good.
    HeadStuck,
}

#[derive(Default)]
struct Name {
    /// (owner, kind, lease end, token).
    holders: Vec<(OwnerId, LockKind, Instant, FencingToken)>,
    fence: u64,
    /// (owner, kind, entry end) in arrival order.
    queue: Vec<(OwnerId, LockKind, Instant)>,
}

impl Name {
    fn fits(&self, kind: LockKind, permits: u32) -> bool {
        match kind {
            LockKind::Read => self.holders.iter().all(|h| h.1 == LockKind::Read),
            LockKind::Permit => self.holders.len() < permits as usize,
            _ => self.holders.is_empty(),
        }
    }

    /// How many queue heads may be granted now: the head writer alone, the run of readers at the
    /// head, or as many permit waiters as permits are free.
    fn grantable(&self, permits: u32) -> usize {
        let Some(head) = self.queue.first() else { return 0 };
        match head.1 {
            LockKind::Permit => (permits as usize).saturating_sub(self.holders.len()).min(self.queue.len()),
            LockKind::Read if self.fits(LockKind::Read, 0) => {
                self.queue.iter().take_while(|w| w.1 == LockKind::Read).count()
            }
            LockKind::Read => 0,
            _ => usize::from(self.holders.is_empty()),
        }
    }
}

pub(crate) struct KindsServer {
    names: Mutex<HashMap<LockName, Name>>,
    bug: KindsBug,
}

impl std::fmt::Debug for KindsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindsServer").field("bug", &self.bug).finish()
    }
}

impl KindsServer {
    fn with<R>(&self, name: &LockName, f: impl FnOnce(&mut Name, Instant) -> R) -> R {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let n = names.entry(name.clone()).or_default();
        n.holders.retain(|h| h.2 > now);
        if self.bug != KindsBug::HeadStuck {
            n.queue.retain(|w| w.2 > now);
        }
        f(n, now)
    }
}

#[async_trait]
impl KindStore for KindsServer {
    fn backend(&self) -> &str {
        "kinds-mutant"
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::new();
        c.rw_lock = true;
        c.semaphore = true;
        c.fifo = true;
        c
    }

    async fn try_lock(&self, a: KindAttempt<'_>) -> Result<TryLock, LockError> {
        let bug = self.bug;
        Ok(self.with(a.name, |n, now| {
            if let Some(h) = n.holders.iter_mut().find(|h| h.0 == a.owner) {
                h.2 = now + a.ttl;
                return TryLock::Acquired { token: h.3 };
            }
            let place = n.queue.iter().position(|w| w.0 == a.owner);
            let fits = n.fits(a.kind, a.permits);
            let in_turn = match place {
                Some(i) => i < n.grantable(a.permits),
                None => n.queue.is_empty(),
            };
            let overtakes = (bug == KindsBug::TryOvertakes && !a.waiting)
                || (bug == KindsBug::ReadersJoin && a.kind == LockKind::Read);
            if fits && (in_turn || overtakes) {
                n.queue.retain(|w| w.0 != a.owner);
                n.fence += 1;
                let token = FencingToken(n.fence);
                n.holders.push((a.owner, a.kind, now + a.ttl, token));
                return TryLock::Acquired { token };
            }
            if a.waiting {
                match n.queue.iter_mut().find(|w| w.0 == a.owner) {
                    Some(w) => w.2 = now + ENTRY_LIFE,
                    None => n.queue.push((a.owner, a.kind, now + ENTRY_LIFE)),
                }
            }
            let remaining = n.holders.iter().map(|h| h.2.saturating_duration_since(now)).min();
            TryLock::Held { remaining }
        }))
    }

    async fn renew(&self, g: KindGrant<'_>, ttl: Duration) -> Result<RenewOutcome, LockError> {
        Ok(self.with(g.name, |n, now| match n.holders.iter_mut().find(|h| h.0 == g.owner) {
            Some(h) => {
                h.2 = now + ttl;
                RenewOutcome::Renewed
            }
            None => RenewOutcome::NotOwner,
        }))
    }

    async fn release(&self, g: KindGrant<'_>) -> Result<ReleaseOutcome, LockError> {
        Ok(self.with(g.name, |n, _| {
            let before = n.holders.len();
            n.holders.retain(|h| h.0 != g.owner);
            if n.holders.len() < before {
                ReleaseOutcome::Released
            } else {
                ReleaseOutcome::NotOwner
            }
        }))
    }

    async fn abandon(&self, g: KindGrant<'_>) -> Result<(), LockError> {
        self.with(g.name, |n, _| {
            n.queue.retain(|w| w.0 != g.owner);
            n.holders.retain(|h| h.0 != g.owner);
        });
        Ok(())
    }
}

struct KindsMutant(Arc<KindsServer>);

#[async_trait]
impl Fixture for KindsMutant {
    fn backend(&self) -> &str {
        "kinds-mutant"
    }
    /// The exclusive lock is not under test here: the reference backend's.
    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        Ok(Arc::new(MemoryLock::new()))
    }
    async fn rw_client(&self) -> Result<Option<Arc<dyn DistributedRwLock>>, LockError> {
        Ok(Some(Arc::new(StoreRwLock::new(Arc::clone(&self.0)))))
    }
    async fn semaphore_client(&self) -> Result<Option<Arc<dyn DistributedSemaphore>>, LockError> {
        Ok(Some(Arc::new(StoreSemaphore::new(Arc::clone(&self.0)))))
    }
    fn base_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
    async fn lease_stores(&self) -> Result<Vec<(&'static str, Arc<dyn LeaseStore>)>, LockError> {
        let mut stores = StoreRwLock::new(Arc::clone(&self.0)).lease_stores().to_vec();
        stores.push(("permit", StoreSemaphore::new(Arc::clone(&self.0)).lease_store(1)?));
        Ok(stores)
    }
}

pub(crate) async fn kinds_outcomes(bug: KindsBug, cases: &[&str]) -> Vec<(String, Outcome, String)> {
    let mut out = Vec::new();
    for case in cases {
        let fx = Arc::new(KindsMutant(Arc::new(KindsServer { names: Mutex::default(), bug })));
        let report = run_suite(fx, &RunOptions { filter: Some((*case).to_owned()), ..RunOptions::default() }).await;
        for c in report.cases.into_iter().filter(|c| c.name == format!("kinds-mutant::{case}")) {
            out.push((c.name, c.outcome, c.detail));
        }
    }
    out
}

pub(crate) const KINDS_FIFO: [&str; 4] =
    ["rw_fifo_order", "rw_fifo_no_overtaking", "semaphore_fifo_order", "kinds_fifo_vanished_head"];
