//! "One watchdog for all": a client whose leases renew through one task of its own, which tells
//! each lease's observer itself with nothing to catch a panic — what the runtime's watchdog
//! driver was before it contained them. One panicking hook ends that task, and with it the
//! renewals of every lease of the client.

use std::sync::Arc;
use std::time::Duration;

use lock_conformance::{async_trait, Fixture};
use lock_core::LockService;
use lock_core::{
    backend::{Claim, LeaseGrant, LeaseHandle, LeaseStore, ReleaseOutcome, RenewOutcome, TryLock},
    AcquireOptions, Capabilities, DistributedLock, Lease, LeaseEvents, LockError, LockName, OwnerId, WaitPolicy,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::store::{Bug, Server, Store};

type Answer = oneshot::Sender<Result<RenewOutcome, LockError>>;
type Ask = (LockName, OwnerId, Duration, Option<Arc<dyn LeaseEvents>>, Answer);

pub(crate) struct Client {
    store: Arc<Store>,
    asks: mpsc::UnboundedSender<Ask>,
}

/// The one task that renews the leases of every client of a fixture (of its runtime).
fn watchdog(store: Arc<Store>) -> mpsc::UnboundedSender<Ask> {
    let (asks, mut rx) = mpsc::unbounded_channel::<Ask>();
    tokio::spawn(async move {
        while let Some((name, owner, ttl, events, answer)) = rx.recv().await {
            let outcome = store.renew(&name, owner, ttl).await;
            if let (Ok(RenewOutcome::Renewed), Some(events)) = (&outcome, &events) {
                events.renewed();
            }
            let _ = answer.send(outcome);
        }
    });
    asks
}

impl Client {
    fn lease(
        &self,
        name: &LockName,
        owner: OwnerId,
        token: lock_core::FencingToken,
        started: Instant,
        opts: &AcquireOptions,
    ) -> Lease {
        let mut opts = opts.clone();
        let events = opts.events.take().map(|e| e.0);
        let handle =
            Handle { store: Arc::clone(&self.store), asks: self.asks.clone(), name: name.clone(), owner, events };
        Lease::new(LeaseGrant::new(name.clone(), token, owner, started, Arc::new(handle)), &opts)
    }
}

struct Handle {
    store: Arc<Store>,
    asks: mpsc::UnboundedSender<Ask>,
    name: LockName,
    owner: OwnerId,
    events: Option<Arc<dyn LeaseEvents>>,
}

#[async_trait]
impl LeaseHandle for Handle {
    async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let (answer, rx) = oneshot::channel();
        let gone = || LockError::unavailable("mutant", "the client's one watchdog task is gone");
        self.asks.send((self.name.clone(), self.owner, ttl, self.events.clone(), answer)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.store.release(&self.name, self.owner).await
    }
}

impl LockService for Client {
    fn backend(&self) -> &str {
        "one-watchdog"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
    }
}

#[async_trait]
impl DistributedLock for Client {
    async fn try_acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        let (owner, started) = (OwnerId::random(), Instant::now());
        Ok(match self.store.try_lock(&Claim::new(name, owner, opts.ttl), false).await? {
            TryLock::Acquired { token } => Some(self.lease(name, owner, token, started, opts)),
            _ => None,
        })
    }
    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        let begun = Instant::now();
        let deadline = opts.wait.deadline(begun);
        loop {
            if let Some(lease) = self.try_acquire(name, opts).await? {
                return Ok(lease);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) || opts.wait == WaitPolicy::NoWait {
                return Err(LockError::Timeout {
                    name: name.as_str().to_owned(),
                    waited: begun.elapsed(),
                    quiet_left: None,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

pub(crate) struct OneWatchdog(pub(crate) Arc<Server>, pub(crate) std::sync::Mutex<Option<mpsc::UnboundedSender<Ask>>>);

impl OneWatchdog {
    fn store(&self) -> Arc<Store> {
        Arc::new(Store { server: Arc::clone(&self.0), cut: Arc::default(), latency: Arc::default() })
    }
}

#[async_trait]
impl Fixture for OneWatchdog {
    fn backend(&self) -> &str {
        "one-watchdog"
    }
    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        let asks =
            self.1.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(|| watchdog(self.store())).clone();
        Ok(Arc::new(Client { store: self.store(), asks }))
    }
    fn base_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
}

pub(crate) fn server() -> Arc<Server> {
    Server::new(Bug::None)
}
