//! Releases against a fake server that is slow, unreachable, or loses its answers: retried,
//! cancel-safe, and never a loss when our own earlier release was applied.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;

use tokio::time::Instant;

use crate::lease::{LeaseGrant, LeaseHandle, ReleaseOutcome, RenewOutcome};
use crate::{AcquireOptions, FencingToken, Lease, LockError, LockName, OwnerId};

/// A server holding one lease for us: reachable or not, with some latency per request.
struct FakeServer {
    held: AtomicBool,
    reachable: AtomicBool,
    latency: Duration,
    releases_sent: AtomicUsize,
    /// The release is applied but its answer never arrives.
    lose_answer: AtomicBool,
}

impl FakeServer {
    fn new(latency: Duration) -> Arc<Self> {
        Arc::new(FakeServer {
            held: AtomicBool::new(true),
            reachable: AtomicBool::new(true),
            latency,
            releases_sent: AtomicUsize::new(0),
            lose_answer: AtomicBool::new(false),
        })
    }
    fn check(&self) -> Result<(), LockError> {
        if self.reachable.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(LockError::unavailable("fake", "unreachable"))
        }
    }
}

#[async_trait]
impl LeaseHandle for FakeServer {
    async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
        tokio::time::sleep(self.latency).await;
        self.check()?;
        Ok(if self.held.load(Ordering::SeqCst) { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.releases_sent.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        self.check()?;
        let was_held = self.held.swap(false, Ordering::SeqCst);
        if self.lose_answer.load(Ordering::SeqCst) {
            return Err(LockError::unavailable("fake", "the answer was lost"));
        }
        Ok(if was_held { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }
}

fn lease(server: &Arc<FakeServer>, opts: &AcquireOptions) -> Lease {
    let grant = LeaseGrant::new(
        LockName::new("release-test").expect("valid"),
        FencingToken(1),
        OwnerId::random(),
        Instant::now(),
        Arc::clone(server) as Arc<dyn LeaseHandle>,
    );
    Lease::new(grant, opts)
}

/// A lease of `ttl` on a fresh fake server that then stops answering.
fn cut_off_holder(ttl: Duration) -> (Arc<FakeServer>, Lease) {
    let server = FakeServer::new(Duration::ZERO);
    let lease = lease(&server, &AcquireOptions::new(ttl));
    server.reachable.store(false, Ordering::SeqCst);
    (server, lease)
}

/// Whether `server` lets the lease go within a second.
async fn freed_soon(server: &FakeServer) -> bool {
    eventually(|| !server.held.load(Ordering::SeqCst)).await
}

async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

#[tokio::test]
async fn a_release_after_a_failed_release_contacts_the_server() {
    let (server, lease) = cut_off_holder(Duration::from_secs(30));
    assert!(matches!(lease.release().await, Err(LockError::Unavailable { .. })));
    assert!(server.held.load(Ordering::SeqCst));
    server.reachable.store(true, Ordering::SeqCst);
    lease.release().await.expect("the retried release succeeds");
    assert!(!server.held.load(Ordering::SeqCst), "Ok was answered while the server still holds the lock");
    assert_eq!(server.releases_sent.load(Ordering::SeqCst), 2);
    // Answered once: later calls do not go to the server again.
    lease.release().await.expect("idempotent");
    assert_eq!(server.releases_sent.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_retry_that_finds_our_first_release_applied_is_ok_not_lost() {
    let server = FakeServer::new(Duration::ZERO);
    let lease = lease(&server, &AcquireOptions::new(Duration::from_secs(30)));
    server.lose_answer.store(true, Ordering::SeqCst);
    assert!(matches!(lease.release().await, Err(LockError::Unavailable { .. })));
    server.lose_answer.store(false, Ordering::SeqCst);
    lease.release().await.expect("our own applied release is not a loss");
    assert!(!lease.lost().is_fired());
}

#[tokio::test]
async fn a_cancelled_release_still_reaches_the_server() {
    for polls in 1..4 {
        let server = FakeServer::new(Duration::from_millis(20));
        let lease = lease(&server, &AcquireOptions::new(Duration::from_secs(30)));
        {
            let mut fut = Box::pin(lease.release());
            for _ in 0..polls {
                if let Poll::Ready(r) = futures::poll!(&mut fut) {
                    panic!("a release with 20 ms latency finished at once: {r:?}");
                }
                tokio::task::yield_now().await;
            }
        }
        drop(lease);
        assert!(freed_soon(&server).await, "release cancelled after {polls} polls never reached the server");
    }
}

#[tokio::test]
async fn drop_after_a_failed_release_retries_it() {
    let (server, lease) = cut_off_holder(Duration::from_secs(30));
    assert!(lease.release().await.is_err());
    drop(lease);
    tokio::time::sleep(Duration::from_millis(30)).await;
    server.reachable.store(true, Ordering::SeqCst);
    assert!(freed_soon(&server).await, "dropping a lease whose release failed left it held");
}

#[tokio::test]
async fn a_lease_lost_by_time_is_released_once_the_server_answers() {
    let (server, lease) = cut_off_holder(Duration::from_millis(150));
    tokio::time::timeout(Duration::from_secs(2), lease.lost().fired()).await.expect("lost by time");
    assert!(server.held.load(Ordering::SeqCst));
    server.reachable.store(true, Ordering::SeqCst);
    assert!(freed_soon(&server).await, "a lease lost by time was never released on the server");
    assert!(matches!(lease.release().await, Err(LockError::Lost { .. })));
}
