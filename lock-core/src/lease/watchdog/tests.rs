//! The watchdog's timing rules (when a renewal is due, how early it may start) and a lease
//! whose requests are slow renewed in time.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::*;
use crate::lease::{LeaseGrant, LeaseHandle, ReleaseOutcome, RenewOutcome};
use crate::{AcquireOptions, FencingToken, Lease, LockError, LockName, OwnerId};

#[test]
fn renewals_start_at_most_a_sixteenth_of_their_cadence_and_50_ms_early() {
    let ms = Duration::from_millis;
    // (cadence, slack)
    for (every, slack) in
        [(ms(160), ms(10)), (ms(3_333), MAX_SLACK), (Duration::ZERO, Duration::ZERO), (Duration::MAX, MAX_SLACK)]
    {
        assert_eq!(renewal_slack(every), slack, "cadence {every:?}");
    }
}

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
