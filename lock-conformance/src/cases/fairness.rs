//! Fairness of a backend that declares `fifo`: nobody overtakes a queued waiter (not the
//! releaser coming straight back, not a newcomer's `try_acquire`), and a queued waiter that
//! vanished holds the others back only for a bounded time.

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, Lease, LeaseModel, LockError, LockName};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{ensure, fail, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

fn needs_fifo(cx: &Ctx<'_>) -> Result<(), CaseError> {
    if cx.caps.fifo {
        Ok(())
    } else {
        Err(CaseError::NotApplicable("the backend declares fifo = false".into()))
    }
}

/// How long to give a spawned `acquire` to make its first attempt (and so to queue).
fn settle(cx: &Ctx<'_>) -> Duration {
    (cx.ttl() / 4).max(Duration::from_millis(200))
}

/// Starts `acquire` of `name` by `client` in the background; the lease and when it came.
fn spawn_wait(
    client: &std::sync::Arc<dyn DistributedLock>,
    name: &LockName,
    opts: AcquireOptions,
) -> JoinHandle<Result<(Lease, Instant), LockError>> {
    let (c, n) = (client.clone(), name.clone());
    tokio::spawn(async move {
        let l = c.acquire(&n, &opts).await?;
        Ok((l, Instant::now()))
    })
}

async fn joined(
    task: JoinHandle<Result<(Lease, Instant), LockError>>,
    who: &str,
) -> Result<(Lease, Instant), CaseError> {
    match task.await {
        Ok(r) => Ok(r?),
        Err(e) => fail!("{who} panicked: {e}"),
    }
}

/// Declared `fifo`: with a waiter queued, neither the releaser coming straight back nor a
/// newcomer gets the lock first — `try_acquire` gives `None` right after the release, and the
/// releaser's own `acquire` is served after the queued waiter. The queued waiter sits behind a
/// slow link where the fixture has one, so that it cannot win the race for a free lock by
/// speed: only the queue keeps its turn.
pub async fn fifo_no_overtaking(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fifo_no_overtaking").await?;
    needs_fifo(&cx)?;
    let name = cx.name("fair")?;
    let (a, c) = (cx.client().await?, cx.client().await?);
    let (b, link) = match cx.linked().await {
        Ok((b, link)) => (b, Some(link)),
        Err(CaseError::NotApplicable(_)) => (cx.client().await?, None),
        Err(e) => return Err(e),
    };
    let long = cx.opts(cx.ttl() * 20);
    let held = a.acquire(&name, &long).await?;
    let queued = spawn_wait(&b, &name, long.clone());
    tokio::time::sleep(settle(&cx)).await;
    let slow = (cx.ttl() / 8).clamp(Duration::from_millis(20), Duration::from_millis(100));
    if let Some(l) = &link {
        l.set_latency(slow).await;
    }
    held.release().await?;
    // Straight after the release: the queued waiter's turn, not the releaser's or a newcomer's.
    let releaser = a.try_acquire(&name, &long).await?;
    let newcomer = c.try_acquire(&name, &long).await?;
    let overtook: Vec<&str> = [("the releaser", releaser.is_some()), ("a newcomer", newcomer.is_some())]
        .into_iter()
        .filter_map(|(who, got)| got.then_some(who))
        .collect();
    drop((releaser, newcomer));
    if !overtook.is_empty() {
        queued.abort();
        if let Some(l) = &link {
            l.set_latency(Duration::ZERO).await;
        }
        fail!("{} got the lock by try_acquire while a waiter was queued", overtook.join(" and "));
    }
    // The releaser queues again: it comes after the waiter that was there first.
    let back = spawn_wait(&a, &name, long);
    let got_b = joined(queued, "the queued waiter").await;
    if let Some(l) = &link {
        l.set_latency(Duration::ZERO).await;
    }
    let (lease_b, at_b) = got_b?;
    tokio::time::sleep(settle(&cx) / 2).await;
    lease_b.release().await?;
    let (lease_a, at_a) = joined(back, "the returning releaser").await?;
    lease_a.release().await?;
    ensure!(at_b < at_a, "the returning releaser was served before the waiter queued ahead of it");
    Ok(format!("hand-off to the queued waiter, releaser served {} ms later", ms(at_a - at_b)))
}

/// The longest a vanished head may hold a free lock back from the next waiter, for waiters of
/// ttl `ttl`: three ttls (a queue entry must outlive the waiter's longest gap between attempts,
/// about one ttl) plus a second for slow machines.
pub fn vanished_head_bound(ttl: Duration) -> Duration {
    ttl * 3 + Duration::from_secs(1)
}

/// Declared `fifo`: a queued waiter whose client vanished (cut off, then its future dropped,
/// so it cannot withdraw) delays the next waiter by at most [`vanished_head_bound`] — plus,
/// for per-session leases, the fixture's [`Fixture::expiry_bound`]: a vanished head's queue
/// entry lives as long as its session (a ZooKeeper session timeout, from the client's own
/// configuration, so that `dlock conformance` holds against a deployment as configured).
pub async fn fifo_vanished_head(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fifo_vanished_head").await?;
    needs_fifo(&cx)?;
    let (ghost, link) = cx.linked().await?;
    let name = cx.name("ghost")?;
    let (a, w) = (cx.client().await?, cx.client().await?);
    // Short waiter ttls keep the bound (and the case) short.
    let ttl = (cx.ttl() / 2).max(cx.caps.min_ttl);
    let session = match cx.caps.lease_model {
        LeaseModel::PerSession => cx.expiry(),
        _ => Duration::ZERO,
    };
    let bound = vanished_head_bound(ttl) + session;
    // Long enough to see the bound broken, short enough to end the case soon after.
    let waiting = AcquireOptions::new(ttl).wait(bound + cx.ttl()).request_timeout(cx.request_timeout());
    let held = a.acquire(&name, &cx.opts(cx.ttl())).await?;
    let head = spawn_wait(&ghost, &name, waiting.clone());
    tokio::time::sleep(settle(&cx)).await;
    let next = spawn_wait(&w, &name, waiting);
    tokio::time::sleep(settle(&cx)).await;
    link.set_partitioned(true).await;
    head.abort();
    let released = Instant::now();
    held.release().await?;
    let got = next.await;
    link.set_partitioned(false).await;
    let why = format!(" for waiters of ttl {} ms, {} ms of it the session's expiry bound", ms(ttl), ms(session));
    let delay = served_behind(got, released, bound, "a vanished head", &why).await?;
    Ok(format!("next waiter served {} ms after release (bound {} ms)", ms(delay), ms(bound)))
}

/// The next waiter's outcome behind a head that went away (`behind`, e.g. "a killed head"),
/// checked against `bound` from the moment of the release; `why` (" for …") says what the bound
/// is made of, in the messages. Releases the waiter's lease; returns how long after the release
/// it was served.
pub(crate) async fn served_behind(
    got: Result<Result<(Lease, Instant), LockError>, tokio::task::JoinError>,
    released: Instant,
    bound: Duration,
    behind: &str,
    why: &str,
) -> Result<Duration, CaseError> {
    let (lease, at) = match got {
        Ok(Ok(x)) => x,
        Ok(Err(LockError::Timeout { waited, .. })) => fail!(
            "the next waiter was not served in {} ms after the release behind {behind} (bound {} ms{why})",
            ms(waited),
            ms(bound)
        ),
        Ok(Err(e)) => return Err(e.into()),
        Err(e) => fail!("the next waiter panicked: {e}"),
    };
    lease.release().await?;
    let delay = at.saturating_duration_since(released);
    ensure!(
        delay <= bound,
        "the next waiter got the lock {} ms after the release behind {behind} (bound {} ms{why})",
        ms(delay),
        ms(bound)
    );
    Ok(delay)
}
