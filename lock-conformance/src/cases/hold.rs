//! Run-once jobs (`AcquireOptions::hold_at_least`, docs/contract.md §3): a lease released or
//! dropped before `t0 + d` keeps the lock taken until then — on per-lock backends by a shortened
//! server-side lease, on ZooKeeper by a node deleted at `t0 + d` — and a lease released after
//! `t0 + d` frees it at once.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{DistributedLock, LockName};
use tokio::time::Instant;

use super::{ensure, fail, ms, CaseResult, Ctx};
use crate::Fixture;

/// Polls with `try_acquire` until granted, for at most `within`; the instant the grant came.
async fn poll_until_granted(
    cx: &Ctx<'_>,
    client: &Arc<dyn DistributedLock>,
    name: &LockName,
    within: Duration,
) -> Result<Option<Instant>, super::CaseError> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Some(l) = client.try_acquire(name, &cx.opts(Duration::ZERO)).await? {
            let at = Instant::now();
            l.release().await?;
            return Ok(Some(at));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(None)
}

/// A holder takes the lock with `hold_at_least(d)` and lets go at once: by `release()` with
/// `d` longer than its ttl (the lease outlives its last renewal), by dropping it with `d`
/// shorter than its ttl (the lease is cut short). Another client gets the lock no earlier than
/// `t0 + d` (`t0` taken before the holder's acquire), and soon after: a waiting `acquire`
/// within the backend's wake bound, a polling `try_acquire` within its poll, and before the
/// ttl ends when dropped.
pub async fn hold_at_least_early_release(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "hold_at_least_early_release").await?;
    let ttl = cx.ttl();
    let [holder, other] = cx.clients().await?;
    let wake = match cx.caps.wake {
        lock_core::WakeMethod::Poll => ttl + Duration::from_millis(300),
        _ => ttl / 2 + Duration::from_millis(200),
    };
    let mut detail = Vec::new();
    for (how, d) in [("release", ttl * 3 / 2), ("drop", ttl / 2)] {
        let name = cx.name(how)?;
        let t0 = Instant::now();
        let lease = holder.acquire(&name, &cx.opts(ttl).hold_at_least(d)).await?;
        let got = if how == "release" {
            lease.release().await?;
            let waiter = other.acquire(&name, &cx.opts(d + wake * 2)).await?;
            let at = Instant::now();
            waiter.release().await?;
            at
        } else {
            drop(lease);
            match poll_until_granted(&cx, &other, &name, d + wake * 2).await? {
                Some(at) => at,
                None => fail!(
                    "{how}: the lock was still taken {} ms after t0 (hold_at_least {} ms)",
                    ms(t0.elapsed()),
                    ms(d)
                ),
            }
        };
        let after = got - t0;
        // Dropped with `d` half the ttl: free well before the ttl ends, or the store did not
        // cut the lease short (a store whose renewals never shorten a lease used one for it).
        ensure!(
            how == "release" || after < ttl,
            "{how}: the lock was free only {} ms after t0: the lease ran to its ttl ({} ms), not to \
             hold_at_least ({} ms)",
            ms(after),
            ms(ttl),
            ms(d)
        );
        ensure!(
            after >= d,
            "{how}: another client got the lock {} ms after t0, before hold_at_least ({} ms) ended",
            ms(after),
            ms(d)
        );
        ensure!(
            after <= d + wake,
            "{how}: the lock was free only {} ms after t0, {} ms past hold_at_least (bound {} ms)",
            ms(after),
            ms(after - d),
            ms(wake)
        );
        detail.push(format!("{how}: free {} ms after t0 (hold_at_least {} ms)", ms(after), ms(d)));
    }
    Ok(detail.join("; "))
}

/// Released after `t0 + d`, a lease frees the lock at once, as without `hold_at_least`.
pub async fn hold_at_least_late_release(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "hold_at_least_late_release").await?;
    let ttl = cx.ttl();
    let [holder, other] = cx.clients().await?;
    let name = cx.name("late")?;
    let d = ttl / 4;
    let lease = holder.acquire(&name, &cx.opts(ttl).hold_at_least(d)).await?;
    tokio::time::sleep(d + Duration::from_millis(50)).await;
    lease.release().await?;
    match other.try_acquire(&name, &cx.opts(Duration::ZERO)).await? {
        Some(l) => l.release().await?,
        None => {
            fail!("released {} ms after hold_at_least ended, the lock was still taken", ms(Duration::from_millis(50)))
        }
    }
    Ok(format!("free at once after a release past hold_at_least ({} ms)", ms(d)))
}
