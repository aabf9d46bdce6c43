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
