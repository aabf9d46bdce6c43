//! A grant that took long to arrive: renewals count from the request's send, so a slow link
//! does not cost the holder its lease; a grant that needed two round trips is told apart.

use std::time::Duration;

use lock_core::{DistributedLock, Lease, LeaseModel, LockError, LockName};
use tokio::time::Instant;

use super::{fail, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

/// A grant that took long to arrive (a slow link: each round trip about 0.36 ttl) is renewed in
/// time: renewals are due relative to when the request was sent (`valid_until`), not to when
/// the answer came, so the holder keeps its lease for several ttls and nobody else gets in.
///
/// A grant that needed two round trips (a backend's fallback under load, for instance etcd's
/// transaction reaching the server before its lease grant) leaves less than one round trip of
/// validity: no renewal can come back in time, and losing that lease is right. Such a grant is
/// released and the scenario tried again on a fresh name, up to three times in all;
/// a backend whose grants all take two round trips fails.
pub async fn slow_grant_renewed_in_time(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "slow_grant_renewed_in_time").await?;
    if cx.caps.lease_model == LeaseModel::PerSession {
        return Err(CaseError::NotApplicable(
            "per-session leases: validity follows the session's heartbeats, not per-lock renewals".into(),
        ));
    }
    let (holder, link) = cx.linked().await?;
    let other = cx.client().await?;
    let ttl = cx.ttl();
    let mut slow = Vec::new();
    for attempt in 0..SLOW_GRANT_TRIES {
        let name = cx.name(&format!("slow-{attempt}"))?;
        link.set_latency(ttl * 18 / 100).await;
        let outcome = slow_grant(&*holder, &*other, &name, &cx).await;
        link.set_latency(Duration::ZERO).await;
        // Released over the fast link again, whatever the grant's check said.
        let (lease, checked) = outcome?;
        let _ = lease.release().await;
        match checked? {
            SlowGrant::Held(took) => {
                let retried = if slow.is_empty() {
                    String::new()
                } else {
                    format!(" (after slower grants of {slow:?} ms, released unchecked)")
                };
                return Ok(format!("grant took {} ms of a {} ms ttl; held 3 ttls{retried}", ms(took), ms(ttl)));
            }
            SlowGrant::TwoRoundTrips(took) => slow.push(ms(took)),
        }
    }
    fail!(
        "every grant over the slow link took more than one and a half round trips ({slow:?} ms of a {} ms ttl, \
         round trip {} ms): none left time to renew",
        ms(ttl),
        ms(ttl * 36 / 100)
    )
}

/// How many slow grants [`slow_grant_renewed_in_time`] tries before it fails.
const SLOW_GRANT_TRIES: usize = 3;

/// How one grant over the slow link went.
enum SlowGrant {
    /// Granted after this long and held for three ttls.
    Held(Duration),
    /// Granted after more than one and a half round trips (so under one is left of the ttl):
    /// released unchecked.
    TwoRoundTrips(Duration),
}

/// `holder` (behind the slow link) acquires `name` and, unless that took two round trips, keeps
/// it for three ttls while `other` tries to take it; the lease, for the caller to release once
/// the link is fast again, and how the check went.
async fn slow_grant(
    holder: &dyn DistributedLock,
    other: &dyn DistributedLock,
    name: &LockName,
    cx: &Ctx<'_>,
) -> Result<(Lease, Result<SlowGrant, CaseError>), CaseError> {
    let ttl = cx.ttl();
    let t0 = Instant::now();
    let lease = match holder.acquire(name, &cx.opts(ttl * 4).request_timeout(ttl)).await {
        Ok(l) => l,
        // A backend whose own per-request timeout is below this round trip (Redlock's per-node
        // timeout is a small share of the ttl) never makes a grant this slow.
        Err(e @ LockError::Unavailable { .. }) => {
            return Err(CaseError::NotApplicable(format!(
                "the backend gives up on requests slower than about {} ms, so a grant this slow cannot happen ({e})",
                ms(ttl * 36 / 100)
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let took = t0.elapsed();
    if took > ttl * 54 / 100 {
        return Ok((lease, Ok(SlowGrant::TwoRoundTrips(took))));
    }
    let held = hold_slow_grant(&lease, other, name, cx, (t0, took)).await;
    Ok((lease, held.map(|()| SlowGrant::Held(took))))
}

/// Keeps `lease` (granted `took` after `t0` over the slow link) for three ttls: it must not be
/// lost, and `other` must not get `name` meanwhile.
async fn hold_slow_grant(
    lease: &Lease,
    other: &dyn DistributedLock,
    name: &LockName,
    cx: &Ctx<'_>,
    (t0, took): (Instant, Duration),
) -> Result<(), CaseError> {
    let ttl = cx.ttl();
    let end = Instant::now() + ttl * 3;
    while Instant::now() < end {
        tokio::time::sleep(ttl / 4).await;
        if lease.lost().is_fired() {
            fail!(
                "a grant that took {} ms (ttl {} ms) was lost {} ms after it came: {:?}",
                ms(took),
                ms(ttl),
                ms(t0.elapsed().saturating_sub(took)),
                lease.lost().reason()
            );
        }
        if let Some(stolen) = other.try_acquire(name, &cx.opts(ttl)).await? {
            fail!("another client acquired (token {}) while the slow holder renewed", stolen.token());
        }
    }
    Ok(())
}
