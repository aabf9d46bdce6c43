//! etcd-specific cases: a watch event is only a hint (the grant is read back from the server),
//! a departing waiter leaves no key behind, and connection errors are typed.

mod common;

use std::time::Duration;

use common::EtcdFixture;
use etcd_client::GetOptions;
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName};
use tokio::time::{sleep, timeout, Instant};

fn name(s: &str) -> LockName {
    LockName::new(s).expect("valid name")
}

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::from_secs(20))
}

/// How many keys are queued for `name`.
async fn queued(fx: &EtcdFixture, name: &LockName) -> usize {
    let mut raw = fx.raw().await.expect("raw client");
    let queue = format!("{}/lock/{}/", fx.prefix, name.escaped());
    let got = raw.get(queue.as_str(), Some(GetOptions::new().with_prefix().with_count_only())).await.expect("count");
    usize::try_from(got.count()).unwrap_or(0)
}

async fn until_queued(fx: &EtcdFixture, name: &LockName, n: usize) {
    let end = Instant::now() + Duration::from_secs(10);
    while queued(fx, name).await != n {
        assert!(Instant::now() < end, "{n} keys were not queued within 10 s");
        sleep(Duration::from_millis(20)).await;
    }
}

/// Holder A, waiters B then C: when B leaves, C's watch on B's key fires, but A still holds, so C
/// must read that back and go on waiting; it is granted only when A releases (a grant
/// is confirmed by the server, never inferred from a notification alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_is_only_a_hint() {
    let fx = EtcdFixture::start().await.unwrap();
    let (a, b, c) = (fx.connect().await.unwrap(), fx.connect().await.unwrap(), fx.connect().await.unwrap());
    let lock = name("hint");
    let held = a.acquire(&lock, &opts(3000)).await.unwrap();
    let b_wait = tokio::spawn({
        let (b, lock) = (b.clone(), lock.clone());
        async move { b.acquire(&lock, &opts(3000)).await }
    });
    until_queued(&fx, &lock, 2).await;
    let c_wait = tokio::spawn({
        let (c, lock) = (c.clone(), lock.clone());
        async move { c.acquire(&lock, &opts(3000)).await }
    });
    until_queued(&fx, &lock, 3).await;
    // B leaves: its key goes, which is exactly what C watches.
    b_wait.abort();
    until_queued(&fx, &lock, 2).await;
    sleep(Duration::from_millis(500)).await;
    assert!(!c_wait.is_finished(), "C returned while A still held the lock: {:?}", c_wait.await);
    assert!(held.is_valid(), "A's lease lapsed");
    let holder = a.inspect(&lock).await.unwrap().expect("a holder");
    assert_eq!(holder.token, held.token(), "the server's holder is not A");
    let released = Instant::now();
    held.release().await.unwrap();
    let lease = timeout(Duration::from_secs(5), c_wait).await.expect("C granted after A's release").unwrap().unwrap();
    assert!(released.elapsed() < Duration::from_secs(2), "C was granted {:?} after the release", released.elapsed());
    assert!(lease.token() > holder.token, "C's token {} is not above A's {}", lease.token(), holder.token);
    lease.release().await.unwrap();
    assert_eq!(queued(&fx, &lock).await, 0, "keys left behind");
}

/// A waiter whose wait times out, and one whose future is dropped, take their keys with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn departed_waiters_leave_no_key() {
    let fx = EtcdFixture::start().await.unwrap();
    let (a, b) = (fx.connect().await.unwrap(), fx.connect().await.unwrap());
    let lock = name("departed");
    let held = a.acquire(&lock, &opts(3000)).await.unwrap();
    let short = AcquireOptions::new(Duration::from_secs(3)).wait(Duration::from_millis(300));
    assert!(matches!(b.acquire(&lock, &short).await, Err(LockError::Timeout { .. })));
    assert_eq!(queued(&fx, &lock).await, 1, "the timed-out waiter's key stayed");
    let dropped = timeout(Duration::from_millis(300), b.acquire(&lock, &opts(3000))).await;
    assert!(dropped.is_err(), "the waiter was granted while A held");
    until_queued(&fx, &lock, 1).await;
    assert_eq!(b.try_acquire(&lock, &opts(3000)).await.unwrap().map(|l| l.token()), None);
    assert_eq!(queued(&fx, &lock).await, 1, "a refused try_acquire left its key");
    held.release().await.unwrap();
    assert_eq!(queued(&fx, &lock).await, 0);
}

/// Nothing listens: `Unavailable` within the connect timeout; a bad URL is `Config`.
#[tokio::test]
async fn connection_errors_are_typed() {
    let port = dlock_testkit::process::free_port().unwrap();
    let options = lock_etcd::EtcdOptions { connect_timeout: Duration::from_millis(500), ..Default::default() };
    let t0 = Instant::now();
    let e = lock_etcd::connect(&format!("etcd://127.0.0.1:{port}/x"), options.clone()).await.unwrap_err();
    assert!(matches!(e, LockError::Unavailable { .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(3), "took {:?}", t0.elapsed());
    let e = lock_etcd::connect(&format!("etcds://127.0.0.1:{port}/x"), options.clone()).await.unwrap_err();
    assert!(matches!(e, LockError::Unavailable { .. }), "{e}");
    let e = lock_etcd::connect("etcdss://127.0.0.1:2379/x", options).await.unwrap_err();
    assert!(matches!(e, LockError::Config { .. }), "{e}");
}
