//! Run-once jobs on the in-memory backend: `hold_at_least`, `try_run_locked`,
//! `run_locked_fallible`.

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, DistributedLockExt, LockError, LockName, MemoryLock};
use tokio::time::Instant;

fn name(n: &str) -> LockName {
    LockName::new(n).expect("valid")
}

/// Polls with `try_acquire` until granted; returns when it was.
async fn first_grant(lock: &MemoryLock, n: &LockName) -> Instant {
    let opts = AcquireOptions::new(Duration::from_secs(5));
    loop {
        if let Some(l) = lock.try_acquire(n, &opts).await.expect("answers") {
            let at = Instant::now();
            l.release().await.expect("release");
            return at;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn an_early_release_keeps_the_lock_until_t0_plus_hold_at_least() {
    let lock = MemoryLock::new();
    let other = lock.client();
    let hold = Duration::from_millis(300);
    for (i, how) in ["release", "drop"].iter().enumerate() {
        let n = name(&format!("job-{i}"));
        let t0 = Instant::now();
        let lease =
            lock.acquire(&n, &AcquireOptions::new(Duration::from_secs(5)).hold_at_least(hold)).await.expect("free");
        if *how == "release" {
            lease.release().await.expect("release");
        } else {
            drop(lease);
        }
        let got = first_grant(&other, &n).await;
        assert!(got >= t0 + hold, "{how}: another acquirer got in {:?} after t0, before {hold:?}", got - t0);
        assert!(got < t0 + hold + Duration::from_millis(150), "{how}: free only {:?} after t0", got - t0);
    }
}

#[tokio::test]
async fn a_waiter_gets_the_lock_right_at_t0_plus_hold_at_least() {
    let lock = MemoryLock::new();
    let other = lock.client();
    let n = name("job-waiter");
    let hold = Duration::from_millis(300);
    let t0 = Instant::now();
    let lease = lock.acquire(&n, &AcquireOptions::new(Duration::from_secs(5)).hold_at_least(hold)).await.expect("free");
    let waiter = tokio::spawn(async move {
        let l = other.acquire(&n, &AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5))).await;
        (Instant::now(), l)
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    lease.release().await.expect("release");
    let (at, l) = waiter.await.expect("joined");
    let _granted = l.expect("granted");
    assert!(at >= t0 + hold && at < t0 + hold + Duration::from_millis(150), "granted {:?} after t0", at - t0);
}

#[tokio::test]
async fn a_release_after_t0_plus_hold_at_least_frees_at_once() {
    let lock = MemoryLock::new();
    let n = name("job-late");
    let lease = lock
        .acquire(&n, &AcquireOptions::new(Duration::from_secs(5)).hold_at_least(Duration::from_millis(50)))
        .await
        .expect("free");
    tokio::time::sleep(Duration::from_millis(80)).await;
    lease.release().await.expect("release");
    assert!(lock.try_acquire(&n, &AcquireOptions::new(Duration::from_secs(5))).await.expect("answers").is_some());
}

#[tokio::test]
async fn try_run_locked_is_none_when_busy_and_runs_when_free() {
    let lock = MemoryLock::new();
    let n = name("job-try");
    let opts = AcquireOptions::new(Duration::from_secs(5));
    let held = lock.acquire(&n, &opts).await.expect("free");
    let mut ran = false;
    let r = lock.try_run_locked(&n, &opts, |_| async { ran = true }).await.expect("answers");
    assert!(r.is_none() && !ran, "the body ran while another holder had the lock");
    held.release().await.expect("release");
    let r = lock.try_run_locked(&n, &opts, |lease| async move { lease.token() }).await.expect("answers");
    assert!(r.is_some());
    assert!(lock.try_acquire(&n, &opts).await.expect("answers").is_some(), "try_run_locked did not release");
}

#[derive(Debug, PartialEq)]
enum JobError {
    Lock(String),
    Failed(&'static str),
}

impl From<LockError> for JobError {
    fn from(e: LockError) -> Self {
        JobError::Lock(e.to_string())
    }
}

#[tokio::test]
async fn run_locked_fallible_returns_one_flat_result_and_releases() {
    let lock = MemoryLock::new();
    let n = name("job-fallible");
    let opts = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_millis(50));
    let ok: Result<u32, JobError> = lock.run_locked_fallible(&n, &opts, |_| async { Ok(3) }).await;
    assert_eq!(ok, Ok(3));
    let failed: Result<u32, JobError> =
        lock.run_locked_fallible(&n, &opts, |_| async { Err(JobError::Failed("x")) }).await;
    assert_eq!(failed, Err(JobError::Failed("x")));
    let held = lock.acquire(&n, &opts).await.expect("released after the failed body");
    let busy: Result<u32, JobError> = lock.run_locked_fallible(&n, &opts, |_| async { Ok(1) }).await;
    assert!(matches!(&busy, Err(JobError::Lock(_))), "a busy lock must come back as the lock error: {busy:?}");
    held.release().await.expect("release");
}

/// A lease store over a link with `latency` each way, one request at a time per call.
mod slow {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    use lock_core::backend::{async_trait, Claim, LeaseStore, ReleaseOutcome, RenewOutcome, TryLock};
    use lock_core::{Capabilities, FencingToken, LockError, LockName, OwnerId};
    use tokio::time::Instant;

    pub(crate) struct Slow {
        latency: Duration,
        entries: Mutex<HashMap<LockName, (OwnerId, Instant)>>,
        fence: AtomicU64,
        releases: AtomicUsize,
    }

    impl Slow {
        pub(crate) fn new(latency: Duration) -> Slow {
            Slow { latency, entries: Mutex::default(), fence: AtomicU64::new(0), releases: AtomicUsize::new(0) }
        }
        fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, (OwnerId, Instant)>> {
            self.entries.lock().unwrap_or_else(|e| e.into_inner())
        }
        /// Whether `name` is held at the server now.
        pub(crate) fn held(&self, name: &LockName) -> bool {
            self.entries().get(name).is_some_and(|(_, exp)| *exp > Instant::now())
        }
    }

    #[async_trait]
    impl LeaseStore for Slow {
        fn backend(&self) -> &str {
            "slow"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::new()
        }
        async fn try_lock(&self, claim: &Claim<'_>, _waiting: bool) -> Result<TryLock, LockError> {
            let (name, owner, ttl) = (claim.name, claim.owner, claim.ttl);
            tokio::time::sleep(self.latency).await;
            let now = Instant::now();
            let answer = {
                let mut entries = self.entries();
                match entries.get(name) {
                    Some((o, exp)) if *o != owner && *exp > now => TryLock::Held { remaining: Some(*exp - now) },
                    _ => {
                        entries.insert(name.clone(), (owner, now + ttl));
                        TryLock::Acquired { token: FencingToken(self.fence.fetch_add(1, Ordering::SeqCst) + 1) }
                    }
                }
            };
            tokio::time::sleep(self.latency).await;
            Ok(answer)
        }
        async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
            tokio::time::sleep(self.latency).await;
            let now = Instant::now();
            let answer = match self.entries().get_mut(name) {
                Some((o, exp)) if *o == owner && *exp > now => {
                    *exp = now + ttl;
                    RenewOutcome::Renewed
                }
                _ => RenewOutcome::NotOwner,
            };
            tokio::time::sleep(self.latency).await;
            Ok(answer)
        }
        async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
            self.releases.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.latency).await;
            let answer = {
                let mut entries = self.entries();
                match entries.get(name) {
                    Some((o, exp)) if *o == owner && *exp > Instant::now() => {
                        entries.remove(name);
                        ReleaseOutcome::Released
                    }
                    _ => ReleaseOutcome::NotOwner,
                }
            };
            tokio::time::sleep(self.latency).await;
            Ok(answer)
        }
    }
}

/// A release a few ms before `t0 + d` over a link slower than that: the lock is ours and stays
/// taken until `t0 + d`, so the answer is `Ok`, not `Unavailable` (the renewal that moves the
/// lease's end once went through a renewal round bounded by the few ms left).
#[tokio::test]
async fn a_release_just_before_t0_plus_hold_at_least_answers_ok_over_a_slow_link() {
    use std::sync::Arc;

    use lock_core::backend::StoreLock;

    let store = Arc::new(slow::Slow::new(Duration::from_millis(10)));
    let lock = StoreLock::from_arc(Arc::clone(&store));
    let hold = Duration::from_millis(400);
    for left in [3u64, 8, 15] {
        let n = name(&format!("near-end-{left}"));
        let t0 = Instant::now();
        let opts = AcquireOptions::new(Duration::from_secs(5)).auto_renew(false).hold_at_least(hold);
        let lease = lock.acquire(&n, &opts).await.expect("free");
        tokio::time::sleep_until(t0 + hold - Duration::from_millis(left)).await;
        let answer = lease.release().await;
        assert!(answer.is_ok(), "release {left} ms before t0 + d answered {answer:?}");
        tokio::time::sleep_until(t0 + hold + Duration::from_millis(100)).await;
        assert!(!store.held(&n), "still held 100 ms after t0 + d");
    }
}

/// `acquire_all` whose set fails cleans up side by side and within its wait (plus a short
/// grace), not one slow release after the other; the releases still reach the server.
#[tokio::test]
async fn acquire_all_clean_up_does_not_overrun_the_wait() {
    use std::sync::Arc;

    use lock_core::backend::StoreLock;
    use lock_core::{acquire_all, LockError};

    let store = Arc::new(slow::Slow::new(Duration::from_millis(250)));
    let lock = StoreLock::from_arc(Arc::clone(&store));
    let names: Vec<LockName> = ["a", "b", "c", "z"].iter().map(|n| name(&format!("set/{n}"))).collect();
    // z is held by someone else.
    let other = StoreLock::from_arc(Arc::clone(&store));
    let _z = other.acquire(&names[3], &AcquireOptions::new(Duration::from_secs(30))).await.expect("free");
    // Three grants of 500 ms each, then z answers busy at the deadline.
    let wait = Duration::from_millis(2500);
    let opts = AcquireOptions::new(Duration::from_secs(30)).wait(wait).request_timeout(Duration::from_secs(5));
    let t = Instant::now();
    let r = acquire_all(&lock, &names, &opts).await;
    let took = t.elapsed();
    assert!(matches!(r, Err(LockError::Timeout { .. })), "{r:?}");
    // Three releases one after the other take 1.5 s past the deadline.
    assert!(took < wait + Duration::from_millis(1000), "the clean-up kept the caller {took:?} (wait {wait:?})");
    let freed = async {
        while names[..3].iter().any(|n| store.held(n)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), freed).await.expect("the partial set was released in the background");
}
