//! Fault cases (`fault_*`): a holder that stops renewing, cut connections, partitions, latency,
//! a paused, restarted or stopped server. Network faults use [`Fixture::linked_client`], server
//! faults [`Fixture::server`]; without the hook a case is `NotApplicable`, with that reason.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{DistributedLock, FencedRegister, LockError};
use tokio::time::Instant;

use super::{ensure, eventually, fail, missing_hook, ms, CaseError, CaseResult, Ctx};
use crate::{Fixture, ServerControl};

fn server_of(cx: &Ctx<'_>) -> Result<Arc<dyn ServerControl>, CaseError> {
    cx.fx.server().ok_or_else(|| {
        missing_hook(
            "the fixture does not control the server process (Fixture::server is None), e.g. a server given by URL",
        )
    })
}

/// Brings a stopped or paused server back even when the case fails half-way.
struct Restore(Option<Arc<dyn ServerControl>>, bool);

impl Restore {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let Some(s) = self.0.take() else { return };
        let paused = self.1;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = if paused { s.pause(false).await } else { s.start().await };
            });
        }
    }
}

/// A holder stops renewing (its process is "paused") past its ttl: another client acquires,
/// the old holder's lost signal has fired, and its write with the old token is rejected by a
/// fenced register.
pub async fn fault_pause_past_ttl(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_pause_past_ttl").await?;
    let name = cx.name("paused")?;
    let reg = FencedRegister::new(0u32);
    let holder = cx.vanishing_holder(&name).await?;
    let old = holder.lease.token();
    ensure!(reg.write_as(holder.lease.owner(), old, |v| *v += 1).is_ok(), "the holder's first write was rejected");
    let (new, tb) = cx.take_over(&holder, &name).await?;
    ensure!(holder.lease.valid_until() <= tb, "another client acquired while the paused holder was still valid");
    ensure!(new.token() > old, "new token {} is not above the paused holder's {old}", new.token());
    ensure!(reg.write_as(new.owner(), new.token(), |v| *v += 10).is_ok(), "the new holder's write was rejected");
    let fired = eventually(cx.ttl(), Duration::from_millis(10), || async { holder.lease.lost().is_fired() }).await;
    ensure!(fired, "the paused holder's lost signal had not fired after another client acquired");
    ensure!(!holder.lease.is_valid(), "the paused holder still claims a valid lease");
    // The holder resumes and writes with the token it still has.
    ensure!(
        reg.write_as(holder.lease.owner(), holder.lease.token(), |v| *v += 100).is_err(),
        "the register accepted the paused holder's stale token"
    );
    ensure!(reg.read() == 11, "register value {} != 11", reg.read());
    new.release().await?;
    Ok(format!("stale token {old} rejected after {}", new.token()))
}

/// Resetting a client's connections: a holder either keeps its lease (renewals reconnect and
/// nobody else gets the lock) or is told it lost it — never both valid and superseded; a
/// waiter whose connections are cut still gets the lock after release; the client recovers.
pub async fn fault_connection_cut(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_connection_cut").await?;
    let (client, link) = cx.linked().await?;
    let other = cx.client().await?;
    let name = cx.name("cut-holder")?;
    let lease = client.acquire(&name, &cx.opts(cx.expiry() * 2)).await?;
    let end = Instant::now() + cx.ttl() * 2;
    let mut resets = 0;
    let mut stolen = None;
    while Instant::now() < end {
        link.reset_connections().await;
        resets += 1;
        tokio::time::sleep(cx.ttl() / 4).await;
        if let Some(l) = other.try_acquire(&name, &cx.opts(cx.ttl())).await.ok().flatten() {
            stolen = Some((Instant::now(), l));
            break;
        }
    }
    let outcome = match &stolen {
        Some((at, l)) => {
            ensure!(
                lease.valid_until() <= *at,
                "another client got the lock (token {}) while the holder's lease was valid after a connection cut",
                l.token()
            );
            let fired = eventually(cx.ttl(), Duration::from_millis(10), || async { lease.lost().is_fired() }).await;
            ensure!(fired, "the holder lost the lock to another client but its lost signal never fired");
            "lease lost and signalled"
        }
        None => {
            ensure!(
                lease.is_valid() || lease.lost().is_fired(),
                "the lease turned invalid without the lost signal firing"
            );
            if lease.is_valid() {
                "lease kept across resets"
            } else {
                "lease lost and signalled, lock not yet taken"
            }
        }
    };
    drop(stolen);
    let _ = lease.release().await;

    // A waiter whose connections are cut while it waits still gets the lock.
    let wname = cx.name("cut-waiter")?;
    let held = other.acquire(&wname, &cx.opts(cx.ttl())).await?;
    let (c2, n2, o2) = (client.clone(), wname.clone(), cx.opts(cx.ttl() * 6 + cx.expiry() * 2));
    let waiter = tokio::spawn(async move { c2.acquire(&n2, &o2).await });
    for _ in 0..3 {
        tokio::time::sleep(cx.ttl() / 6).await;
        link.reset_connections().await;
    }
    let released = Instant::now();
    held.release().await?;
    let got = match waiter.await {
        Ok(r) => r,
        Err(e) => fail!("the waiter panicked: {e}"),
    };
    let got =
        got.map_err(|e| CaseError::Failed(format!("a waiter whose connections were cut did not get the lock: {e}")))?;
    let handoff = released.elapsed();
    got.release().await?;
    Ok(format!("{resets} resets: {outcome}; cut waiter got the lock {} ms after release", ms(handoff)))
}

/// A holder is cut off (partition, connections kept open) for longer than its ttl: its lost
/// signal fires, another client acquires only after the holder's validity ended, the old
/// holder's release after healing returns `Lost` and frees nothing, its stale write is rejected,
/// and its client works again.
pub async fn fault_partition(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_partition").await?;
    let (client, link) = cx.linked().await?;
    let name = cx.name("partitioned")?;
    let reg = FencedRegister::new(0u32);
    let lease = client.acquire(&name, &cx.opts(cx.expiry() * 2)).await?;
    ensure!(reg.write_as(lease.owner(), lease.token(), |v| *v += 1).is_ok(), "first write rejected");
    link.set_partitioned(true).await;
    let cut_at = Instant::now();
    let b = cx.client().await?;
    let got = b.acquire(&name, &cx.opts(cx.expiry() * 4)).await;
    let tb = Instant::now();
    let fired = eventually(cx.ttl(), Duration::from_millis(10), || async { lease.lost().is_fired() }).await;
    link.set_partitioned(false).await;
    let new = got?;
    ensure!(
        lease.valid_until() <= tb,
        "another client acquired {} ms before the partitioned holder's valid_until",
        ms(lease.valid_until() - tb)
    );
    ensure!(fired, "the partitioned holder's lost signal did not fire");
    ensure!(reg.write_as(new.owner(), new.token(), |v| *v += 10).is_ok(), "the new holder's write was rejected");
    ensure!(
        reg.write_as(lease.owner(), lease.token(), |v| *v += 100).is_err(),
        "the register accepted the partitioned holder's stale token"
    );
    super::stale_release_is_lost(&cx, &lease, &name, "release after the partition healed", "the healed former holder")
        .await?;
    new.release().await?;
    // The healed client recovers.
    let again = client.acquire(&cx.name("after-heal")?, &cx.opts(cx.expiry() * 3)).await;
    let again =
        again.map_err(|e| CaseError::Failed(format!("the client did not recover after the partition healed: {e}")))?;
    again.release().await?;
    Ok(format!("taken over {} ms after the cut", ms(tb - cut_at)))
}

/// With latency added to every packet (a tenth of the ttl each way), acquire, renewal and
/// release still work and `valid_until` still counts from before the request was sent.
pub async fn fault_latency(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_latency").await?;
    let (client, link) = cx.linked().await?;
    let other = cx.client().await?;
    let name = cx.name("slow")?;
    let delay = cx.ttl() / 10;
    link.set_latency(delay).await;
    let t0 = Instant::now();
    let r = client.acquire(&name, &cx.opts(cx.ttl() * 4)).await;
    let acquired_in = t0.elapsed();
    let result = async {
        let lease = r?;
        // A request and its answer each cross the link once: at least two delays.
        if acquired_in < delay * 2 {
            let _ = lease.release().await;
            return Err(CaseError::NotApplicable(format!(
                "the fixture's link does not add latency (acquire took {} ms with {} ms set each way)",
                ms(acquired_in),
                ms(delay)
            )));
        }
        ensure!(lease.valid_until() <= t0 + cx.ttl(), "valid_until counts from after the request was sent");
        let end = Instant::now() + cx.ttl() * 2;
        while Instant::now() < end {
            tokio::time::sleep(cx.ttl() / 4).await;
            ensure!(lease.is_valid(), "a slow link made the lease lapse: {:?}", lease.lost().reason());
            ensure!(other.try_acquire(&name, &cx.opts(cx.ttl())).await?.is_none(), "another client got the held lock");
        }
        lease.release().await?;
        Ok(())
    }
    .await;
    link.set_latency(Duration::ZERO).await;
    result?;
    let free = other.try_acquire(&name, &cx.opts(cx.ttl())).await?;
    ensure!(free.is_some(), "the lock was not free after a release over a slow link");
    Ok(format!("{} ms latency each way; acquired in {} ms", ms(delay), ms(acquired_in)))
}

/// The server is paused (SIGSTOP) for longer than the ttl: the holder's lost signal fires on
/// time instead of hanging, requests answer `Unavailable` within their timeout, and after the
/// server resumes another client gets the lock.
pub async fn fault_server_pause(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_server_pause").await?;
    let server = server_of(&cx)?;
    let [a, b] = cx.clients().await?;
    let name = cx.name("paused-server")?;
    let lease = a.acquire(&name, &cx.opts(cx.expiry() * 2)).await?;
    server.pause(true).await?;
    let guard = Restore(Some(server.clone()), true);
    let paused_at = Instant::now();
    let t = Instant::now();
    let r = tokio::time::timeout(cx.request_timeout() * 3, b.try_acquire(&name, &cx.opts(cx.ttl()))).await;
    let answered = t.elapsed();
    match r {
        Err(_) => fail!("try_acquire against a paused server hung for {} ms", ms(answered)),
        Ok(Err(LockError::Unavailable { .. })) => {}
        Ok(Ok(Some(_))) => fail!("try_acquire got a lock that is held, from a paused server"),
        Ok(Ok(None)) => fail!("a paused server answered try_acquire"),
        Ok(Err(e)) => fail!("try_acquire against a paused server gave {e}, not Unavailable"),
    }
    let bound = cx.expiry() * 2 + Duration::from_secs(1);
    let fired = tokio::time::timeout(bound, lease.lost().fired()).await.is_ok();
    let lost_after = paused_at.elapsed();
    server.pause(false).await?;
    guard.disarm();
    ensure!(fired, "the holder's lost signal did not fire within {} ms of the server pausing", ms(bound));
    ensure!(!lease.is_valid(), "the lease is valid after its lost signal fired");
    let got = b.acquire(&name, &cx.opts(cx.expiry() * 4)).await;
    let got =
        got.map_err(|e| CaseError::Failed(format!("after the server resumed, the lock did not come free: {e}")))?;
    got.release().await?;
    Ok(format!("Unavailable in {} ms; lost signal {} ms after the pause", ms(answered), ms(lost_after)))
}

/// The server restarts (SIGKILL, start on the same address and data): a token issued after the
/// restart is above every token before it when `durable_fencing` is declared; a holder keeps a
/// `durable_leases` lease, and otherwise learns it lost it before anyone else can take it;
/// clients made before the restart work again.
pub async fn fault_server_restart(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_server_restart").await?;
    let server = server_of(&cx)?;
    let durable_leases = cx.caps.durable_leases && server.persistent();
    let [c, a, b] = cx.clients().await?;
    let tokens_name = cx.name("tokens")?;
    let mut before = Vec::new();
    for _ in 0..3 {
        let l = c.acquire(&tokens_name, &cx.opts(cx.ttl() * 2)).await?;
        before.push(l.token().get());
        l.release().await?;
    }
    let held_name = cx.name("held")?;
    let held = a.acquire(&held_name, &cx.opts(cx.ttl() * 2)).await?;
    server.stop().await?;
    let guard = Restore(Some(server.clone()), false);
    let down_at = Instant::now();
    tokio::time::sleep(cx.ttl() / 4).await;
    server.start().await?;
    guard.disarm();
    let downtime = down_at.elapsed();

    let recover = cx.expiry() * 4 + cx.ttl() * 2;
    let after = c.acquire(&tokens_name, &cx.opts(recover)).await;
    let after =
        after.map_err(|e| CaseError::Failed(format!("a client made before the restart did not recover: {e}")))?;
    let max_before = before.iter().max().copied().unwrap_or(0);
    let token_note = if after.token().get() > max_before {
        format!("token {} after {before:?}", after.token())
    } else if cx.caps.durable_fencing {
        fail!(
            "durable_fencing is declared, but after the restart the token went from {max_before} to {}",
            after.token()
        )
    } else {
        format!("tokens restarted ({} after {before:?}), allowed: durable_fencing = false", after.token())
    };
    after.release().await?;

    let held_note = if durable_leases {
        // The lease survives the restart, unless the downtime outlasted the holder's validity.
        if held.is_valid() {
            let r = b.try_acquire(&held_name, &cx.opts(cx.ttl())).await?;
            ensure!(
                r.is_none() || !held.is_valid(),
                "durable_leases is declared, but another client took a held lock after the restart"
            );
            "lease kept"
        } else {
            "lease lapsed during the downtime (signalled)"
        }
    } else {
        // The restarted server forgot the lease: the holder must learn it before anyone relies
        // on the lock being free — within a renewal round.
        let bound = cx.expiry() * 2 + cx.request_timeout() * 2;
        let fired = tokio::time::timeout(bound, held.lost().fired()).await.is_ok();
        ensure!(
            fired,
            "durable_leases is false, but {} ms after the restart the holder still had not been told its lease is gone",
            ms(bound)
        );
        let got = b.acquire(&held_name, &cx.opts(cx.expiry() * 4)).await?;
        ensure!(!held.is_valid(), "two valid holders after the restart");
        got.release().await?;
        "lease loss signalled"
    };
    let _ = held.release().await;
    Ok(format!("down {} ms; {token_note}; {held_note}", ms(downtime)))
}

async fn expect_unavailable(
    what: &str,
    c: &Arc<dyn DistributedLock>,
    cx: &Ctx<'_>,
    name: &lock_core::LockName,
) -> Result<String, CaseError> {
    let wait = cx.ttl();
    let t = Instant::now();
    let bound = cx.request_timeout() + Duration::from_millis(1500);
    match tokio::time::timeout(bound * 3, c.try_acquire(name, &cx.opts(wait))).await {
        Err(_) => fail!("{what}: try_acquire hung for {} ms", ms(t.elapsed())),
        Ok(Err(LockError::Unavailable { .. })) => {}
        Ok(r) => fail!("{what}: try_acquire gave {:?}, not Unavailable", r.map(|o| o.map(|l| l.token()))),
    }
    let try_ms = t.elapsed();
    ensure!(try_ms <= bound, "{what}: try_acquire took {} ms to give Unavailable (bound {} ms)", ms(try_ms), ms(bound));
    let t = Instant::now();
    // "Never hang longer than the caller's wait": a second of slack for a slow machine.
    let bound = wait + Duration::from_secs(1);
    match tokio::time::timeout(bound * 3, c.acquire(name, &cx.opts(wait))).await {
        Err(_) => fail!("{what}: acquire hung for {} ms with a wait of {} ms", ms(t.elapsed()), ms(wait)),
        Ok(Err(LockError::Unavailable { .. })) => {}
        Ok(r) => fail!("{what}: acquire gave {:?}, not Unavailable", r.map(|l| l.token())),
    }
    let acq_ms = t.elapsed();
    ensure!(acq_ms <= bound, "{what}: acquire took {} ms for a wait of {} ms", ms(acq_ms), ms(wait));
    Ok(format!("{what}: try_acquire {} ms, acquire {} ms", ms(try_ms), ms(acq_ms)))
}

/// A server that is down (or unreachable) gives `Unavailable` within the caller's wait — no
/// hang — and the client works again once the server is back.
pub async fn fault_unavailable(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_unavailable").await?;
    let name = cx.name("down")?;
    let mut notes = Vec::new();
    let mut applicable = false;
    if let Some(server) = cx.fx.server() {
        applicable = true;
        let c = cx.client().await?;
        // Warm the client up so the failure is a lost server, not a failed first connect.
        c.try_acquire(&cx.name("warm")?, &cx.opts(cx.ttl())).await?;
        server.stop().await?;
        let guard = Restore(Some(server.clone()), false);
        let r = expect_unavailable("server stopped", &c, &cx, &name).await;
        server.start().await?;
        guard.disarm();
        notes.push(r?);
        let back = c.acquire(&name, &cx.opts(cx.expiry() * 4 + cx.ttl() * 2)).await;
        let back =
            back.map_err(|e| CaseError::Failed(format!("the client did not recover after the server came back: {e}")))?;
        back.release().await?;
    }
    match cx.linked().await {
        Ok((c, link)) => {
            applicable = true;
            c.try_acquire(&cx.name("warm-link")?, &cx.opts(cx.ttl())).await?;
            link.set_partitioned(true).await;
            let r = expect_unavailable("partitioned", &c, &cx, &name).await;
            link.set_partitioned(false).await;
            notes.push(r?);
            let back = c.acquire(&name, &cx.opts(cx.expiry() * 4)).await;
            let back =
                back.map_err(|e| CaseError::Failed(format!("the client did not recover after the partition: {e}")))?;
            back.release().await?;
        }
        Err(CaseError::NotApplicable(_)) => {}
        Err(e) => return Err(e),
    }
    if !applicable {
        return Err(missing_hook("the fixture offers neither server control (Fixture::server) nor a linked client"));
    }
    Ok(notes.join("; "))
}

/// The server-side entry of a held lock is deleted behind the holder's back (madelson's
/// `PrepareForHandleLost`): the holder's lost signal fires within a renewal round, another
/// client acquires with a higher token, and the former holder's release frees nothing.
pub async fn fault_entry_deleted(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_entry_deleted").await?;
    let name = cx.name("deleted")?;
    let a = cx.client().await?;
    let lease = a.acquire(&name, &cx.opts(cx.ttl() * 2)).await?;
    if !cx.fx.delete_entry(&name).await? {
        let _ = lease.release().await;
        return Err(missing_hook("the fixture cannot delete a lock's server-side entry (Fixture::delete_entry)"));
    }
    let t = Instant::now();
    let bound = cx.expiry() + cx.request_timeout() + Duration::from_secs(1);
    let fired = tokio::time::timeout(bound, lease.lost().fired()).await.is_ok();
    ensure!(fired, "the holder still believed it held the lock {} ms after its entry was deleted", ms(t.elapsed()));
    let noticed = t.elapsed();
    ensure!(!lease.is_valid(), "the lease is valid after its lost signal fired");
    let b = cx.client().await?;
    let next = b.acquire(&name, &cx.opts(cx.expiry() * 2)).await?;
    ensure!(
        next.token() > lease.token(),
        "token {} after the deleted holder's {}: fencing state was lost with the entry",
        next.token(),
        lease.token()
    );
    super::stale_release_is_lost(&cx, &lease, &name, "releasing the deleted lease", "the former holder's release")
        .await?;
    next.release().await?;
    Ok(format!("loss noticed {} ms after the delete", ms(noticed)))
}

/// One client holds several leases whose renewals are due together (renewals may be sent as one
/// batch, e.g. one statement for many leases); one entry is deleted behind its holder's back.
/// Only that lease may be lost: a batch answered as a whole would either keep the deleted lease
/// alive or take the others down with it.
pub async fn fault_entry_deleted_among_many(fx: &dyn Fixture) -> CaseResult {
    const HELD: usize = 6;
    const DELETED: usize = 3;
    let cx = Ctx::new(fx, "fault_entry_deleted_among_many").await?;
    let a = cx.client().await?;
    let mut names = Vec::with_capacity(HELD);
    let mut leases = Vec::with_capacity(HELD);
    for i in 0..HELD {
        let name = cx.name(&format!("many/{i}"))?;
        leases.push(a.acquire(&name, &cx.opts(cx.ttl() * 2)).await?);
        names.push(name);
    }
    if !cx.fx.delete_entry(&names[DELETED]).await? {
        for lease in &leases {
            let _ = lease.release().await;
        }
        return Err(missing_hook("the fixture cannot delete a lock's server-side entry (Fixture::delete_entry)"));
    }
    let t = Instant::now();
    let bound = cx.expiry() + cx.request_timeout() + Duration::from_secs(1);
    let fired = tokio::time::timeout(bound, leases[DELETED].lost().fired()).await.is_ok();
    ensure!(fired, "the holder still believed it held the deleted lock {} ms after the delete", ms(t.elapsed()));
    // Let the others go through at least one more renewal round after the one that found the loss.
    tokio::time::sleep(cx.ttl() / 2).await;
    for (i, lease) in leases.iter().enumerate().filter(|(i, _)| *i != DELETED) {
        ensure!(
            !lease.lost().is_fired() && lease.is_valid(),
            "lease {i} of {HELD} was lost with the deleted one ({:?}): a batch of renewals must answer each lease",
            lease.lost().reason()
        );
    }
    for (i, lease) in leases.iter().enumerate().filter(|(i, _)| *i != DELETED) {
        lease.release().await.map_err(|e| CaseError::Failed(format!("releasing lease {i}: {e}")))?;
    }
    Ok(format!("loss of 1 of {HELD} noticed {} ms after the delete; the others held on", ms(t.elapsed())))
}
