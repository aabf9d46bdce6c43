//! docs/contract.md §3: `valid_until` never exceeds what the server keeps for us. For per-lock leases that
//! is the ttl the server stores; for per-session leases (ZooKeeper) it is the session timeout
//! after the last confirmed contact, whatever ttl the caller asked for. Because `is_valid()`
//! compares the clock with `valid_until`, this bound is also what makes `is_valid()` right
//! after a process stall, without any background task having run.

use std::time::Duration;

use lock_core::{AcquireOptions, Lease, LeaseModel};
use tokio::time::Instant;

use super::{ensure, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

/// With a ttl well above [`Fixture::expiry_bound`], `valid_until − t0` stays within the
/// server's bound (the ttl for per-lock leases, the expiry bound for per-session ones), for a
/// fresh grant and after a renewal, for every lock kind the backend declares.
pub async fn validity_within_server_bound(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "validity_within_server_bound").await?;
    let ttl = (cx.expiry() * 4).min(cx.caps.max_ttl).max(cx.ttl());
    let bound = match cx.caps.lease_model {
        LeaseModel::PerSession => fx.expiry_bound(),
        _ => ttl,
    };
    let opts = AcquireOptions::new(ttl).wait(cx.expiry() * 2).request_timeout(cx.request_timeout());
    let mut details = Vec::new();

    let c = cx.client().await?;
    let name = cx.name("exclusive")?;
    let t0 = Instant::now();
    let lease = c.acquire(&name, &opts).await?;
    details.push(check("exclusive", &lease, t0, bound).await?);
    lease.release().await?;

    if cx.caps.rw_lock {
        let Some(rw) = fx.rw_client().await.map_err(|e| CaseError::Skipped(format!("no rw client: {e}")))? else {
            return Err(CaseError::Failed("the backend declares rw_lock but the fixture offers no rw client".into()));
        };
        let name = cx.name("rw")?;
        let t0 = Instant::now();
        let read = rw.acquire_read(&name, &opts).await?;
        details.push(check("read", &read, t0, bound).await?);
        read.release().await?;
        let t0 = Instant::now();
        let write = rw.acquire_write(&name, &opts).await?;
        details.push(check("write", &write, t0, bound).await?);
        write.release().await?;
    }
    if cx.caps.semaphore {
        let Some(sem) =
            fx.semaphore_client().await.map_err(|e| CaseError::Skipped(format!("no semaphore client: {e}")))?
        else {
            return Err(CaseError::Failed(
                "the backend declares semaphore but the fixture offers no semaphore client".into(),
            ));
        };
        let name = cx.name("sem")?;
        let t0 = Instant::now();
        let permit = sem.acquire_permit(&name, 2, &opts).await?;
        details.push(check("permit", &permit, t0, bound).await?);
        permit.release().await?;
    }
    Ok(format!("ttl {} ms, server bound {} ms: {}", ms(ttl), ms(bound), details.join(", ")))
}

/// Checks one lease right after its grant (`t0` taken before the acquire call) and after an
/// explicit renewal.
async fn check(kind: &str, lease: &Lease, t0: Instant, bound: Duration) -> Result<String, CaseError> {
    let granted = lease.valid_until().saturating_duration_since(t0);
    ensure!(
        granted <= bound,
        "{kind}: valid_until is t0 + {} ms, beyond what the server keeps for us ({} ms): after a stall \
         is_valid() would claim a lock the server may already have given away",
        ms(granted),
        ms(bound)
    );
    ensure!(lease.is_valid(), "{kind}: a fresh lease is not valid");
    lease.renew().await?;
    let renewed = Instant::now();
    let after = lease.valid_until().saturating_duration_since(renewed);
    ensure!(
        after <= bound,
        "{kind}: after a renewal valid_until is {} ms ahead, beyond the server's bound ({} ms)",
        ms(after),
        ms(bound)
    );
    ensure!(lease.is_valid(), "{kind}: the lease is not valid after a renewal");
    Ok(format!("{kind} {} ms / renewed {} ms", ms(granted), ms(after)))
}
