//! Hand-off grants (docs/contract.md §4): a grant message is a hint that the server must
//! confirm — a forged, late or duplicated one never makes a waiter return a lease or choose
//! its token — and a grant its waiter never takes up does not keep the lock from others for
//! longer than the fixture's declared bound.

use std::time::Duration;

use tokio::time::Instant;

use super::{ensure, fail, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

/// The token forged grants carry: `i64::MAX`, the largest a SQL fence holds, which would lock
/// every later holder out of a fenced store.
pub const FORGED_TOKEN: u64 = u64::MAX / 2;

/// How long to give a waiter to queue (its first attempt) before anything is done to it.
fn settle(cx: &Ctx<'_>) -> Duration {
    (cx.ttl() / 4).max(Duration::from_millis(200))
}

/// A holder holds; a waiter queues; the fixture forges grant messages for the waiter several
/// times over one base ttl: the waiter must still be waiting while the holder holds, and once
/// the holder releases it gets the server's grant, with a token above the holder's and not
/// the forged one.
pub async fn forged_grant_ignored(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "forged_grant_ignored").await?;
    let name = cx.name("forged")?;
    let (a, b) = (cx.client().await?, cx.client().await?);
    let long = cx.opts(cx.ttl() * 20);
    let held = a.acquire(&name, &long).await?;
    let waiter = {
        let (b, name, opts) = (b.clone(), name.clone(), long.clone());
        tokio::spawn(async move { b.acquire(&name, &opts).await })
    };
    tokio::time::sleep(settle(&cx)).await;
    let window = cx.ttl();
    let end = Instant::now() + window;
    let mut sent = 0usize;
    while Instant::now() < end {
        match fx.forge_grant(&name, FORGED_TOKEN).await {
            Ok(Some(n)) => sent += n,
            Ok(None) => {
                waiter.abort();
                let _ = held.release().await;
                return Err(CaseError::NotApplicable(
                    "the fixture delivers no raw grant messages (Fixture::forge_grant): the backend has none, \
                     or its fixture cannot send them yet"
                        .into(),
                ));
            }
            Err(e) => {
                waiter.abort();
                return Err(CaseError::Skipped(format!("the fixture could not forge a grant message: {e}")));
            }
        }
        tokio::time::sleep(window / 6).await;
        if waiter.is_finished() {
            break;
        }
    }
    if waiter.is_finished() {
        let got = match waiter.await {
            Ok(Ok(lease)) => format!("a lease with token {}", lease.token()),
            Ok(Err(e)) => format!("an error ({e})"),
            Err(e) => format!("a panic ({e})"),
        };
        let still = held.is_valid();
        let _ = held.release().await;
        fail!(
            "after {sent} forged grant message(s) (token {FORGED_TOKEN}) the waiter returned {got} while the holder \
             (token {}, still valid: {still}) held the lock: a message was taken for a grant",
            held.token()
        );
    }
    ensure!(
        sent > 0,
        "the fixture forged no grant message in {} ms: it found no queued waiter, so the case proves nothing",
        ms(window)
    );
    ensure!(held.is_valid(), "the holder lost its lease while the forged messages came: {:?}", held.lost().reason());
    let holder_token = held.token();
    held.release().await?;
    let lease = match tokio::time::timeout(cx.expiry() * 4, waiter).await {
        Ok(Ok(Ok(lease))) => lease,
        Ok(Ok(Err(e))) => fail!("after the forged messages the waiter failed once the lock was free: {e}"),
        Ok(Err(e)) => fail!("the waiter panicked: {e}"),
        Err(_) => fail!("the waiter was not served within {} ms of the release", ms(cx.expiry() * 4)),
    };
    let token = lease.token();
    lease.release().await?;
    ensure!(token.0 != FORGED_TOKEN, "the waiter's lease carries the forged token {FORGED_TOKEN}");
    ensure!(token > holder_token, "the waiter's token {token} is not above the holder's {holder_token}");
    Ok(format!("{sent} forged grant message(s) ignored; served after the release with token {token}"))
}

/// A holder holds; a waiter queues; the holder releases while the waiter's `acquire` future is
/// not being polled, and the future is dropped right after: a backend that hands the lock to
/// the head of its queue has granted it to a waiter that is gone. A third client's
/// `try_acquire` must get the lock within the fixture's `untaken_grant_bound`.
pub async fn waiter_departed_at_grant(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "waiter_departed_at_grant").await?;
    let name = cx.name("departed")?;
    let (a, b, c) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let long = cx.opts(cx.ttl() * 20);
    let held = a.acquire(&name, &long).await?;
    {
        let mut waiting = Box::pin(b.acquire(&name, &long));
        // Polled until it has queued; not polled while the release runs, so whatever the release
        // grants it is never taken up.
        if let Ok(r) = tokio::time::timeout(settle(&cx), &mut waiting).await {
            let got = r.map(|l| format!("a lease (token {})", l.token()));
            fail!("the waiter returned {got:?} while the lock was held");
        }
        held.release().await?;
    }
    let released = Instant::now();
    let bound = fx.untaken_grant_bound();
    let give_up = released + bound + cx.expiry() * 2;
    let probe = cx.opts(Duration::ZERO);
    loop {
        if let Some(lease) = c.try_acquire(&name, &probe).await? {
            let after = released.elapsed();
            lease.release().await?;
            ensure!(
                after <= bound,
                "after the waiter left at the grant, the lock was free for others only {} ms after the release \
                 (bound {} ms, Fixture::untaken_grant_bound)",
                ms(after),
                ms(bound)
            );
            return Ok(format!("free {} ms after the release (bound {} ms)", ms(after), ms(bound)));
        }
        if Instant::now() >= give_up {
            fail!(
                "after the waiter left at the grant, the lock was still taken {} ms after the release (bound {} ms)",
                ms(released.elapsed()),
                ms(bound)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
