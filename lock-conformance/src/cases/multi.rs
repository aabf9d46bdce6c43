//! Several locks at once with `lock_core::acquire_all` (docs/contract.md §5.5): all or nothing,
//! one deadline, no deadlock between callers that name the same locks in different orders.

use std::time::Duration;

use lock_core::{acquire_all, LockError, LockName};
use tokio::time::Instant;

use super::{ensure, fail, ms, CaseResult, Ctx};
use crate::Fixture;

fn names(cx: &Ctx<'_>, suffixes: &[&str]) -> Result<Vec<LockName>, super::CaseError> {
    suffixes.iter().map(|s| cx.name(s)).collect()
}

/// Every name of the set is held by the caller until released, then free again.
pub async fn acquire_all_holds_every_name(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "acquire_all_holds_every_name").await?;
    let set = names(&cx, &["c", "a", "b"])?;
    let [a, b] = cx.clients().await?;
    let opts = cx.opts(cx.ttl() * 2);
    let leases = acquire_all(&*a, &set, &opts).await?;
    ensure!(leases.len() == set.len(), "{} leases for {} names", leases.len(), set.len());
    for (lease, name) in leases.iter().zip(&set) {
        ensure!(lease.name() == name, "lease for {} returned in the place of {name}", lease.name());
        ensure!(b.try_acquire(name, &opts).await?.is_none(), "{name} was free while the set was held");
    }
    for lease in leases {
        lease.release().await?;
    }
    for name in &set {
        match b.try_acquire(name, &opts).await? {
            Some(l) => l.release().await?,
            None => fail!("{name} still held after the set was released"),
        }
    }
    Ok(format!("{} names held together", set.len()))
}

/// One busy name makes the whole call time out within the one wait, and the names it had already
/// taken are free again at once (not at their ttl).
pub async fn acquire_all_releases_on_failure(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "acquire_all_releases_on_failure").await?;
    let set = names(&cx, &["a", "m", "z"])?;
    let [a, b] = cx.clients().await?;
    let held = b.acquire(&set[1], &cx.opts(cx.ttl())).await?;
    let wait = cx.ttl() / 2;
    let t = Instant::now();
    let r = acquire_all(&*a, &set, &cx.opts(wait)).await;
    let took = t.elapsed();
    match r {
        Err(LockError::Timeout { .. }) => {}
        Ok(_) => fail!("acquire_all got a set whose middle name another client holds"),
        Err(e) => fail!("acquire_all returned {e} instead of Timeout"),
    }
    ensure!(took < wait + cx.ttl(), "Timeout after {} ms for a wait of {} ms", ms(took), ms(wait));
    // A clean-up that outlasted the wait (plus its grace) finishes in the background (§5.5):
    // the names must be free within a second of the error.
    let returned = Instant::now();
    for name in [&set[0], &set[2]] {
        loop {
            match b.try_acquire(name, &cx.opts(Duration::ZERO)).await? {
                Some(l) => {
                    l.release().await?;
                    break;
                }
                None if returned.elapsed() < Duration::from_secs(1) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                None => fail!("{name} stayed held 1 s after acquire_all failed"),
            }
        }
    }
    let freed = returned.elapsed();
    held.release().await?;
    Ok(format!("timed out in {} ms, nothing left held {} ms later", ms(took), ms(freed)))
}

/// Two clients take the same two names in opposite orders, many times: both finish.
pub async fn acquire_all_opposite_orders(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "acquire_all_opposite_orders").await?;
    let xy = names(&cx, &["x", "y"])?;
    let yx: Vec<LockName> = xy.iter().rev().cloned().collect();
    let rounds = 5;
    let opts = cx.opts(cx.ttl() * 4);
    let mut tasks = Vec::new();
    for set in [xy, yx] {
        let (client, opts) = (cx.client().await?, opts.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let leases = acquire_all(&*client, &set, &opts).await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                for l in leases {
                    l.release().await?;
                }
            }
            Ok::<_, LockError>(())
        }));
    }
    let t = Instant::now();
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(LockError::Timeout { .. })) => fail!("a caller timed out: the opposite orders deadlocked"),
            Ok(Err(e)) => return Err(e.into()),
            Err(e) => fail!("a client task panicked: {e}"),
        }
    }
    Ok(format!("{rounds} rounds each in {} ms", ms(t.elapsed())))
}
