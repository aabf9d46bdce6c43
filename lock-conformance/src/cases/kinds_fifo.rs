//! Fairness of read-write locks and semaphores whose backend declares `fifo` (docs/contract.md
//! §5.2, §5.3): waiters are granted in arrival order as far as the kind allows — a writer alone,
//! a run of consecutive readers together, as many permit waiters as permits are free — and
//! nobody overtakes a queued waiter: not a newcomer's `try_acquire`, not the releaser coming
//! straight back, not a reader that could share with the current readers while a writer is
//! queued. A queued waiter that vanished holds the others back for a bounded time only.
//!
//! The declaration read is the kind client's own ([`LockService::capabilities`](lock_core::LockService::capabilities) of the
//! read-write lock or the semaphore): a backend may queue its exclusive lock and not its
//! other kinds.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    backend::{Claim, TryLock},
    AcquireOptions, Capabilities, DistributedRwLock, DistributedSemaphore, Lease, LockError, LockName, OwnerId,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::fairness::{served_behind, vanished_head_bound};
use super::kinds::{rw_client, semaphore_client};
use super::{ensure, fail, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

type Waiting = JoinHandle<Result<(Lease, Instant), LockError>>;

/// The backend must declare the kind (read from its exclusive client, before asking the fixture
/// for a client of the kind: a backend without the kind has none).
fn needs_kind(kind: &str, has_kind: bool) -> Result<(), CaseError> {
    if has_kind {
        Ok(())
    } else {
        Err(CaseError::NotApplicable(format!("the backend declares {kind} = false")))
    }
}

/// The kind client's own declaration must have `fifo`.
fn needs_fifo(caps: &Capabilities, kind: &str) -> Result<(), CaseError> {
    if caps.fifo {
        Ok(())
    } else {
        Err(CaseError::NotApplicable(format!("the backend's {kind} declares fifo = false")))
    }
}

/// How long to give a spawned wait to make its first attempt (and so to queue).
fn settle(cx: &Ctx<'_>) -> Duration {
    (cx.ttl() / 4).max(Duration::from_millis(200))
}

/// Starts a read (`write` false) or write wait in the background; the lease and when it came.
fn spawn_rw(rw: &Arc<dyn DistributedRwLock>, name: &LockName, write: bool, opts: AcquireOptions) -> Waiting {
    let (rw, name) = (Arc::clone(rw), name.clone());
    tokio::spawn(async move {
        let l = if write { rw.acquire_write(&name, &opts).await? } else { rw.acquire_read(&name, &opts).await? };
        Ok((l, Instant::now()))
    })
}

/// Starts a permit wait in the background; the lease and when it came.
fn spawn_permit(sem: &Arc<dyn DistributedSemaphore>, name: &LockName, n: u32, opts: AcquireOptions) -> Waiting {
    let (sem, name) = (Arc::clone(sem), name.clone());
    tokio::spawn(async move {
        let l = sem.acquire_permit(&name, n, &opts).await?;
        Ok((l, Instant::now()))
    })
}

async fn joined(task: Waiting, who: &str) -> Result<(Lease, Instant), CaseError> {
    match task.await {
        Ok(r) => Ok(r?),
        Err(e) => fail!("{who} panicked: {e}"),
    }
}

/// Fails (aborting every task of `all`) when one of `early` already finished: it was granted
/// out of turn.
fn none_granted(early: &[(&str, &Waiting)], all: &[&Waiting], why: &str) -> Result<(), CaseError> {
    let done: Vec<&str> = early.iter().filter(|(_, t)| t.is_finished()).map(|(who, _)| *who).collect();
    if done.is_empty() {
        return Ok(());
    }
    for t in all {
        t.abort();
    }
    fail!("{} got the lock {why}", done.join(" and "))
}

/// Fails with `order` unless three grants came one after the other; the two gaps in ms.
fn in_arrival_order([first, second, third]: [Instant; 3], order: &str) -> Result<(u128, u128), CaseError> {
    ensure!(first < second && second < third, "{order}");
    Ok((ms(second - first), ms(third - second)))
}

/// Declared `fifo`: with a writer holding, the queue `reader 1, writer, reader 2` (in arrival
/// order, each waiting) is served as reader 1 at the release, then the writer once reader 1
/// left, and only then reader 2 — which must not join the readers ahead of the
/// queued writer although it could share with them.
pub async fn rw_fifo_order(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "rw_fifo_order").await?;
    needs_kind("rw_lock", cx.caps.rw_lock)?;
    let rw = rw_client(&cx).await?;
    needs_fifo(&rw.capabilities(), "rw_lock")?;
    let (w, r1c, r2c) = (rw_client(&cx).await?, rw_client(&cx).await?, rw_client(&cx).await?);
    let name = cx.name("rw-order")?;
    let long = cx.opts(cx.ttl() * 20);
    let holder = rw.acquire_write(&name, &long).await?;
    let r1 = spawn_rw(&r1c, &name, false, long.clone());
    tokio::time::sleep(settle(&cx)).await;
    let writer = spawn_rw(&w, &name, true, long.clone());
    tokio::time::sleep(settle(&cx)).await;
    let r2 = spawn_rw(&r2c, &name, false, long.clone());
    tokio::time::sleep(settle(&cx)).await;
    let all = [&r1, &writer, &r2];
    none_granted(&[("reader 1", &r1), ("the writer", &writer), ("reader 2", &r2)], &all, "while a writer held")?;
    holder.release().await?;
    let (lease_r1, at_r1) = match tokio::time::timeout(cx.ttl() * 10, joined(r1, "reader 1")).await {
        Ok(r) => r?,
        Err(_) => {
            writer.abort();
            r2.abort();
            fail!("reader 1, first in line, was not granted within 10 ttls of the release");
        }
    };
    // Reader 1 holds and the writer is queued: reader 2 (behind the writer) waits, though it
    // could share with reader 1; so does a newcomer's single try.
    tokio::time::sleep(settle(&cx)).await;
    let newcomer = rw_client(&cx).await?.try_acquire_read(&name, &long).await?;
    let newcomer_got = newcomer.is_some();
    drop(newcomer);
    none_granted(&[("the writer", &writer), ("reader 2", &r2)], &[&writer, &r2], "while reader 1 held")?;
    if newcomer_got {
        writer.abort();
        r2.abort();
        fail!("a newcomer's try_acquire_read joined the readers ahead of a queued writer");
    }
    lease_r1.release().await?;
    let (lease_w, at_w) = joined(writer, "the writer").await?;
    tokio::time::sleep(settle(&cx) / 2).await;
    if r2.is_finished() {
        fail!("reader 2 got the lock while the writer queued ahead of it held");
    }
    lease_w.release().await?;
    let (lease_r2, at_r2) = joined(r2, "reader 2").await?;
    lease_r2.release().await?;
    let (writer_after, r2_after) =
        in_arrival_order([at_r1, at_w, at_r2], "not served in arrival order: reader 1, writer, reader 2")?;
    Ok(format!(
        "reader 1, writer {writer_after} ms later, reader 2 {r2_after} ms after the writer; no reader joined ahead of \
         the writer"
    ))
}

/// Declared `fifo`: with a writer queued behind a reader, nobody overtakes it — before the
/// release no newcomer reader joins (`try_acquire_read`), and right after it neither the
/// releasing reader coming straight back nor a newcomer gets in by `try_acquire_read` or
/// `try_acquire_write`; the releaser's own later wait is served after the writer.
pub async fn rw_fifo_no_overtaking(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "rw_fifo_no_overtaking").await?;
    needs_kind("rw_lock", cx.caps.rw_lock)?;
    let a = rw_client(&cx).await?;
    needs_fifo(&a.capabilities(), "rw_lock")?;
    let (w, c) = (rw_client(&cx).await?, rw_client(&cx).await?);
    let name = cx.name("rw-fair")?;
    let long = cx.opts(cx.ttl() * 20);
    let held = a.acquire_read(&name, &long).await?;
    let writer = spawn_rw(&w, &name, true, long.clone());
    tokio::time::sleep(settle(&cx)).await;
    if let Some(l) = c.try_acquire_read(&name, &long).await? {
        let _ = l.release().await;
        writer.abort();
        fail!("a newcomer's try_acquire_read joined the reader ahead of a queued writer");
    }
    held.release().await?;
    // Straight after the release: the queued writer's turn.
    let overtook = overtakers(&a, &c, &name, &long).await?;
    if !overtook.is_empty() {
        writer.abort();
        fail!("{} got the lock while a writer was queued", overtook.join(" and "));
    }
    let back = spawn_rw(&a, &name, false, long);
    let (lease_w, at_w) = joined(writer, "the queued writer").await?;
    tokio::time::sleep(settle(&cx) / 2).await;
    lease_w.release().await?;
    let (lease_a, at_a) = joined(back, "the returning reader").await?;
    lease_a.release().await?;
    ensure!(at_w < at_a, "the returning reader was served before the writer queued ahead of it");
    let slow = slow_writer_kept_its_turn(&cx, &a, &c).await?;
    Ok(format!("hand-off to the queued writer, returning reader served {} ms later{slow}", ms(at_a - at_w)))
}

/// Who of the releaser `a` and a newcomer `c` gets `name` straight after a release, by
/// `try_acquire_write` and `try_acquire_read` in that order (writes first: a free lock with no
/// queue would take them, so they are the likeliest to overtake a queued writer). Every lease
/// got is dropped again.
async fn overtakers(
    a: &Arc<dyn DistributedRwLock>,
    c: &Arc<dyn DistributedRwLock>,
    name: &LockName,
    long: &AcquireOptions,
) -> Result<Vec<&'static str>, CaseError> {
    let tries = [
        ("the releaser's try_acquire_write", a.try_acquire_write(name, long).await?),
        ("a newcomer's try_acquire_write", c.try_acquire_write(name, long).await?),
        ("the releaser's try_acquire_read", a.try_acquire_read(name, long).await?),
        ("a newcomer's try_acquire_read", c.try_acquire_read(name, long).await?),
    ];
    Ok(tries.iter().filter(|(_, l)| l.is_some()).map(|(who, _)| *who).collect())
}

/// The queued writer above is quick: on a loopback link it may win the race for the free lock
/// by speed alone. Where the fixture drives the write side directly (`Fixture::lease_stores`), a
/// writer that queued with one waiting attempt and is slow to come back (it never does) must
/// still keep its turn right after the reader's release: `try_acquire_write` and
/// `try_acquire_read` of the releaser and of a newcomer all get `None`.
async fn slow_writer_kept_its_turn(
    cx: &Ctx<'_>,
    a: &Arc<dyn DistributedRwLock>,
    c: &Arc<dyn DistributedRwLock>,
) -> Result<String, CaseError> {
    let stores = match cx.fx.lease_stores().await {
        Ok(s) => s,
        Err(e) => return Err(CaseError::Skipped(format!("the fixture could not make its lease stores: {e}"))),
    };
    let Some((_, write)) = stores.into_iter().find(|(l, _)| *l == "write") else {
        return Ok(String::new());
    };
    let name = cx.name("rw-slow")?;
    let long = cx.opts(cx.ttl() * 20);
    let held = a.acquire_read(&name, &long).await?;
    expect_refused(
        write.try_lock(&Claim::new(&name, OwnerId::random(), cx.ttl()), true).await?,
        "a writer while a reader held",
    )?;
    held.release().await?;
    let overtook = overtakers(a, c, &name, &long).await?;
    ensure!(overtook.is_empty(), "{} got the lock while a (slow) writer was queued", overtook.join(" and "));
    Ok("; a slow queued writer kept its turn too".into())
}

/// Declared `fifo`: with both of 2 permits held, waiters 1, 2, 3 (in arrival order) get permits
/// in that order, one per freed permit, and right after a release neither the releaser nor a
/// newcomer gets a permit by `try_acquire_permit`.
pub async fn semaphore_fifo_order(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "semaphore_fifo_order").await?;
    needs_kind("semaphore", cx.caps.semaphore)?;
    let s = semaphore_client(&cx).await?;
    needs_fifo(&s.capabilities(), "semaphore")?;
    const N: u32 = 2;
    let name = cx.name("sem-order")?;
    let long = cx.opts(cx.ttl() * 20);
    let h1 = s.acquire_permit(&name, N, &long).await?;
    let h2 = s.acquire_permit(&name, N, &long).await?;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        waiters.push(spawn_permit(&semaphore_client(&cx).await?, &name, N, long.clone()));
        tokio::time::sleep(settle(&cx)).await;
    }
    let w3 = waiters.pop().ok_or_else(|| CaseError::Failed("no waiter 3".into()))?;
    let w2 = waiters.pop().ok_or_else(|| CaseError::Failed("no waiter 2".into()))?;
    let w1 = waiters.pop().ok_or_else(|| CaseError::Failed("no waiter 1".into()))?;
    let all = [&w1, &w2, &w3];
    none_granted(&[("waiter 1", &w1), ("waiter 2", &w2), ("waiter 3", &w3)], &all, "while all permits were held")?;
    h1.release().await?;
    let newcomer = semaphore_client(&cx).await?;
    let tries = [
        ("the releaser's try_acquire_permit", s.try_acquire_permit(&name, N, &long).await?),
        ("a newcomer's try_acquire_permit", newcomer.try_acquire_permit(&name, N, &long).await?),
    ];
    let overtook: Vec<&str> = tries.iter().filter(|(_, l)| l.is_some()).map(|(who, _)| *who).collect();
    drop(tries);
    if !overtook.is_empty() {
        for t in all {
            t.abort();
        }
        fail!("{} got the freed permit while waiters were queued", overtook.join(" and "));
    }
    let (l1, at1) = joined(w1, "waiter 1").await?;
    tokio::time::sleep(settle(&cx)).await;
    none_granted(&[("waiter 2", &w2), ("waiter 3", &w3)], &[&w2, &w3], "although only one permit was freed")?;
    h2.release().await?;
    let (l2, at2) = joined(w2, "waiter 2").await?;
    tokio::time::sleep(settle(&cx) / 2).await;
    none_granted(&[("waiter 3", &w3)], &[&w3], "while both permits were held again")?;
    l1.release().await?;
    let (l3, at3) = joined(w3, "waiter 3").await?;
    l2.release().await?;
    l3.release().await?;
    let (gap_2, gap_3) = in_arrival_order([at1, at2, at3], "permits not granted in arrival order")?;
    Ok(format!("waiters 1, 2, 3 served in order ({gap_2} ms, {gap_3} ms apart); no try_acquire overtook"))
}

/// Declared `fifo`: a queued waiter that vanished (it registered with one waiting attempt at the
/// store level, `Fixture::lease_stores`, and never came back) delays the next waiter by at most
/// [`vanished_head_bound`]: a vanished writer ahead of a waiting reader, and a vanished permit
/// waiter ahead of a waiting one (one permit).
pub async fn kinds_fifo_vanished_head(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "kinds_fifo_vanished_head").await?;
    let rw = if cx.caps.rw_lock { Some(rw_client(&cx).await?) } else { None };
    let sem = if cx.caps.semaphore { Some(semaphore_client(&cx).await?) } else { None };
    let fair_rw = rw.filter(|c| c.capabilities().fifo);
    let fair_sem = sem.filter(|c| c.capabilities().fifo);
    if fair_rw.is_none() && fair_sem.is_none() {
        return Err(CaseError::NotApplicable("the backend declares no read-write lock or semaphore with fifo".into()));
    }
    let stores = match fx.lease_stores().await {
        Ok(s) => s,
        Err(e) => return Err(CaseError::Skipped(format!("the fixture could not make its lease stores: {e}"))),
    };
    let store = |label: &str| stores.iter().find(|(l, _)| *l == label).map(|(_, s)| Arc::clone(s));
    let (write_store, permit_store) = (store("write"), store("permit"));
    if write_store.is_none() && permit_store.is_none() {
        return Err(CaseError::NotApplicable(
            "the fixture offers no write or permit LeaseStore (Fixture::lease_stores): the backend's kinds are not \
             built on one, so the suite cannot leave a waiter's registration behind without a wait"
                .into(),
        ));
    }
    // Short waiter ttls keep the bound (and the case) short.
    let ttl = (cx.ttl() / 2).max(cx.caps.min_ttl);
    let bound = vanished_head_bound(ttl);
    let waiting = AcquireOptions::new(ttl).wait(bound + cx.ttl()).request_timeout(cx.request_timeout());
    let mut details = Vec::new();
    if let (Some(rw), Some(ghost)) = (&fair_rw, write_store) {
        let name = cx.name("rw-ghost")?;
        let held = rw.acquire_read(&name, &cx.opts(cx.ttl())).await?;
        expect_refused(
            ghost.try_lock(&Claim::new(&name, OwnerId::random(), ttl), true).await?,
            "a writer while a reader held",
        )?;
        let next = spawn_rw(&rw_client(&cx).await?, &name, false, waiting.clone());
        tokio::time::sleep(settle(&cx)).await;
        let delay = served_after_release(held, next, "a vanished writer", bound, ttl).await?;
        details.push(format!("reader behind a vanished writer served {} ms after release", ms(delay)));
    }
    if let (Some(sem), Some(ghost)) = (&fair_sem, permit_store) {
        let name = cx.name("sem-ghost")?;
        let held = sem.acquire_permit(&name, 1, &cx.opts(cx.ttl())).await?;
        expect_refused(
            ghost.try_lock(&Claim::new(&name, OwnerId::random(), ttl), true).await?,
            "a permit while it was held",
        )?;
        let next = spawn_permit(&semaphore_client(&cx).await?, &name, 1, waiting);
        tokio::time::sleep(settle(&cx)).await;
        let delay = served_after_release(held, next, "a vanished permit waiter", bound, ttl).await?;
        details.push(format!("permit waiter behind a vanished one served {} ms after release", ms(delay)));
    }
    Ok(format!("{} (bound {} ms)", details.join("; "), ms(bound)))
}

fn expect_refused(answer: TryLock, what: &str) -> Result<(), CaseError> {
    match answer {
        TryLock::Acquired { .. } => fail!("the store granted {what}"),
        _ => Ok(()),
    }
}

/// Releases `held`; `next`, queued behind the head that went away (`behind`), must then be
/// granted within `bound` (for waiters of `ttl`). How long it took.
async fn served_after_release(
    held: Lease,
    next: Waiting,
    behind: &str,
    bound: Duration,
    ttl: Duration,
) -> Result<Duration, CaseError> {
    let released = Instant::now();
    held.release().await?;
    served_behind(next.await, released, bound, behind, &format!(" for waiters of ttl {} ms", ms(ttl))).await
}
