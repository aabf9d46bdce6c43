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

/// The lease a key of `name` is attached to (the queue's oldest key), with its create revision.
async fn holder_lease(fx: &EtcdFixture, name: &LockName) -> Option<(i64, i64)> {
    let mut raw = fx.raw().await.expect("raw client");
    let queue = format!("{}/lock/{}/", fx.prefix, name.escaped());
    let got = raw.get(queue.as_str(), Some(GetOptions::new().with_prefix())).await.expect("range");
    got.kvs().first().map(|kv| (kv.lease(), kv.create_revision()))
}

/// A release leaves its lease to the client's next acquisition of the same ttl (the free path
/// then grants no lease). The reused lease is a fresh one for its new holder: its ttl restarts
/// with the acquire, so `valid_until` is a whole ttl (less drift) from the call, however long the
/// lease sat unused; and it carries only the new key (the released one is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_serves_the_next_acquisition_for_a_whole_ttl() {
    let fx = EtcdFixture::start().await.unwrap();
    let c = fx.connect().await.unwrap();
    let (first, second) = (name("spare-1"), name("spare-2"));
    let o = AcquireOptions::new(Duration::from_secs(4));
    let held = c.try_acquire(&first, &o).await.unwrap().expect("free");
    let (lease, rev) = holder_lease(&fx, &first).await.expect("the holder's key");
    held.release().await.unwrap();
    assert_eq!(holder_lease(&fx, &first).await, None, "the released key stayed");
    // Half a second of the spare's 4 s ttl passes unused.
    sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    let again = c.try_acquire(&second, &o).await.unwrap().expect("free");
    let (reused, rev2) = holder_lease(&fx, &second).await.expect("the new holder's key");
    assert_eq!(reused, lease, "the next acquisition granted a new lease instead of the spare");
    assert!(rev2 > rev && again.token().0 == rev2.unsigned_abs(), "token {} / revision {rev2}", again.token());
    let short = (t0 + o.ttl - o.drift()).saturating_duration_since(again.valid_until());
    assert!(
        short.is_zero(),
        "valid_until is {short:?} short of t0 + ttl - drift: the reused lease's ttl was not restarted"
    );
    // Another ttl rounds to another number of seconds: a lease of its own.
    let other = c.try_acquire(&first, &AcquireOptions::new(Duration::from_secs(6))).await.unwrap().expect("free");
    assert_ne!(holder_lease(&fx, &first).await.map(|(l, _)| l), Some(lease));
    other.release().await.unwrap();
    again.release().await.unwrap();
    assert_eq!(queued(&fx, &second).await, 0);
}

/// A holder that renews after its key was deleted behind its back (an operator) loses the lease
/// but leaves the lease itself alone: the key is gone, and revoking would also take whatever key
/// the lease carries next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_key_is_not_revoked_by_the_renewal() {
    let fx = EtcdFixture::start().await.unwrap();
    let c = fx.connect().await.unwrap();
    let n = name("lost-key");
    let o = AcquireOptions::new(Duration::from_secs(4)).auto_renew(false);
    let held = c.try_acquire(&n, &o).await.unwrap().expect("free");
    let (lease, _) = holder_lease(&fx, &n).await.expect("the holder's key");
    let mut raw = fx.raw().await.unwrap();
    let queue = format!("{}/lock/{}/", fx.prefix, n.escaped());
    raw.delete(queue.as_str(), Some(etcd_client::DeleteOptions::new().with_prefix())).await.unwrap();
    assert!(held.renew().await.is_err(), "a renewal found the deleted key");
    let ttl = raw.lease_time_to_live(lease, None).await.unwrap().ttl();
    assert!(ttl > 0, "the renewal revoked the lease (ttl {ttl})");
}
