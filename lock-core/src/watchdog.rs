//! The lease watchdog: renews on schedule, declares the lease lost when a renewal finds another
//! owner or when `valid_until` passes without a successful renewal.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use crate::lease::Shared;
use crate::LockError;

/// When the next renewal is due, given the lease's current `valid_until` and the validity one
/// successful request gives (`ttl − drift`): `every` after the instant that request was sent
/// (`valid_until − validity`), but never later than halfway through what is left of the
/// validity, and never in the past. Counting from the request, not from when its answer came,
/// keeps a slow grant (two Redlock rounds, a slow link) from being lost right after it came.
pub(crate) fn renewal_due(now: Instant, valid_until: Instant, validity: Duration, every: Duration) -> Instant {
    let sent = valid_until.checked_sub(validity).unwrap_or(now);
    let by_cadence = sent.checked_add(every).unwrap_or(valid_until);
    let half_left = now.checked_add(valid_until.saturating_duration_since(now) / 2).unwrap_or(valid_until);
    by_cadence.min(half_left).max(now)
}

/// How long to wait after a failed renewal before the next try (well before `valid_until`).
fn retry_gap(every: Duration) -> Duration {
    (every / 4).clamp(Duration::from_millis(5), Duration::from_millis(250))
}

/// Renews every `renew_every` (if set) until stopped; declares the lease lost when a renewal
/// finds another owner or when `valid_until` passes without a successful renewal.
pub(crate) async fn watchdog(shared: Arc<Shared>, renew_every: Option<Duration>, hold_until: Option<Instant>) {
    let validity = shared.ttl.saturating_sub(shared.drift);
    // After a failed renewal: not before this instant.
    let mut not_before: Option<Instant> = None;
    loop {
        let deadline = shared.valid_until();
        let renew_at = renew_every.and_then(|every| {
            let due = renewal_due(Instant::now(), deadline, validity, every);
            let at = not_before.map_or(due, |nb| due.max(nb));
            match hold_until {
                Some(cap) if at >= cap => None,
                _ => Some(at),
            }
        });
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = shared.lost.fired() => return,
            _ = sleep_until(deadline) => {
                if shared.released.load(Ordering::SeqCst) {
                    return;
                }
                if Instant::now() >= shared.valid_until() {
                    shared.expire_by_time();
                    return;
                }
            }
            _ = sleep_until(renew_at.unwrap_or(deadline)), if renew_at.is_some() => {
                let every = renew_every.unwrap_or(shared.ttl / 3);
                let result = tokio::select! {
                    _ = shared.stop.cancelled() => return,
                    r = shared.renew_once() => r,
                };
                not_before = match result {
                    Ok(()) => None,
                    Err(LockError::Lost { .. }) => return,
                    Err(e) => {
                        tracing::warn!(lock = %shared.name, error = %e, "renewal failed; retrying until valid_until");
                        Instant::now().checked_add(retry_gap(every))
                    }
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_due_table() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // (valid_until − now, validity, every) → due − now
        let table: &[(Duration, Duration, Duration, Duration)] = &[
            // A fresh grant answered at once: every ttl/3 after the request.
            (s(29), s(29), s(10), s(10)),
            // A slow grant: the request left 4 s ago, so the renewal is due 6 s from now…
            (s(25), s(29), s(10), s(6)),
            // …or now, when more than `every` has passed since the request.
            (s(10), s(29), s(10), s(0)),
            // A cadence near the validity is cut to half of what is left.
            (s(29), s(29), s(28), ms(14_500)),
            // Extremes never panic.
            (s(29), s(29), Duration::MAX, ms(14_500)),
            (s(29), Duration::MAX, s(10), s(10)),
            // Past valid_until: now (the renewal then reports the loss).
            (s(0), s(29), s(10), s(0)),
        ];
        for (i, &(left, validity, every, want)) in table.iter().enumerate() {
            let got = renewal_due(now, now + left, validity, every) - now;
            assert_eq!(got, want, "row {i}: left {left:?}, validity {validity:?}, every {every:?}");
        }
    }
}

#[cfg(test)]
mod slow_grant {
    use std::sync::Arc;

    use async_trait::async_trait;

    use crate::{
        AcquireOptions, FencingToken, Lease, LeaseGrant, LeaseHandle, LockError, LockName, OwnerId, ReleaseOutcome,
        RenewOutcome,
    };

    use super::*;

    /// Every request takes 200 ms.
    struct SlowLink;

    #[async_trait]
    impl LeaseHandle for SlowLink {
        async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(RenewOutcome::Renewed)
        }
        async fn release(&self) -> Result<ReleaseOutcome, LockError> {
            Ok(ReleaseOutcome::Released)
        }
    }

    #[tokio::test]
    async fn a_slow_grant_is_renewed_in_time() {
        // The grant's request left 240 ms before its answer came: valid_until is 354 ms away.
        // A first renewal at answer + ttl/3 (200 ms) would come back at 400 ms, too late.
        let opts = AcquireOptions::new(Duration::from_millis(600));
        let started = Instant::now() - Duration::from_millis(240);
        let name = LockName::new("slow-grant").expect("valid");
        let lease =
            Lease::new(LeaseGrant::new(name, FencingToken(1), OwnerId::random(), started, Arc::new(SlowLink)), &opts);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!lease.lost().is_fired(), "a slow grant was lost: {:?}", lease.lost().reason());
        assert!(lease.is_valid());
    }
}
