//! A split brain, the same way on every replicated Redis deployment: the node that holds a lease
//! is cut from its peers while its clients still reach it, a replica is promoted, a second
//! client tries the lock on the promoted node, then the cut heals.

use std::future::Future;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, Lease, LockName};
use lock_redis::RedisOptions;
use tokio::time::Instant;

/// The lease time of the split-brain runs.
pub const TTL: Duration = Duration::from_secs(3);

fn opts() -> AcquireOptions {
    AcquireOptions::new(TTL).wait(Duration::from_secs(1)).request_timeout(Duration::from_secs(1))
}

/// What one run saw, every instant measured from the cut.
#[derive(Debug)]
pub struct Window {
    /// When the deployment agreed on the promoted replica.
    pub promoted_after: Duration,
    /// The second client's grant (None: not within two ttls of the promotion), with the first
    /// lease's `is_valid()` and `valid_until` at that moment.
    pub second: Option<(Duration, bool, Duration)>,
    /// Whether the first lease was still valid when the second client gave up.
    pub first_valid_at_end: bool,
    /// When the first lease's lost signal fired, and why.
    pub lost: Option<(Duration, String)>,
    /// From the heal until the deployment was whole again (the old node demoted and in sync).
    pub healed_after: Duration,
    /// Tokens: the first holder's, the second's, the one granted after the heal.
    pub tokens: (u64, Option<u64>, u64),
}

/// C1 (through `url` with `options.0`) holds `name`; `cut` partitions the node that serves it
/// and returns once a replica was promoted; a fresh client C2 (`options.1`) then tries the lock
/// for two ttls; `heal` ends the cut and returns once the deployment is whole; a third client
/// (`options.1`) takes the lock. Prints the numbers ([`report`]) as the `what` partition.
pub async fn split_brain<C, CF, H, HF>(
    what: &str,
    url: &str,
    options: (&RedisOptions, &RedisOptions),
    name: &LockName,
    cut: C,
    heal: H,
) -> Window
where
    C: FnOnce() -> CF,
    CF: Future<Output = ()>,
    H: FnOnce() -> HF,
    HF: Future<Output = ()>,
{
    let (first, other) = options;
    let c1 = lock_redis::connect(url, first.clone()).await.unwrap();
    let lease = c1.acquire(name, &opts()).await.unwrap();
    let lost = {
        let signal = lease.lost();
        tokio::spawn(async move {
            signal.fired().await;
            Instant::now()
        })
    };
    let at = Instant::now();
    cut().await;
    let promoted_after = at.elapsed();

    // A fresh client: it asks the deployment where the name lives now.
    let c2 = dlock_testkit::retry_unavailable(Duration::from_secs(30), || lock_redis::connect(url, other.clone()))
        .await
        .unwrap();
    let end = Instant::now() + TTL * 2;
    let mut second: Option<(Lease, Duration, bool, Duration)> = None;
    while second.is_none() && Instant::now() < end {
        if let Ok(Some(l)) = c2.try_acquire(name, &opts()).await {
            second = Some((l, at.elapsed(), lease.is_valid(), lease.valid_until().saturating_duration_since(at)));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first_valid_at_end = lease.is_valid();

    let healed = Instant::now();
    heal().await;
    let healed_after = healed.elapsed();
    // The first holder learns at the latest when the demoted node refuses its renewal.
    let lost_at = tokio::time::timeout(TTL * 2, lost).await.ok().map(|j| j.unwrap());
    let lost = lost_at.map(|t| (t - at, lease.lost().reason().unwrap_or_default().to_owned()));

    let t2 = second.as_ref().map(|(l, ..)| l.token().0);
    if let Some((l, ..)) = &second {
        let _ = l.release().await;
    }
    let _ = lease.release().await;
    let c3 = lock_redis::connect(url, other.clone()).await.unwrap();
    let after = c3.acquire(name, &opts().wait(Duration::from_secs(10))).await.unwrap();
    let tokens = (lease.token().0, t2, after.token().0);
    after.release().await.unwrap();
    let w = Window {
        promoted_after,
        second: second.map(|(_, at, valid, until)| (at, valid, until)),
        first_valid_at_end,
        lost,
        healed_after,
        tokens,
    };
    report(what, first.min_replicas_ack, &w);
    w
}

/// Prints the run's numbers as one `MEASURED` line.
pub fn report(what: &str, acks: u32, w: &Window) {
    let second = match w.second {
        Some((at, valid, until)) => {
            format!("granted {at:?} after the cut (first lease valid then: {valid}, valid until {until:?})")
        }
        None => format!("not granted within two ttls (first lease still valid: {})", w.first_valid_at_end),
    };
    eprintln!(
        "MEASURED {what} partition (min_replicas_ack={acks}, ttl {TTL:?}): promoted {:?} after the cut; first lease \
         lost {:?}; second client {second}; whole again {:?} after the heal; tokens {:?}",
        w.promoted_after, w.lost, w.healed_after, w.tokens
    );
    if let (Some((granted, valid, _)), Some((lost, _))) = (w.second, &w.lost) {
        eprintln!(
            "MEASURED {what} partition (min_replicas_ack={acks}): first lease valid at the second grant: {valid}; \
             both believed they held for {:?}; nobody held for {:?}",
            lost.saturating_sub(granted),
            granted.saturating_sub(*lost)
        );
    }
}

/// No second holder while the first lease was valid: the first holder's renewals failed on the
/// cut-off node (its lost signal fired, it did not renew silently there) and the second client
/// got the lock only after the first lease ended. Tokens rose.
pub fn assert_no_overlap(w: &Window) {
    let (granted, valid, until) = w.second.unwrap_or_else(|| panic!("the lock was never granted again: {w:?}"));
    assert!(!valid, "a second holder got in while the first lease was valid (lost: {:?})", w.lost);
    assert!(until <= granted, "the first lease was valid until {until:?} after the cut, granted at {granted:?}");
    let (lost_after, _) = w.lost.clone().expect("the first lease ended without its lost signal");
    assert!(lost_after <= granted, "the lost signal fired at {lost_after:?}, after the second grant");
    assert_tokens_rise(w);
}

/// Tokens rose from the first holder to the second (if any) to the one after the heal.
pub fn assert_tokens_rise(w: &Window) {
    let (t1, t2, t3) = w.tokens;
    assert!(t2.is_none_or(|t2| t1 < t2 && t2 < t3) && t1 < t3, "tokens went {t1} → {t2:?} → {t3}");
}

/// The two split-brain tests of a deployment, from `$run(acks) -> Window`: `$with` (the holder
/// asks for `min_replicas_ack = 1`: no second holder while its lease is valid, asserted) and
/// `$without` (no acks: documents the limit, asserts no safety — only that the deployment
/// recovers and tokens still rise; the `MEASURED` lines give the overlap for the README).
// Every test binary compiles `common`; only the partition files expand this.
#[allow(unused_macros)]
macro_rules! split_brain_tests {
    ($run:ident, $with:ident, $without:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $with() {
            common::split_brain::assert_no_overlap(&$run(1).await);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $without() {
            common::split_brain::assert_tokens_rise(&$run(0).await);
        }
    };
}
#[allow(unused_imports)]
pub(crate) use split_brain_tests;
