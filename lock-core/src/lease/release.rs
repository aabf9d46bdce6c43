//! Releasing a lease on the server (docs/contract.md §3): attempts never overlap, a failed one is tried
//! again (by the next `release()`, by `Drop`, or in the background after a loss by time), and
//! `Ok` means the server no longer holds the lock for us.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{timeout, Instant};

use super::handle::ReleaseOutcome;
use super::shared::{ReleaseState, Shared};
use crate::backoff::Backoff;
use crate::LockError;

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
mod tests;
