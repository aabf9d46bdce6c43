//! Handles (`lock.handle(name)`): the name checked once, `try_acquire_for` answering `None` when
//! the wait ran out (not an error), and `run_locked` on every kind the backend declares.

use std::time::Duration;

use lock_core::{Handles, LockError, SemaphoreHandles};
use tokio::time::Instant;

use super::kinds::{rw_client, semaphore_client};
use super::{ensure, fail, ms, CaseResult, Ctx};
use crate::Fixture;

/// Whether a bounded wait answered when it should: not before `wait`, not long after.
fn waited(began: Instant, wait: Duration, slack: Duration) -> Result<(), super::CaseError> {
    let took = began.elapsed();
    ensure!(took + Duration::from_millis(5) >= wait, "try_*_for({} ms) gave up after {} ms", ms(wait), ms(took));
    ensure!(took <= wait + slack, "try_*_for({} ms) answered only after {} ms", ms(wait), ms(took));
    Ok(())
}

/// On each kind: a busy lock makes `try_*_for(d)` answer `Ok(None)` after about `d`, a free one
/// a lease; `run_locked` returns the closure's value and frees the lock; bad names and a
/// zero-permit semaphore are typed errors at the handle.
pub async fn handles(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "handles").await?;
    let (a, b) = (cx.client().await?, cx.client().await?);
    let name = cx.name("handle")?;
    let wait = cx.ttl() / 2;
    let slack = cx.request_timeout() * 2;
    match a.handle("") {
        Err(LockError::InvalidName { .. }) => {}
        other => fail!("handle(\"\") should be InvalidName, got {:?}", other.map(|h| h.name().clone())),
    }
    let (ha, hb) =
        (a.handle(name.as_str())?.with_options(cx.opts(wait)), b.handle(name.as_str())?.with_options(cx.opts(wait)));
    let held = ha.try_acquire().await?.ok_or_else(|| super::CaseError::Failed("a free lock was busy".into()))?;
    ensure!(hb.try_acquire().await?.is_none(), "try_acquire got a held lock");
    let began = Instant::now();
    ensure!(hb.try_acquire_for(wait).await?.is_none(), "try_acquire_for got a held lock");
    waited(began, wait, slack)?;
    held.release().await?;
    let got = hb.try_acquire_for(cx.ttl() * 4).await?;
    ensure!(got.is_some(), "try_acquire_for did not get a free lock");
    if let Some(lease) = got {
        lease.release().await?;
    }
    let value = ha.run_locked(|lease| async move { lease.token().0 }).await?;
    let after = hb.try_acquire().await?;
    ensure!(after.as_ref().is_some_and(|l| l.token().0 > value), "run_locked left the lock held");
    if let Some(l) = after {
        l.release().await?;
    }
    let mut done = vec!["lock"];
    if cx.caps.rw_lock {
        rw_handles(&cx, wait, slack).await?;
        done.push("rw");
    }
    if cx.caps.semaphore {
        semaphore_handles(&cx, wait, slack).await?;
        done.push("semaphore");
    }
    Ok(format!("kinds {done:?}, bounded waits of {} ms", ms(wait)))
}

async fn rw_handles(cx: &Ctx<'_>, wait: Duration, slack: Duration) -> Result<(), super::CaseError> {
    let (a, b) = (rw_client(cx).await?, rw_client(cx).await?);
    let name = cx.name("rw-handle")?;
    let (ha, hb) =
        (a.handle(name.as_str())?.with_options(cx.opts(wait)), b.handle(name.as_str())?.with_options(cx.opts(wait)));
    let reader = ha.read().await?;
    let began = Instant::now();
    ensure!(hb.try_write_for(wait).await?.is_none(), "try_write_for got the lock beside a reader");
    waited(began, wait, slack)?;
    let second = hb.try_read_for(wait).await?;
    ensure!(second.is_some(), "try_read_for was refused beside another reader");
    if let Some(l) = second {
        l.release().await?;
    }
    reader.release().await?;
    let out = hb.run_write_locked(|_| async { 7 }).await?;
    ensure!(out == 7, "run_write_locked returned {out}");
    let out = ha.run_read_locked(|_| async { 8 }).await?;
    ensure!(out == 8, "run_read_locked returned {out}");
    ensure!(hb.try_write().await?.is_some(), "run_*_locked left the rw lock held");
    Ok(())
}

async fn semaphore_handles(cx: &Ctx<'_>, wait: Duration, slack: Duration) -> Result<(), super::CaseError> {
    let (a, b) = (semaphore_client(cx).await?, semaphore_client(cx).await?);
    let name = cx.name("sem-handle")?;
    match a.handle_with(name.as_str(), 0) {
        Err(LockError::InvalidOptions { .. }) => {}
        other => {
            fail!("a semaphore handle of 0 permits should be InvalidOptions, got {:?}", other.map(|h| h.permits()))
        }
    }
    let (ha, hb) = (
        a.handle_with(name.as_str(), 1)?.with_options(cx.opts(wait)),
        b.handle_with(name.as_str(), 1)?.with_options(cx.opts(wait)),
    );
    let permit = ha.acquire().await?;
    let began = Instant::now();
    ensure!(hb.try_acquire_for(wait).await?.is_none(), "try_acquire_for got a permit of a full semaphore");
    waited(began, wait, slack)?;
    permit.release().await?;
    let out = hb.run_locked(|_| async { 9 }).await?;
    ensure!(out == 9, "run_locked returned {out}");
    ensure!(ha.try_acquire().await?.is_some(), "run_locked left the permit taken");
    Ok(())
}
