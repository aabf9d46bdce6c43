//! A re-grant to the same owner (a retry after a lost reply) extends the server-side lease
//! exactly as a fresh grant does: the new `Lease` counts its validity from the retry, so a
//! re-grant that kept the old expiry would let another holder in while the first still believes
//! it holds. Checked at the `LeaseStore` level, for every store-based kind the fixture offers
//! ([`Fixture::lease_stores`]).

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    backend::{Claim, LeaseStore, TryLock},
    OwnerId,
};
use tokio::time::{sleep_until, Instant};

use super::{ensure, fail, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

/// Owner A is granted with ttl T at t0 and again (same owner, same token) at about t0 + T/2;
/// at about t0 + 1.125 T, past the first grant's expiry but well inside the re-grant's, another
/// owner must still be refused; once the re-grant's ttl has passed, the other owner gets in.
pub async fn regrant_extends_lease(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "regrant_extends_lease").await?;
    let stores = match fx.lease_stores().await {
        Ok(s) => s,
        Err(e) => return Err(CaseError::Skipped(format!("the fixture could not make its lease stores: {e}"))),
    };
    if stores.is_empty() {
        return Err(CaseError::NotApplicable(
            "the fixture offers no LeaseStore (Fixture::lease_stores): the backend is not built on one, so there is \
             no store-level re-grant to check"
                .into(),
        ));
    }
    let mut checks = Vec::new();
    for (label, store) in &stores {
        // A second reader would share the lock anyway: readers are checked against a writer.
        let rival = match *label {
            "read" => match stores.iter().find(|(l, _)| *l == "write") {
                Some((_, w)) => Arc::clone(w),
                None => fail!("the fixture offers a \"read\" store without the \"write\" store of the same lock"),
            },
            _ => Arc::clone(store),
        };
        checks.push(check(&cx, label, Arc::clone(store), rival));
    }
    // The kinds use distinct names: checked side by side, so the case takes one round of ttls;
    // every kind's failure is reported, not only the first.
    let (mut passed, mut failed, mut slow) = (Vec::new(), Vec::new(), Vec::new());
    for result in futures::future::join_all(checks).await {
        match result {
            Ok(detail) => passed.push(detail),
            Err(CaseError::Failed(why)) => failed.push(why),
            Err(CaseError::Skipped(why)) => slow.push(why),
            Err(other) => return Err(other),
        }
    }
    ensure!(failed.is_empty(), "{}", failed.join("; "));
    if !slow.is_empty() {
        return Err(CaseError::Skipped(slow.join("; ")));
    }
    Ok(passed.join("; "))
}

async fn check(cx: &Ctx<'_>, label: &str, store: Arc<dyn LeaseStore>, rival: Arc<dyn LeaseStore>) -> CaseResult {
    // Two base ttls: the window between the first grant's expiry and the re-grant's is then
    // wide enough for a slow, shared machine.
    let ttl = (cx.ttl() * 2).max(store.capabilities().min_ttl);
    let name = cx.name(label)?;
    let (a, b) = (OwnerId::random(), OwnerId::random());
    let t0 = Instant::now();
    let TryLock::Acquired { token: first } = store.try_lock(&Claim::new(&name, a, ttl), false).await? else {
        fail!("{label}: a fresh name was not granted");
    };
    // The server's first lease ends by now + ttl: it started before the reply came back.
    let first_ends = Instant::now() + ttl;
    tokio::time::sleep_until(t0 + ttl / 2).await;
    let t_re = Instant::now();
    let TryLock::Acquired { token: again } = store.try_lock(&Claim::new(&name, a, ttl), false).await? else {
        fail!("{label}: a retry by the holder itself (same owner) was refused");
    };
    // The same grant comes back (SQL, Redis), or a fresh one with a greater token (Redlock draws
    // every grant's token from a majority's counters): never a lower one.
    ensure!(again >= first, "{label}: a retry by the same owner got token {again}, lower than the grant's {first}");
    // The re-grant's lease ends no earlier than this: it started after the request was sent.
    let regrant_ends = t_re + ttl;
    // Past the first grant's expiry, well before the re-grant's.
    sleep_until(first_ends + ttl / 8).await;
    let rival_got = rival.try_lock(&Claim::new(&name, b, ttl), false).await?;
    let answered = Instant::now();
    if let TryLock::Acquired { token } = rival_got {
        let _ = rival.release(&name, b).await;
        let _ = store.release(&name, a).await;
        if answered < regrant_ends {
            fail!(
                "{label}: another owner was granted (token {token}) {} ms after the first grant, {} ms after the \
                 holder's re-grant of ttl {} ms: the re-grant did not extend the lease",
                ms(answered - t0),
                ms(answered - t_re),
                ms(ttl)
            );
        }
        return Err(CaseError::Skipped(format!(
            "{label}: the machine is too slow to judge: the check meant for {} ms after the re-grant was answered \
             only after {} ms, past the re-grant's ttl of {} ms",
            ms(first_ends + ttl / 8 - t_re),
            ms(answered - t_re),
            ms(ttl)
        )));
    }
    // Once the re-grant's ttl has passed, the lease is gone and the other owner gets in.
    sleep_until(t_re + ttl).await;
    let deadline = Instant::now() + ttl;
    let granted = loop {
        if let TryLock::Acquired { token } = rival.try_lock(&Claim::new(&name, b, ttl), false).await? {
            break Some(token);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let freed = granted.is_some();
    let _ = rival.release(&name, b).await;
    ensure!(
        freed,
        "{label}: the lease was still held {} ms after the re-grant of ttl {} ms",
        ms(t_re.elapsed()),
        ms(ttl)
    );
    ensure!(
        granted.is_some_and(|t| t > first),
        "{label}: the next owner's token {granted:?} is not above the holder's {first}"
    );
    Ok(format!(
        "{label}: refused {} ms after the first grant, free again {} ms after it (ttl {} ms, re-grant at {} ms)",
        ms(answered - t0),
        ms(t0.elapsed()),
        ms(ttl),
        ms(t_re - t0)
    ))
}
