//! Waiting: try_acquire, timeouts, cancel-safety, wake-up latency, FIFO order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{DistributedLock, Lease, LockError, LockName, WaitPolicy, WakeMethod};
use rand::RngExt;
use tokio::time::Instant;

use super::{ensure, fail, ms, CaseError, CaseResult, Ctx};
use crate::{ClientLink, Fixture};

/// `try_acquire` on a free lock gives a lease, on a held one `None` (quickly, without waiting),
/// and a lease again after release.
pub async fn try_acquire_semantics(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "try_acquire_semantics").await?;
    let name = cx.name("try")?;
    let [a, b] = cx.clients().await?;
    // A long wait in the options must be ignored by try_acquire.
    let opts = cx.opts(cx.ttl() * 50);
    let held = match a.try_acquire(&name, &opts).await? {
        Some(l) => l,
        None => fail!("try_acquire on a free lock returned None"),
    };
    let t = Instant::now();
    let second = b.try_acquire(&name, &opts).await?;
    let took = t.elapsed();
    ensure!(second.is_none(), "try_acquire on a held lock returned a lease");
    ensure!(took < cx.ttl(), "try_acquire on a held lock took {} ms: it must not wait", ms(took));
    ensure!(a.try_acquire(&name, &opts).await?.is_none(), "the holder's own client got the lock a second time");
    held.release().await?;
    let again = b.try_acquire(&name, &opts).await?;
    ensure!(again.is_some(), "try_acquire after release returned None");
    if let Some(l) = again {
        l.release().await?;
    }
    Ok(format!("busy answer in {} ms", ms(took)))
}

/// `acquire` on a held lock gives `Timeout` after the caller's wait (not before, not much
/// after); `WaitPolicy::NoWait` gives `Timeout` at once.
pub async fn acquire_timeout(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "acquire_timeout").await?;
    let name = cx.name("timeout")?;
    let [a, b] = cx.clients().await?;
    let held = a.acquire(&name, &cx.opts(cx.ttl())).await?;
    let wait = cx.ttl() / 2;
    let t = Instant::now();
    let r = b.acquire(&name, &cx.opts(wait)).await;
    let took = t.elapsed();
    match r {
        Err(LockError::Timeout { .. }) => {}
        Ok(_) => fail!("acquire got a lock that another client holds"),
        Err(e) => fail!("acquire on a held lock returned {e} instead of Timeout"),
    }
    ensure!(
        took + Duration::from_millis(5) >= wait,
        "Timeout came after {} ms, before the wait of {} ms",
        ms(took),
        ms(wait)
    );
    let bound = wait + cx.ttl() + Duration::from_millis(500);
    ensure!(took <= bound, "Timeout came after {} ms for a wait of {} ms", ms(took), ms(wait));
    let t = Instant::now();
    let r = b.acquire(&name, &cx.opts(wait).wait_policy(WaitPolicy::NoWait)).await;
    let nowait = t.elapsed();
    ensure!(matches!(r, Err(LockError::Timeout { .. })), "NoWait on a held lock did not return Timeout");
    ensure!(nowait < cx.request_timeout() + Duration::from_millis(500), "NoWait took {} ms", ms(nowait));
    held.release().await?;
    let free = b.acquire(&name, &cx.opts(wait).wait_policy(WaitPolicy::NoWait)).await?;
    free.release().await?;
    Ok(format!("Timeout after {} ms for a {} ms wait; NoWait {} ms", ms(took), ms(wait), ms(nowait)))
}

/// Dropping `acquire` futures leaves nothing behind: a queued waiter cancelled before a release
/// never receives the lock, and acquires cancelled at random points on a free lock hold it no
/// longer than their ttl.
pub async fn cancel_safety(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "cancel_safety").await?;
    let name = cx.name("cancel")?;
    let [a, b, c] = cx.clients().await?;
    let long = (cx.ttl() * 20).min(cx.caps.max_ttl);
    // 1. A queued waiter, cancelled: a release must not hand it the lock (its ttl is long, so a
    //    leaked grant or queue entry would block the next client far beyond the bound).
    let held = a.acquire(&name, &cx.opts(cx.ttl())).await?;
    let waiting = tokio::time::timeout(cx.ttl() / 3, b.acquire(&name, &cx.opts(long).ttl(long))).await;
    if let Ok(r) = waiting {
        fail!("the waiter returned while the lock was held: {:?}", r.map(|l| l.token()));
    }
    held.release().await?;
    let t = Instant::now();
    match c.acquire(&name, &cx.opts(cx.ttl() * 2)).await {
        Ok(l) => l.release().await?,
        Err(LockError::Timeout { .. }) => {
            fail!("after a cancelled waiter, the released lock stayed unavailable for {} ms", ms(t.elapsed()))
        }
        Err(e) => return Err(e.into()),
    }
    let handoff = t.elapsed();

    // 2. Acquires cancelled at random early points on a free lock.
    let name2 = cx.name("cancel-free")?;
    let mut completed = 0;
    for _ in 0..10 {
        let delay = Duration::from_micros(rand::rng().random_range(0..3000));
        match tokio::time::timeout(delay, b.acquire(&name2, &cx.opts(cx.ttl()))).await {
            Ok(Ok(l)) => {
                completed += 1;
                l.release().await?;
            }
            Ok(Err(e)) => fail!("an acquire on a free lock failed: {e}"),
            Err(_) => {}
        }
    }
    let t = Instant::now();
    let wait = cx.ttl() * 3;
    match c.acquire(&name2, &cx.opts(wait)).await {
        Ok(l) => l.release().await?,
        Err(LockError::Timeout { .. }) => {
            fail!(
                "acquires cancelled mid-way left the lock held for more than {} ms (ttl {} ms)",
                ms(wait),
                ms(cx.ttl())
            )
        }
        Err(e) => return Err(e.into()),
    }
    Ok(format!(
        "handoff after a cancelled waiter in {} ms; {completed}/10 racing acquires completed, free again after {} ms",
        ms(handoff),
        ms(t.elapsed())
    ))
}

/// A waiter gets the lock soon after the holder releases: within half a ttl where the backend
/// notifies or watches, within a ttl where it polls.
pub async fn wake_latency(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "wake_latency").await?;
    let [a, b] = cx.clients().await?;
    let bound = match cx.caps.wake {
        WakeMethod::Poll => cx.ttl() + Duration::from_millis(300),
        _ => cx.ttl() / 2 + Duration::from_millis(200),
    };
    let mut worst = Duration::ZERO;
    let mut all = Vec::new();
    for i in 0..3 {
        let name = cx.name(&format!("wake-{i}"))?;
        let held = a.acquire(&name, &cx.opts(cx.ttl())).await?;
        let (b2, n2, o2) = (b.clone(), name.clone(), cx.opts(cx.ttl() * 10));
        let waiter = tokio::spawn(async move {
            let r = b2.acquire(&n2, &o2).await;
            (r, Instant::now())
        });
        // Give the waiter time to start waiting; if it has not, it finds the lock free at
        // once, which only makes the measured latency smaller, never a false failure.
        tokio::time::sleep(cx.ttl() / 4).await;
        let released = Instant::now();
        held.release().await?;
        let (r, got_at) = match waiter.await {
            Ok(x) => x,
            Err(e) => fail!("the waiter panicked: {e}"),
        };
        let lease = r?;
        let lat = got_at.saturating_duration_since(released);
        worst = worst.max(lat);
        all.push(ms(lat));
        lease.release().await?;
    }
    ensure!(
        worst <= bound,
        "a waiter got the lock {} ms after release (bound {} ms for {:?})",
        ms(worst),
        ms(bound),
        cx.caps.wake
    );
    Ok(format!("wake-up latencies {all:?} ms ({:?})", cx.caps.wake))
}

/// Declared `fifo`: waiters that queued one after another are granted in that order.
pub async fn fifo_order(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fifo_order").await?;
    if !cx.caps.fifo {
        return Err(CaseError::NotApplicable("the backend declares fifo = false".into()));
    }
    let name = cx.name("fifo")?;
    let a = cx.client().await?;
    let held = a.acquire(&name, &cx.opts(cx.ttl())).await?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let spacing = (cx.ttl() / 4).max(Duration::from_millis(200));
    for i in 0..4usize {
        let c = cx.client().await?;
        let (n, o, order) = (name.clone(), cx.opts(cx.ttl() * 20), order.clone());
        tasks.push(tokio::spawn(async move {
            let l = c.acquire(&n, &o).await?;
            order.lock().unwrap_or_else(|e| e.into_inner()).push(i);
            l.release().await?;
            Ok::<_, LockError>(())
        }));
        tokio::time::sleep(spacing).await;
    }
    held.release().await?;
    for t in tasks {
        match t.await {
            Ok(r) => r?,
            Err(e) => fail!("a waiter panicked: {e}"),
        }
    }
    let got = order.lock().unwrap_or_else(|e| e.into_inner()).clone();
    ensure!(got == vec![0, 1, 2, 3], "grants came in order {got:?}, not arrival order [0, 1, 2, 3]");
    Ok(format!("order {got:?}"))
}

/// Declared `fifo`: a newcomer polling `try_acquire` as fast as it can never gets the lock ahead
/// of a waiter that queued before the release (the hand-off is not a race the newcomer can win).
pub async fn fifo_no_overtake(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fifo_no_overtake").await?;
    if !cx.caps.fifo {
        return Err(CaseError::NotApplicable("the backend declares fifo = false".into()));
    }
    let name = cx.name("overtake")?;
    let (a, newcomer) = (cx.client().await?, Arc::new(cx.client().await?));
    let settle = (cx.ttl() / 10).clamp(Duration::from_millis(50), Duration::from_millis(200));
    let mut gaps = Vec::new();
    for round in 0..3 {
        let held = a.acquire(&name, &cx.opts(cx.ttl())).await?;
        let w = cx.client().await?;
        let (n, o) = (name.clone(), cx.opts(cx.ttl() * 20));
        let waiter = tokio::spawn(async move {
            let l = w.acquire(&n, &o).await?;
            let at = Instant::now();
            l.release().await?;
            Ok::<_, LockError>(at)
        });
        // The waiter has made its first (refused) attempt, so it is queued.
        tokio::time::sleep(settle).await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (c, n, o, halt) = (Arc::clone(&newcomer), name.clone(), cx.opts(cx.ttl()), Arc::clone(&stop));
        let poller = tokio::spawn(async move {
            while !halt.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(l) = c.try_acquire(&n, &o).await? {
                    let at = Instant::now();
                    l.release().await?;
                    return Ok::<_, LockError>(Some(at));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(None)
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        held.release().await?;
        let waited = match waiter.await {
            Ok(r) => r?,
            Err(e) => fail!("the waiter panicked: {e}"),
        };
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let polled = match poller.await {
            Ok(r) => r?,
            Err(e) => fail!("the newcomer panicked: {e}"),
        };
        if let Some(at) = polled {
            ensure!(at > waited, "round {round}: a newcomer polling try_acquire got the lock before the queued waiter");
            gaps.push(ms(at - waited));
        }
    }
    Ok(format!("the queued waiter went first in 3 of 3 rounds; newcomer's grant came {gaps:?} ms later"))
}

/// The start of the cases whose waiter's network fails while the lock is busy.
struct BusyForLinkedWaiter {
    /// The waiter, behind a fault link.
    waiter: Arc<dyn DistributedLock>,
    link: Arc<dyn ClientLink>,
    /// Another client, kept for as long as its lease.
    _holder: Arc<dyn DistributedLock>,
    name: LockName,
    /// `name`, held by the other client for a ttl.
    held: Lease,
}

async fn held_before_a_linked_waiter(cx: &Ctx<'_>, name: &str) -> Result<BusyForLinkedWaiter, CaseError> {
    let (waiter, link) = cx.linked().await?;
    let name = cx.name(name)?;
    let holder = cx.client().await?;
    let held = holder.acquire(&name, &cx.opts(cx.ttl())).await?;
    Ok(BusyForLinkedWaiter { waiter, link, _holder: holder, name, held })
}

/// A lock that stays busy until the caller's deadline gives `Timeout`, never `Unavailable`,
/// even when the network is slow enough that the last attempt before the deadline is cut
/// short (`Unavailable` means the backend did not answer).
pub async fn busy_at_deadline_is_timeout(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "busy_at_deadline_is_timeout").await?;
    let BusyForLinkedWaiter { waiter, link, _holder, name, held } = held_before_a_linked_waiter(&cx, "busy").await?;
    // Connect before the link slows down: a first connection through a slow link is several
    // round trips, and a server that never answered before the deadline is `Unavailable`.
    let no_wait = cx.opts(cx.ttl()).wait_policy(WaitPolicy::NoWait);
    match waiter.acquire(&name, &no_wait).await {
        Err(LockError::Timeout { .. }) => {}
        other => fail!("acquire with NoWait on a held lock gave {:?}, not Timeout", other.map(|l| l.token())),
    }
    let latency = (cx.ttl() / 40).clamp(Duration::from_millis(5), Duration::from_millis(50));
    link.set_latency(latency).await;
    // One attempt over the slow link (a backend may need several round trips per attempt);
    // waits of 3 to 5 attempts, so the server answers "busy" before each deadline, and the
    // deadlines land anywhere in an attempt (a spread of two attempts covers every phase; five
    // made the case take 33-35 s of its 35 s limit on a loaded machine through an application's
    // pool, whose attempts are three round trips).
    let t = Instant::now();
    let probe = waiter.acquire(&name, &no_wait).await;
    let attempt = t.elapsed().max(latency * 2);
    if !matches!(probe, Err(LockError::Timeout { .. })) {
        link.set_latency(Duration::ZERO).await;
        fail!("acquire with NoWait of a held lock over a slow link gave {:?}, not Timeout", probe.map(|l| l.token()));
    }
    let spread = (attempt * 2).as_micros() as u64;
    let jitter: Vec<u64> = (0..5).map(|_| rand::rng().random_range(0..spread.max(1))).collect();
    let mut outcome = Ok(());
    let mut waits = Vec::new();
    for j in jitter {
        let wait = attempt * 3 + Duration::from_micros(j);
        waits.push(ms(wait));
        match waiter.acquire(&name, &cx.opts(wait)).await {
            Err(LockError::Timeout { .. }) => {}
            Ok(_) => {
                outcome = Err(CaseError::Failed("a waiter got a lock that another client holds".into()));
                break;
            }
            Err(e) => {
                outcome = Err(CaseError::Failed(format!(
                    "acquire with a {} ms wait on a busy lock, over a link with {} ms latency (one attempt {} ms), \
                     returned {e} instead of Timeout",
                    ms(wait),
                    ms(latency),
                    ms(attempt)
                )));
                break;
            }
        }
    }
    link.set_latency(Duration::ZERO).await;
    held.release().await?;
    outcome?;
    Ok(format!("Timeout for waits {waits:?} ms at {} ms latency ({} ms per attempt)", ms(latency), ms(attempt)))
}

/// `WaitPolicy::Forever` means forever: a waiter whose server is out of reach for a while keeps
/// trying (with back-off) and gets the lock once the server is back and the lock is free.
pub async fn forever_survives_transient_errors(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "forever_survives_transient_errors").await?;
    let BusyForLinkedWaiter { waiter, link, _holder, name, held } = held_before_a_linked_waiter(&cx, "forever").await?;
    link.set_partitioned(true).await;
    let opts = cx.opts(cx.ttl()).wait_policy(WaitPolicy::Forever);
    let task = tokio::spawn({
        let (waiter, name) = (Arc::clone(&waiter), name.clone());
        async move { waiter.acquire(&name, &opts).await }
    });
    // Long enough for several attempts to fail (each ends at the request timeout at the latest).
    tokio::time::sleep(cx.request_timeout() * 2 + Duration::from_millis(200)).await;
    link.set_partitioned(false).await;
    if task.is_finished() {
        let r = task.await.map_err(|e| CaseError::Failed(format!("the waiter panicked: {e}")))?;
        fail!(
            "a waiter with WaitPolicy::Forever gave up while the server was out of reach: {:?}",
            r.map(|l| l.token())
        );
    }
    held.release().await?;
    let t = Instant::now();
    let bound = cx.expiry() * 4;
    match tokio::time::timeout(bound, task).await {
        Ok(Ok(Ok(lease))) => {
            let took = t.elapsed();
            lease.release().await?;
            Ok(format!("granted {} ms after the release", ms(took)))
        }
        Ok(Ok(Err(e))) => fail!("a waiter with WaitPolicy::Forever returned {e} after the server came back"),
        Ok(Err(e)) => fail!("the waiter panicked: {e}"),
        Err(_) => fail!("a waiter with WaitPolicy::Forever was not granted within {} ms of the release", ms(bound)),
    }
}
