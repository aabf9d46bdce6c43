//! The shape of a wait on a notifying store: after a busy answer it subscribes, and tries once
//! more before sleeping only when the subscription cannot vouch that it heard every wake-up
//! since that answer's attempt was sent (`WakeSubscription::live_since`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{
    Claim, LeaseStore, ReleaseOutcome, RenewOutcome, StoreLock, TryLock, WakeHub, WakeSubscription,
};
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, FencingToken, LockError, LockName, OwnerId, WakeMethod,
};
use tokio::time::Instant;

/// A lock that stays busy until the test frees it; counts the attempts.
#[derive(Clone, Default)]
struct Counted {
    state: Arc<Mutex<State>>,
    hub: WakeHub,
}

#[derive(Default)]
struct State {
    free: bool,
    attempts: Vec<OwnerId>,
}

impl Counted {
    fn attempts(&self) -> Vec<OwnerId> {
        self.state.lock().unwrap().attempts.clone()
    }

    /// Frees the lock and wakes the waiter `owner`, as a release that hands off would.
    fn free_and_wake(&self, owner: OwnerId) {
        self.state.lock().unwrap().free = true;
        self.hub.wake_or_keep(&owner.to_hex());
    }
}

#[async_trait]
impl LeaseStore for Counted {
    fn backend(&self) -> &str {
        "counted"
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new();
        caps.wake = WakeMethod::Notify;
        caps
    }

    async fn try_lock(&self, claim: &Claim<'_>, _waiting: bool) -> Result<TryLock, LockError> {
        let mut st = self.state.lock().unwrap();
        st.attempts.push(claim.owner);
        Ok(if st.free {
            TryLock::Acquired { token: FencingToken(1) }
        } else {
            TryLock::Held { remaining: Some(Duration::from_secs(30)) }
        })
    }

    async fn renew(&self, _: &LockName, _: OwnerId, _: Duration) -> Result<RenewOutcome, LockError> {
        Ok(RenewOutcome::Renewed)
    }

    async fn release(&self, _: &LockName, _: OwnerId) -> Result<ReleaseOutcome, LockError> {
        Ok(ReleaseOutcome::Released)
    }

    async fn subscribe_waiter(&self, _: &LockName, owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        Ok(Some(self.hub.subscribe(&owner.to_hex())))
    }
}

/// Runs one wait against `store`: returns the attempts made before the release, and in all.
async fn wait_once(store: Counted) -> (usize, usize) {
    let lock = StoreLock::new(store.clone());
    let name = LockName::new("w").unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(20));
    let waiter = tokio::spawn(async move { lock.acquire(&name, &opts).await.map(|l| l.token()) });
    let first = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(o) = store.attempts().first() {
                return *o;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the wait made its first attempt");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = store.attempts().len();
    let freed = Instant::now();
    store.free_and_wake(first);
    let token = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken").unwrap().unwrap();
    assert_eq!(token, FencingToken(1));
    assert!(freed.elapsed() < Duration::from_secs(2), "woken by the wake-up, not by a timer");
    (before, store.attempts().len())
}

#[tokio::test]
async fn a_live_subscription_saves_the_retry() {
    let store = Counted::default();
    store.hub.set_live_since(Some(Instant::now()));
    assert_eq!(wait_once(store).await, (1, 2), "busy, then granted: no re-try between");
}

#[tokio::test]
async fn a_subscription_live_only_since_after_the_attempt_retries() {
    let store = Counted::default();
    // Live from a point after any attempt of this test: the attempt may predate it.
    store.hub.set_live_since(Some(Instant::now() + Duration::from_secs(60)));
    assert_eq!(wait_once(store).await, (2, 3), "busy, re-try after subscribing, then granted");
}

#[tokio::test]
async fn a_subscription_not_known_live_retries() {
    assert_eq!(wait_once(Counted::default()).await, (2, 3), "busy, re-try after subscribing, then granted");
}
