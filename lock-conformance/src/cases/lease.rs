//! The lease: validity, renewal, expiry, owner checks, the lost signal, release and drop.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{DistributedLockExt, Lease, LeaseModel, LockError};
use tokio::time::Instant;

use super::{ensure, eventually, fail, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

/// `valid_until` lies in `(now, t0 + ttl]` with `t0` taken before the call; a fresh lease is
/// valid and not lost.
pub async fn lease_validity(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "lease_validity").await?;
    let c = cx.client().await?;
    let opts = cx.opts(cx.ttl());
    let t0 = Instant::now();
    let lease = c.acquire(&cx.name("v")?, &opts).await?;
    let t1 = Instant::now();
    let vu = lease.valid_until();
    ensure!(vu <= t0 + opts.ttl, "valid_until is {} ms past t0 + ttl", ms(vu - (t0 + opts.ttl)));
    ensure!(vu > t1, "valid_until lies before the acquire returned");
    // A deployment whose leases can move to another node's clock allows for that too.
    let allowance = opts.drift() + c.capabilities().max_clock_offset;
    ensure!(vu + allowance + (t1 - t0) >= t0 + opts.ttl, "valid_until is far shorter than ttl − drift");
    ensure!(lease.is_valid() && !lease.lost().is_fired(), "a fresh lease is not valid");
    ensure!(lease.ttl() == opts.ttl, "lease ttl {:?} != asked {:?}", lease.ttl(), opts.ttl);
    ensure!(lease.name() == &cx.name("v")?, "lease name {} differs", lease.name());
    lease.release().await?;
    ensure!(!lease.is_valid(), "a released lease still claims to be valid");
    Ok(format!("valid for {} ms of a {} ms ttl", ms(vu - t1), ms(opts.ttl)))
}

/// With auto-renew on, the holder keeps the lock for four ttls: nobody else gets it, the lease
/// stays valid and `valid_until` moves forward.
pub async fn auto_renew_keeps_lock(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "auto_renew_keeps_lock").await?;
    let name = cx.name("renewed")?;
    let [a, b] = cx.clients().await?;
    let opts = cx.opts(cx.ttl());
    let lease = a.acquire(&name, &opts).await?;
    let first_vu = lease.valid_until();
    let end = Instant::now() + cx.ttl() * 4;
    let mut probes = 0;
    while Instant::now() < end {
        tokio::time::sleep(cx.ttl() / 4).await;
        ensure!(lease.is_valid(), "the lease turned invalid after {probes} probes: {:?}", lease.lost().reason());
        if let Some(other) = b.try_acquire(&name, &opts).await? {
            let t = other.token();
            drop(other);
            fail!("another client acquired (token {t}) while auto-renewal should hold the lock");
        }
        probes += 1;
    }
    ensure!(lease.valid_until() > first_vu + cx.ttl(), "valid_until did not move forward by renewals");
    lease.release().await?;
    ensure!(b.try_acquire(&name, &opts).await?.is_some(), "the lock was not free after release");
    Ok(format!("held {} ttls, {probes} probes", 4))
}

/// `renew()` with auto-renew off extends the lease on the server: past the original expiry the
/// lock is still held.
pub async fn manual_renew_extends(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "manual_renew_extends").await?;
    let name = cx.name("manual")?;
    let [a, b] = cx.clients().await?;
    let opts = cx.opts(cx.ttl()).auto_renew(false);
    let t0 = Instant::now();
    let lease = a.acquire(&name, &opts).await?;
    let vu0 = lease.valid_until();
    let mut renewals = 0;
    // Renew at half-ttl steps until well past the first lease's end.
    while Instant::now() < t0 + cx.ttl() * 2 {
        tokio::time::sleep(cx.ttl() / 2).await;
        lease.renew().await?;
        renewals += 1;
        ensure!(
            b.try_acquire(&name, &opts).await?.is_none(),
            "another client acquired right after renewal #{renewals}"
        );
    }
    ensure!(lease.valid_until() > vu0 + cx.ttl(), "renew() did not move valid_until forward");
    ensure!(lease.is_valid(), "the renewed lease is not valid");
    lease.release().await?;
    Ok(format!("{renewals} manual renewals held the lock for {} ms", ms(t0.elapsed())))
}

/// A holder vanishes; another client gets the lock after expiry — never while the first could
/// still rely on it, and not much later than the expiry bound.
pub async fn expiry_of_vanished_holder(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "expiry_of_vanished_holder").await?;
    let name = cx.name("vanished")?;
    let holder = cx.vanishing_holder(&name).await?;
    let (lease, tb) = cx.take_over(&holder, &name).await?;
    let after = tb - holder.t0;
    ensure!(
        holder.lease.valid_until() <= tb,
        "another client got the lock {} ms before the vanished holder's valid_until",
        ms(holder.lease.valid_until() - tb)
    );
    let bound = cx.expiry() * 3 + Duration::from_secs(1);
    ensure!(
        after <= bound,
        "the lock was freed only {} ms after the holder vanished (bound {} ms)",
        ms(after),
        ms(bound)
    );
    let fired = eventually(cx.ttl(), Duration::from_millis(10), || async { holder.lease.lost().is_fired() }).await;
    ensure!(fired, "the vanished holder's lost signal never fired although another client holds the lock");
    lease.release().await?;
    Ok(format!("freed {} ms after the holder's t0 (ttl {} ms)", ms(after), ms(cx.ttl())))
}

/// The lease of a client that took the lock over: still valid after what the former holder
/// tried, and released.
async fn new_holder_unharmed(new: Lease) -> CaseResult {
    ensure!(new.is_valid(), "the new holder's lease turned invalid");
    new.release().await?;
    Ok(String::new())
}

/// Releasing a lease that was lost returns `Lost` and leaves the new holder's lock alone.
pub async fn release_is_owner_checked(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "release_is_owner_checked").await?;
    let name = cx.name("release")?;
    let holder = cx.vanishing_holder(&name).await?;
    let (new, _) = cx.take_over(&holder, &name).await?;
    super::stale_release_is_lost(&cx, &holder.lease, &name, "releasing a lost lease", "the former holder's release")
        .await?;
    new_holder_unharmed(new).await
}

/// `renew()` never frees the lock (py-sherlock's renew once ran the release script); renewing a lost
/// lease returns `Lost` and does not take the lock back.
pub async fn renew_is_owner_checked(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "renew_is_owner_checked").await?;
    let name = cx.name("renew")?;
    let c = cx.client().await?;
    let opts = cx.opts(cx.ttl());
    let holder = cx.vanishing_holder(&name).await?;
    holder.lease.renew().await?;
    ensure!(c.try_acquire(&name, &opts).await?.is_none(), "renew() freed the lock");
    let (new, _) = cx.take_over(&holder, &name).await?;
    match holder.lease.renew().await {
        Err(LockError::Lost { .. }) => {}
        Ok(()) => fail!("renewing a lost lease succeeded while another client holds the lock"),
        Err(e) => fail!("renewing a lost lease returned {e}; it must return Lost"),
    }
    ensure!(!holder.lease.is_valid(), "the lost lease is valid again after renew()");
    ensure!(c.try_acquire(&name, &opts).await?.is_none(), "the former holder's renew freed the new holder's lock");
    new.renew().await?;
    new_holder_unharmed(new).await
}

/// The lost signal fires once, with a reason, `is_valid` turns false (for observers too), and
/// later calls neither re-fire nor change it.
pub async fn lost_signal(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "lost_signal").await?;
    let name = cx.name("lost")?;
    let holder = cx.vanishing_holder(&name).await?;
    let lost = holder.lease.lost();
    let observer = holder.lease.observer();
    ensure!(!lost.is_fired() && lost.reason().is_none(), "the lost signal fired on a fresh lease");
    let waiter = tokio::spawn(lost.fired());
    holder.vanish().await;
    let bound = cx.expiry() * 3 + Duration::from_secs(1);
    let fired_in = tokio::time::timeout(bound, waiter).await;
    holder.heal().await;
    ensure!(fired_in.is_ok(), "the lost signal did not fire within {} ms of the holder vanishing", ms(bound));
    ensure!(lost.is_fired(), "is_fired is false after the signal fired");
    let reason = lost.reason().map(str::to_owned);
    ensure!(reason.is_some(), "the lost signal carries no reason");
    ensure!(!holder.lease.is_valid() && !observer.is_valid(), "is_valid is still true after loss");
    ensure!(
        matches!(holder.lease.renew().await, Err(LockError::Lost { .. })),
        "renew() after loss did not return Lost"
    );
    ensure!(lost.reason().map(str::to_owned) == reason, "the loss reason changed: the signal fired twice");
    // A fresh await resolves at once.
    ensure!(
        tokio::time::timeout(Duration::from_millis(100), lost.fired()).await.is_ok(),
        "awaiting a fired signal again did not resolve at once"
    );
    Ok(format!("reason: {}", reason.unwrap_or_default()))
}

/// The lost signal fires by `valid_until`, give or take scheduling: for a holder that stops
/// renewing and, over a linked client cut off, for a per-lock holder whose renewals go
/// unanswered. A later signal leaves a holder acting on a lease another client may have taken.
pub async fn lost_by_valid_until(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "lost_by_valid_until").await?;
    // Wake-up latency of a busy two-core machine, never a whole ttl.
    let slack = (cx.ttl() / 3).max(Duration::from_millis(200));
    let holder = cx.vanishing_holder(&cx.name("vanished")?).await?;
    holder.vanish().await;
    let late = lost_after_valid_until(&holder.lease, cx.expiry() * 3).await;
    holder.heal().await;
    let late = late?;
    ensure!(
        late <= slack,
        "a holder that stopped renewing was told it lost its lease {} ms after valid_until",
        ms(late)
    );
    let mut notes = vec![format!("stopped renewing: lost {} ms after valid_until", ms(late))];
    if cx.caps.lease_model == LeaseModel::PerSession {
        return Ok(notes.join("; "));
    }
    match cx.linked().await {
        Ok((client, link)) => {
            let lease = client.acquire(&cx.name("cut")?, &cx.opts(cx.expiry() * 2)).await?;
            link.set_partitioned(true).await;
            let late = lost_after_valid_until(&lease, cx.expiry() * 3).await;
            link.set_partitioned(false).await;
            let late = late?;
            ensure!(
                late <= slack,
                "a holder cut off while renewing was told it lost {} ms after valid_until",
                ms(late)
            );
            notes.push(format!("renewals cut off: lost {} ms after valid_until", ms(late)));
        }
        Err(CaseError::NotApplicable(r)) => notes.push(format!("NOT CHECKED with renewals cut off: {r}")),
        Err(e) => return Err(e),
    }
    Ok(notes.join("; "))
}

/// Waits up to `bound` for the lease's lost signal; how long after `valid_until` it fired.
async fn lost_after_valid_until(lease: &Lease, bound: Duration) -> Result<Duration, CaseError> {
    let fired = tokio::time::timeout(bound, lease.lost().fired()).await.is_ok();
    let at = Instant::now();
    ensure!(fired, "the lost signal did not fire within {} ms", ms(bound));
    Ok(at.saturating_duration_since(lease.valid_until()))
}

/// `release()` twice is `Ok`; a late third release after another client took the lock still
/// leaves that client's lock alone.
pub async fn release_idempotent(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "release_idempotent").await?;
    let name = cx.name("idem")?;
    let [a, b, c] = cx.clients().await?;
    let opts = cx.opts(cx.ttl() * 2);
    let lease = a.acquire(&name, &opts).await?;
    lease.release().await?;
    if let Err(e) = lease.release().await {
        fail!("a second release returned {e}; release must be idempotent");
    }
    let other = b.acquire(&name, &opts).await?;
    if let Err(e) = lease.release().await {
        fail!("a third release returned {e}");
    }
    ensure!(c.try_acquire(&name, &opts).await?.is_none(), "a repeated release freed another holder's lock");
    other.release().await?;
    Ok(String::new())
}

/// Dropping a lease without releasing it frees the lock in the background, long before its ttl.
pub async fn drop_releases(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "drop_releases").await?;
    let name = cx.name("dropped")?;
    let [a, b] = cx.clients().await?;
    let long = (cx.ttl() * 20).min(cx.caps.max_ttl);
    let lease = a.acquire(&name, &cx.opts(long).ttl(long)).await?;
    let t = Instant::now();
    drop(lease);
    let wait = (cx.ttl() * 2).min(long / 2);
    match b.acquire(&name, &cx.opts(wait)).await {
        Ok(l) => {
            let took = t.elapsed();
            l.release().await?;
            Ok(format!("free {} ms after the drop (ttl {} ms)", ms(took), ms(long)))
        }
        Err(LockError::Timeout { .. }) => {
            fail!("a dropped lease still held the lock {} ms later (its ttl is {} ms)", ms(wait), ms(long))
        }
        Err(e) => Err(e.into()),
    }
}

/// `run_locked` returns the closure's value and releases; when the lease is lost mid-way it
/// stops the closure and returns `Lost`.
pub async fn run_locked(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "run_locked").await?;
    let name = cx.name("run")?;
    let [a, b] = cx.clients().await?;
    let opts = cx.opts(cx.ttl() * 2);
    let (token, valid) = a.run_locked(&name, &opts, |lease| async move { (lease.token(), lease.is_valid()) }).await?;
    ensure!(valid, "the lease handed to run_locked's closure was not valid");
    let free = b.try_acquire(&name, &opts).await?;
    ensure!(free.is_some(), "run_locked did not release the lock (token {token})");
    drop(free);

    // Loss while running: a holder that cannot keep its lease.
    let lost_name = cx.name("run-lost")?;
    let (client, link) = match cx.caps.lease_model {
        LeaseModel::PerSession => {
            let (c, l) = cx.linked().await.map_err(|e| match e {
                CaseError::NotApplicable(r) => super::missing_hook(format!(
                    "the success path passed; losing a per-session lease needs a link ({})",
                    r.trim_start_matches(super::MISSING_HOOK)
                )),
                o => o,
            })?;
            (c, Some(l))
        }
        _ => (cx.client().await?, None),
    };
    let opts = match link {
        Some(_) => cx.opts(cx.expiry() * 2),
        None => cx.opts(cx.expiry() * 2).auto_renew(false),
    };
    let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (f2, link2) = (finished.clone(), link.clone());
    let long = cx.expiry() * 10;
    let t = Instant::now();
    let r = client
        .run_locked(&lost_name, &opts, move |_lease| async move {
            if let Some(l) = link2 {
                l.set_partitioned(true).await;
            }
            tokio::time::sleep(long).await;
            f2.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .await;
    if let Some(l) = &link {
        l.set_partitioned(false).await;
    }
    match r {
        Err(LockError::Lost { .. }) => {}
        Ok(()) => fail!("run_locked ran its closure to the end although the lease was lost"),
        Err(e) => fail!("run_locked returned {e} instead of Lost"),
    }
    ensure!(!finished.load(std::sync::atomic::Ordering::SeqCst), "the closure finished after loss");
    Ok(format!("stopped {} ms after start on loss", ms(t.elapsed())))
}

/// A `release()` cancelled at each of its first await points (polled `k` times, then dropped
/// together with the lease, as a `select!` or an aborted task does) still frees the lock: another
/// client gets it well before the lease's ttl. The holder's link adds a little latency, so the
/// release request is in flight when the caller goes away. The same for `run_locked` dropped
/// while it releases.
pub async fn release_cancelled(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "release_cancelled").await?;
    let (holder, link) = cx.linked().await?;
    let other = cx.client().await?;
    let long = (cx.expiry() * 6).min(cx.caps.max_ttl);
    let bound = cx.expiry() * 2;
    let opts = cx.opts(cx.ttl() * 4).ttl(long);
    let mut freed_after = Vec::new();
    for polls in 0..8u32 {
        let name = cx.name(&format!("cancelled-{polls}"))?;
        let lease = holder.acquire(&name, &opts).await?;
        link.set_latency(Duration::from_millis(5)).await;
        {
            let mut release = Box::pin(lease.release());
            for i in 0..polls {
                if futures::poll!(&mut release).is_ready() {
                    break;
                }
                // Alternate: let the runtime run other tasks, or let the request travel a bit.
                if i % 2 == 0 {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        drop(lease);
        link.set_latency(Duration::ZERO).await;
        let t = Instant::now();
        match other.acquire(&name, &cx.opts(bound)).await {
            Ok(l) => {
                freed_after.push(ms(t.elapsed()));
                l.release().await?;
            }
            Err(LockError::Timeout { .. }) => fail!(
                "release() dropped after {polls} polls left the lock held for {} ms (its ttl is {} ms): a release, \
                 once begun, must complete in the background",
                ms(bound),
                ms(long)
            ),
            Err(e) => return Err(e.into()),
        }
    }
    // run_locked dropped while it releases.
    let name = cx.name("run-locked")?;
    link.set_latency(Duration::from_millis(5)).await;
    let run = holder.run_locked(&name, &opts, |_| async {});
    let _ = tokio::time::timeout(Duration::from_millis(12), run).await;
    link.set_latency(Duration::ZERO).await;
    match other.acquire(&name, &cx.opts(bound)).await {
        Ok(l) => l.release().await?,
        Err(LockError::Timeout { .. }) => {
            fail!("run_locked dropped mid-way left the lock held for {} ms (ttl {} ms)", ms(bound), ms(long))
        }
        Err(e) => return Err(e.into()),
    }
    Ok(format!("free again after {freed_after:?} ms (ttl {} ms)", ms(long)))
}

/// A `release()` that failed because the server was out of reach is retried by the next
/// `release()`, which answers `Ok` only once the server freed the lock: another client then
/// gets it at once, long before the ttl.
pub async fn release_retried_after_failure(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "release_retried_after_failure").await?;
    let (holder, link) = cx.linked().await?;
    let other = cx.client().await?;
    let name = cx.name("retried")?;
    let long = (cx.expiry() * 6).min(cx.caps.max_ttl);
    let lease = holder.acquire(&name, &cx.opts(cx.ttl() * 4).ttl(long)).await?;
    link.set_partitioned(true).await;
    let first = lease.release().await;
    link.set_partitioned(false).await;
    if first.is_ok() {
        fail!("release() answered Ok while the holder was cut off from the server");
    }
    let second = lease.release().await;
    match second {
        Ok(()) => {}
        // A per-session backend may have ended the session meanwhile: the lock is free then too.
        Err(LockError::Lost { .. }) if lease.lost().is_fired() => {}
        Err(e) => fail!("the retried release failed after healing: {e}"),
    }
    let t = Instant::now();
    let bound = cx.expiry() * 2;
    match other.acquire(&name, &cx.opts(bound)).await {
        Ok(l) => {
            let took = t.elapsed();
            l.release().await?;
            Ok(format!(
                "first release: {}; free {} ms after the retried one",
                first.err().map(|e| e.to_string()).unwrap_or_default(),
                ms(took)
            ))
        }
        Err(LockError::Timeout { .. }) => fail!(
            "release() answered {second:?} after a failed release, but the lock stayed held for {} ms (ttl {} ms)",
            ms(bound),
            ms(long)
        ),
        Err(e) => Err(e.into()),
    }
}

/// A release whose request reached the server but whose answer was lost (every connection of
/// the holder reset while the answer was on its way) released the lock: however the client
/// goes on (retrying in place, or answering `Unavailable` for the next `release()` to retry),
/// finding the entry gone after its own unanswered try must answer `Ok`, never `Lost`: nothing
/// else touched the lock. Three rounds, each reset half way through the answer's trip.
pub async fn release_reply_lost(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "release_reply_lost").await?;
    let (holder, link) = cx.linked().await?;
    let other = cx.client().await?;
    let delay = cx.ttl() / 10;
    let mut firsts = Vec::new();
    for round in 0..3 {
        let name = cx.name(&format!("reply-lost/{round}"))?;
        let lease = holder.acquire(&name, &cx.opts(cx.ttl() * 4)).await?;
        link.set_latency(delay).await;
        let reset = async {
            // The request arrives after one delay, its answer after two: cut in between.
            tokio::time::sleep(delay * 3 / 2).await;
            link.reset_connections().await;
        };
        let (first, ()) = tokio::join!(lease.release(), reset);
        link.set_latency(Duration::ZERO).await;
        let first_text = match &first {
            Ok(()) => "Ok".to_owned(),
            Err(e) => e.to_string().chars().take(60).collect(),
        };
        let answer = match first {
            Err(LockError::Unavailable { .. }) => lease.release().await,
            other => other,
        };
        match answer {
            Ok(()) => {}
            Err(LockError::Lost { .. }) => fail!(
                "round {round}: a release whose answer was lost (first answer {first_text}) reported the lease \
                 lost; nothing but the release touched it ({:?})",
                lease.lost().reason()
            ),
            Err(e) => fail!("round {round}: the release after the reset failed: {e} (first answer {first_text})"),
        }
        ensure!(!lease.lost().is_fired(), "round {round}: the released lease fired its lost signal");
        match other.try_acquire(&name, &cx.opts(cx.ttl())).await? {
            Some(next) => next.release().await?,
            None => fail!("round {round}: release() answered Ok but the lock was still held"),
        }
        firsts.push(first_text);
    }
    Ok(format!("{} ms each way, reset after {} ms; first answers {firsts:?}", ms(delay), ms(delay * 3 / 2)))
}
