//! Releasing a lease on the server (docs/contract.md §3): attempts never overlap, a failed one is tried
//! again (by the next `release()`, by `Drop`, or in the background after a loss by time), and
//! `Ok` means the server no longer holds the lock for us.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{timeout, Instant};

use crate::lease::Shared;
use crate::{Backoff, LockError, ReleaseOutcome};

/// Where a lease's release stands on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseState {
    /// No release was sent.
    NotSent,
    /// A release was sent but not answered (it failed, timed out, or is in flight): it may or
    /// may not have been applied.
    Unknown,
    /// The server answered: the lock is no longer held for us.
    Done,
}

/// One owner-checked release attempt, unless an earlier one was answered already.
pub(crate) async fn release_once(shared: Arc<Shared>) -> Result<(), LockError> {
    let mut state = shared.release_state.lock().await;
    if *state == ReleaseState::Done {
        return if shared.lost.is_fired() { Err(shared.lost_error()) } else { Ok(()) };
    }
    let retry = *state == ReleaseState::Unknown;
    *state = ReleaseState::Unknown;
    let result = match held_for(&shared, Instant::now()) {
        Some(left) => timeout(shared.request_timeout, shared.handle.release_after(left)).await,
        None => timeout(shared.request_timeout, shared.handle.release()).await,
    };
    match result {
        Ok(Ok(ReleaseOutcome::Released)) => {
            *state = ReleaseState::Done;
            if shared.lost.is_fired() {
                return Err(shared.lost_error());
            }
            Ok(())
        }
        Ok(Ok(ReleaseOutcome::NotOwner)) => {
            *state = ReleaseState::Done;
            // After an attempt whose outcome is unknown, "not ours" is what that attempt leaves
            // behind when it was applied: a clean release, not a loss.
            if retry && !shared.lost.is_fired() {
                return Ok(());
            }
            shared.declare_lost("release found another owner or no entry");
            Err(shared.lost_error())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(LockError::unavailable(
            "lease",
            format!(
                "release did not answer within {:?}; call release() again (dropping the lease retries in the \
                 background), or the lock frees itself when its ttl ends",
                shared.request_timeout
            ),
        )),
    }
}

/// A release polled in place by its caller, and moved to a task of `runtime` if the caller
/// drops it unfinished (a `select!`, an aborted task): clients drop a queued command whose
/// caller is gone, so a release must not die with its caller, yet spawning a task for every
/// release cost a task and a cross-thread wake-up per acquisition on the happy path.
pub(crate) struct Detached<T: Send + 'static> {
    future: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
    runtime: tokio::runtime::Handle,
}

impl<T: Send + 'static> Detached<T> {
    pub(crate) fn new(future: impl Future<Output = T> + Send + 'static, runtime: tokio::runtime::Handle) -> Self {
        Detached { future: Some(Box::pin(future)), runtime }
    }
}

impl<T: Send + 'static> Future for Detached<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(future) = self.future.as_mut() else {
            // Polled after it finished: a caller bug, but no reason to panic in a library.
            return Poll::Pending;
        };
        let out = future.as_mut().poll(cx);
        if out.is_ready() {
            self.future = None;
        }
        out
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        if let Some(future) = self.future.take() {
            self.runtime.spawn(future);
        }
    }
}

/// Below this, `hold_at_least` frees at once: a shorter server-side lease is not worth a request.
const MIN_HOLD_LEFT: Duration = Duration::from_millis(2);

/// How long the lock must stay taken after a release now (`hold_at_least`), if at all.
fn held_for(shared: &Shared, now: Instant) -> Option<Duration> {
    if shared.hold_waived.load(std::sync::atomic::Ordering::SeqCst) {
        return None;
    }
    let left = shared.hold_until?.saturating_duration_since(now);
    // Rounded up to the millisecond: servers keep millisecond expiries, never a shorter hold.
    let millis = u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    (left >= MIN_HOLD_LEFT).then(|| Duration::from_millis(millis))
}

/// Until when a background release is worth sending: past it, whatever the server kept for us
/// has expired on its own (the last request sent before `valid_until` may have been applied up
/// to a request timeout later, for one more ttl).
fn give_up_at(shared: &Shared, now: Instant) -> Instant {
    let bound = shared
        .valid_until()
        .max(now)
        .checked_add(shared.ttl)
        .and_then(|t| t.checked_add(shared.request_timeout))
        .unwrap_or(now);
    bound.max(now.checked_add(shared.request_timeout).unwrap_or(now))
}

/// Sends the owner-checked release until the server answers, or until the lease has surely
/// expired on the server. Runs in the background (from `Drop`, or after a loss by time).
pub(crate) async fn release_until_answered(shared: Arc<Shared>) {
    let end = give_up_at(&shared, Instant::now());
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        match release_once(Arc::clone(&shared)).await {
            Ok(()) | Err(LockError::Lost { .. }) => return,
            Err(e) => {
                let now = Instant::now();
                if now >= end {
                    tracing::warn!(lock = %shared.name, error = %e, "background release gave up; the ttl frees the lock");
                    return;
                }
                tracing::debug!(lock = %shared.name, error = %e, "background release failed; retrying");
                tokio::time::sleep(backoff.next_delay().min(end - now)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::task::Poll;

    use async_trait::async_trait;

    use super::*;
    use crate::{AcquireOptions, FencingToken, Lease, LeaseGrant, LeaseHandle, LockName, OwnerId, RenewOutcome};

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
}
