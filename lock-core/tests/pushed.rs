//! A grant the server pushes to one wait (`PushedGrant`, Redis's blocking delivery): held at
//! once for its window from the instant its delivery was armed, claimed by the lease's first
//! renewal for a whole ttl, and only a hint once that window has passed (lock-model's
//! `Delivery::Blocking` and its bug switches, here against the real `StoreLock`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{
    Claim, LeaseStore, PushSender, PushedGrant, ReleaseOutcome, RenewOutcome, StoreLock, TryLock, WakeHub,
    WakeSubscription,
};
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, FencingToken, Lease, LockError, LockName, OwnerId, WakeMethod,
};
use tokio::time::Instant;

/// What the store was asked, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    /// A waiting attempt.
    Attempt,
    /// A single try: the claim of a pushed grant.
    Claim,
    Renew,
    Release,
}

/// Busy for waiting attempts until freed (then token 9); the claim answers `claim`.
struct State {
    calls: Vec<Call>,
    free: bool,
    claim: Option<TryLock>,
    push: Option<PushSender>,
}

#[derive(Clone)]
struct Pushing {
    state: Arc<Mutex<State>>,
    hub: WakeHub,
}

impl Pushing {
    fn new(claim: Option<TryLock>) -> Self {
        let state = State { calls: Vec::new(), free: false, claim, push: None };
        Pushing { state: Arc::new(Mutex::new(state)), hub: WakeHub::new() }
    }

    fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    fn record(&self, call: Call) {
        self.state.lock().unwrap().calls.push(call);
    }

    /// Waits until the wait has armed its delivery and been answered "busy" by the attempt it
    /// makes after subscribing, then pushes `grant` (the store's lock is freed first, so that an
    /// attempt after it is granted token 9). Pushing as soon as the subscription exists raced
    /// that attempt: freed before it arrived, it was granted token 9 (a CI failure, stop 45).
    async fn push_when_armed(&self, grant: PushedGrant) {
        let tx = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let ready = {
                    let st = self.state.lock().unwrap();
                    let attempts = st.calls.iter().filter(|c| **c == Call::Attempt).count();
                    st.push.clone().filter(|_| attempts >= 2)
                };
                if let Some(tx) = ready {
                    return tx;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the wait subscribed");
        self.state.lock().unwrap().free = true;
        tx.send(Some(grant)).expect("the wait listens");
    }
}

#[async_trait]
impl LeaseStore for Pushing {
    fn backend(&self) -> &str {
        "pushing"
    }

    /// Notified, as Redis's blocking delivery is: a polling store's wait would also attempt at
    /// its next poll (a few ms), and on a loaded machine that attempt could come before the push
    /// and take the lock the push freed (token 9; seen in stress runs).
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new();
        caps.wake = WakeMethod::Notify;
        caps
    }

    async fn try_lock(&self, _claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        if waiting {
            let mut st = self.state.lock().unwrap();
            st.calls.push(Call::Attempt);
            return Ok(if st.free {
                TryLock::Acquired { token: FencingToken(9) }
            } else {
                TryLock::Held { remaining: None }
            });
        }
        // A claim takes a while to reach the server (so that the lease is seen before its
        // answer, and a release sent meanwhile overtakes it): it counts when it arrives, and
        // after a release it finds the lock free, granted anew (token 8) as a real try would.
        tokio::time::sleep(CLAIM_TAKES).await;
        let mut st = self.state.lock().unwrap();
        let released = st.calls.contains(&Call::Release);
        st.calls.push(Call::Claim);
        Ok(if released { TryLock::Acquired { token: FencingToken(8) } } else { st.claim.expect("no claim expected") })
    }

    async fn renew(&self, _: &LockName, _: OwnerId, _: Duration) -> Result<RenewOutcome, LockError> {
        self.record(Call::Renew);
        Ok(RenewOutcome::Renewed)
    }

    async fn release(&self, _: &LockName, _: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.record(Call::Release);
        Ok(ReleaseOutcome::Released)
    }

    async fn subscribe_waiter(&self, _: &LockName, owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        let (sub, tx) = self.hub.subscribe(&owner.to_hex()).with_pushes();
        self.state.lock().unwrap().push = Some(tx);
        Ok(Some(sub))
    }
}

const TTL: Duration = Duration::from_secs(10);
const WINDOW: Duration = Duration::from_secs(1);
const CLAIM_TAKES: Duration = Duration::from_millis(100);

/// A wait that is pushed `grant` (built from the instant the wait armed) once it waits.
async fn pushed(store: &Pushing, grant: impl FnOnce(Instant) -> PushedGrant) -> Lease {
    pushed_with(store, AcquireOptions::new(TTL), grant).await
}

async fn pushed_with(store: &Pushing, opts: AcquireOptions, grant: impl FnOnce(Instant) -> PushedGrant) -> Lease {
    let lock = StoreLock::new(store.clone());
    let name = LockName::new("pushed").unwrap();
    let opts = opts.wait(Duration::from_secs(20));
    let waiter = tokio::spawn(async move { lock.acquire(&name, &opts).await });
    store.push_when_armed(grant(Instant::now())).await;
    tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("granted").unwrap().expect("a lease")
}

/// Waits until the store has seen `n` calls.
async fn calls_reach(store: &Pushing, n: usize) -> Vec<Call> {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let calls = store.calls();
            if calls.len() >= n {
                return calls;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the calls came")
}

#[tokio::test]
async fn a_pushed_grant_is_held_at_once_and_claimed_for_a_whole_ttl() {
    let store = Pushing::new(Some(TryLock::Acquired { token: FencingToken(7) }));
    let mut armed = None;
    // Armed half a window before the push arrives: the belief counts from the arming.
    let lease = pushed(&store, |at| {
        armed = Some(at - WINDOW / 2);
        PushedGrant::new(FencingToken(7), at - WINDOW / 2, WINDOW)
    })
    .await;
    assert_eq!(lease.token(), FencingToken(7), "the pushed token, with no attempt after the push");
    let armed = armed.unwrap();
    assert!(
        lease.valid_until() <= armed + WINDOW,
        "believed for the window from the arming (not from the push's arrival), until claimed"
    );
    let calls = calls_reach(&store, 3).await;
    assert_eq!(calls[..3], [Call::Attempt, Call::Attempt, Call::Claim], "busy, busy, then the claim: {calls:?}");
    tokio::time::timeout(Duration::from_secs(2), async {
        while lease.valid_until() < Instant::now() + TTL / 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the claim's answer extends the lease to a whole ttl");
    assert!(lease.is_valid());
    lease.release().await.unwrap();
    assert_eq!(store.calls().last(), Some(&Call::Release));
}

#[tokio::test]
async fn a_pushed_grant_past_its_window_is_only_a_hint() {
    let store = Pushing::new(None);
    // Armed two windows ago: the server's provisional grant may have ended, and the lock gone on.
    let lease = pushed(&store, |at| PushedGrant::new(FencingToken(7), at - 2 * WINDOW, WINDOW)).await;
    assert_eq!(lease.token(), FencingToken(9), "the wait attempted, and took the attempt's grant");
    assert_eq!(store.calls(), [Call::Attempt, Call::Attempt, Call::Attempt]);
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_claim_that_finds_a_newer_grant_loses_the_lease_and_gives_that_grant_back() {
    let store = Pushing::new(Some(TryLock::Acquired { token: FencingToken(8) }));
    let lease = pushed(&store, |at| PushedGrant::new(FencingToken(7), at, WINDOW)).await;
    tokio::time::timeout(Duration::from_secs(2), lease.lost().fired()).await.expect("the lease is lost");
    assert!(!lease.is_valid());
    let calls = calls_reach(&store, 4).await;
    assert_eq!(calls, [Call::Attempt, Call::Attempt, Call::Claim, Call::Release], "token 8 is released");
}

#[tokio::test]
async fn a_refused_claim_loses_the_lease() {
    let store = Pushing::new(Some(TryLock::Held { remaining: None }));
    let lease = pushed(&store, |at| PushedGrant::new(FencingToken(7), at, WINDOW)).await;
    tokio::time::timeout(Duration::from_secs(2), lease.lost().fired()).await.expect("the lease is lost");
    assert_eq!(store.calls(), [Call::Attempt, Call::Attempt, Call::Claim]);
}

/// Whether the watchdog claims (auto-renewal) or a task of the lease's own does (none).
#[tokio::test]
async fn a_claim_that_arrives_after_the_release_takes_nothing_back() {
    for auto_renew in [true, false] {
        for _ in 0..5 {
            let store = Pushing::new(Some(TryLock::Acquired { token: FencingToken(7) }));
            let opts = AcquireOptions::new(TTL).auto_renew(auto_renew);
            let lease = pushed_with(&store, opts, |at| PushedGrant::new(FencingToken(7), at, WINDOW)).await;
            let releasing = Instant::now();
            lease.release().await.unwrap();
            assert!(releasing.elapsed() < CLAIM_TAKES / 2, "the release does not wait for the claim's answer");
            // Long enough for a claim sent at the push to have arrived (after the release).
            tokio::time::sleep(CLAIM_TAKES * 2).await;
            let calls = store.calls();
            let after = &calls[calls.iter().position(|c| *c == Call::Release).expect("released")..];
            assert!(
                after == [Call::Release] || after == [Call::Release, Call::Claim, Call::Release],
                "auto_renew {auto_renew}: a claim after the release (which finds the lock free, granted anew) gives \
                 that grant back at once: {calls:?}"
            );
            if !auto_renew {
                assert_eq!(after.len(), 3, "the lease's own claim task sent its claim at the push");
            }
        }
    }
}

/// A store whose claim only extends (`PushedGrant::claim_deferred`): the claim comes a third
/// into the window, not at once, and a release before then means it is never sent; whether the
/// watchdog claims (auto-renewal) or a task of the lease's own does (none).
#[tokio::test]
async fn a_deferred_claim_is_never_sent_for_a_hold_released_before_it() {
    for auto_renew in [true, false] {
        never_claimed_when_released_early(AcquireOptions::new(TTL).auto_renew(auto_renew)).await;
    }
}

async fn never_claimed_when_released_early(opts: AcquireOptions) {
    let store = Pushing::new(Some(TryLock::Acquired { token: FencingToken(7) }));
    let lease = pushed_with(&store, opts, |at| PushedGrant::new(FencingToken(7), at, WINDOW).claim_deferred()).await;
    assert_eq!(lease.token(), FencingToken(7), "held at once");
    // A claim sent at once would have arrived by now (it takes CLAIM_TAKES).
    tokio::time::sleep(CLAIM_TAKES + CLAIM_TAKES / 2).await;
    assert_eq!(store.calls(), [Call::Attempt, Call::Attempt], "no claim yet, a short hold later");
    assert!(lease.is_valid() && lease.valid_until() <= Instant::now() + WINDOW, "believed for the window");
    lease.release().await.unwrap();
    tokio::time::sleep(WINDOW).await;
    assert_eq!(store.calls(), [Call::Attempt, Call::Attempt, Call::Release], "released, and never claimed");
}

#[tokio::test]
async fn a_deferred_claim_comes_a_third_into_the_window_and_extends_the_lease() {
    for auto_renew in [true, false] {
        claimed_a_third_in(AcquireOptions::new(TTL).auto_renew(auto_renew)).await;
    }
}

async fn claimed_a_third_in(opts: AcquireOptions) {
    let store = Pushing::new(Some(TryLock::Acquired { token: FencingToken(7) }));
    let mut armed = None;
    let lease = pushed_with(&store, opts, |at| {
        armed = Some(at);
        PushedGrant::new(FencingToken(7), at, WINDOW).claim_deferred()
    })
    .await;
    let armed = armed.unwrap();
    let calls = calls_reach(&store, 3).await;
    let claimed = Instant::now();
    assert_eq!(calls, [Call::Attempt, Call::Attempt, Call::Claim]);
    // Sent a third into the window (less the drift allowance), answered CLAIM_TAKES later; well
    // before the window ends, so that retries fit.
    let sent = claimed - CLAIM_TAKES;
    assert!(sent >= armed + WINDOW / 4, "claimed {:?} after the arming: too soon", sent - armed);
    assert!(sent <= armed + WINDOW / 2, "claimed {:?} after the arming: too late", sent - armed);
    tokio::time::timeout(Duration::from_secs(1), async {
        while lease.valid_until() < Instant::now() + TTL / 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the claim's answer extends the lease to a whole ttl");
    lease.release().await.unwrap();
}
