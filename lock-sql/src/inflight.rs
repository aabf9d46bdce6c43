//! Acquire statements that may still commit after their caller stopped waiting for them.
//!
//! An acquire attempt that was cancelled (or timed out, or lost its connection) can still be
//! running on the server: waiting for a row lock, say. The owner-checked release that cleans up
//! after it may then reach the database first, find nothing, and the grant commits afterwards:
//! a lock nobody holds, taken until its ttl. So such an attempt is remembered with the moment
//! after which it can no longer commit (the server bounds every statement), and a release of
//! that owner is repeated once that moment has passed. A refused attempt that lands late
//! re-queues its departed waiter the same way, so the waiter's leave is repeated too (each
//! clean-up takes the record for itself: [`Inflight::take`], [`Inflight::take_leave`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use lock_core::OwnerId;
use tokio::time::{timeout, Instant};

/// When [`again_later`] repeats a clean-up before the attempt's bound: a statement overtaken in
/// transit lands within milliseconds.
const REPEAT_SOON: [Duration; 2] = [Duration::from_millis(20), Duration::from_millis(200)];

/// Owners with an attempt that may still commit, and until when.
#[derive(Default)]
pub(crate) struct Inflight {
    map: Mutex<HashMap<u128, Instant>>,
    /// The same, for the queue leave of an abandoned wait.
    leave: Mutex<HashMap<u128, Instant>>,
}

/// One attempt in flight; [`Attempt::finished`] when its outcome is known.
pub(crate) struct Attempt<'a> {
    inflight: &'a Inflight,
    owner: u128,
    until: Instant,
    finished: bool,
}

impl Inflight {
    /// An attempt of `owner` starts now; the server ends its statements within `bound`.
    pub(crate) fn begin(&self, owner: OwnerId, bound: Duration) -> Attempt<'_> {
        Attempt { inflight: self, owner: owner.as_u128(), until: Instant::now() + bound, finished: false }
    }

    /// When the last unfinished attempt of `owner` can no longer commit, if that is still ahead
    /// (forgotten either way).
    pub(crate) fn take(&self, owner: OwnerId) -> Option<Instant> {
        let until = self.map.lock().unwrap_or_else(|e| e.into_inner()).remove(&owner.as_u128())?;
        (until > Instant::now()).then_some(until)
    }

    /// [`Inflight::take`] for the leave of an abandoned wait, apart from the release's.
    pub(crate) fn take_leave(&self, owner: OwnerId) -> Option<Instant> {
        let until = self.leave.lock().unwrap_or_else(|e| e.into_inner()).remove(&owner.as_u128())?;
        (until > Instant::now()).then_some(until)
    }
}

impl Attempt<'_> {
    /// The attempt ended with an answer from the server: nothing of it is left running.
    pub(crate) fn finished(mut self) {
        self.finished = true;
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let now = Instant::now();
        for map in [&self.inflight.map, &self.inflight.leave] {
            let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
            // Owners whose attempt ended with an error the caller does not clean up after are
            // never taken: forget every entry whose statement can no longer commit anyway.
            map.retain(|_, until| *until > now);
            let until = map.entry(self.owner).or_insert(self.until);
            *until = (*until).max(self.until);
        }
    }
}

/// Runs the clean-up `op` again in the background soon and once more at `until` (when an
/// attempt in flight can no longer commit), each bounded by `bound`, stopping at the first that
/// answers `true`. Soon: a statement that merely arrived after the first clean-up, on another
/// connection, is the usual case (the conformance case `release_cancelled` saw a grant land
/// behind its release and stay taken for 2.8–3 s until the last repeat).
pub(crate) fn again_later<F, Fut>(until: Instant, bound: Duration, label: &'static str, op: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<bool, sqlx::Error>> + Send + 'static,
{
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    rt.spawn(async move {
        let now = tokio::time::Instant::now();
        let early = REPEAT_SOON.iter().map(|d| now + *d).filter(|at| *at < until);
        for at in early.chain(std::iter::once(until)) {
            tokio::time::sleep_until(at).await;
            match timeout(bound, op()).await {
                Ok(Ok(true)) => {
                    tracing::debug!(backend = label, "freed a grant that committed after its acquire was abandoned");
                    return;
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::debug!(backend = label, error = %e, "repeated clean-up failed"),
                Err(_) => tracing::debug!(backend = label, "repeated clean-up timed out"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_unfinished_attempts_are_remembered_until_their_bound() {
        let inflight = Inflight::default();
        let (a, b) = (OwnerId::random(), OwnerId::random());
        inflight.begin(a, Duration::from_secs(5)).finished();
        assert_eq!(inflight.take(a), None, "a finished attempt leaves nothing running");
        drop(inflight.begin(b, Duration::from_secs(5)));
        assert!(inflight.take(b).is_some_and(|t| t > Instant::now() + Duration::from_secs(4)));
        assert_eq!(inflight.take(b), None, "taken once");
        assert!(inflight.take_leave(b).is_some(), "the leave takes its own record");
        assert_eq!(inflight.take_leave(b), None, "taken once");
        drop(inflight.begin(b, Duration::ZERO));
        assert_eq!(inflight.take(b), None, "already past its bound");
        drop(inflight.begin(a, Duration::ZERO));
        drop(inflight.begin(b, Duration::from_secs(5)));
        assert_eq!(inflight.map.lock().unwrap().len(), 1, "entries past their bound are pruned");
    }
}
