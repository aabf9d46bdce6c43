//! A server that lost its state grants nothing while a lease it forgot may still be believed
//! valid by its holder (docs/contract.md §3): the window right after an empty restart, when every waiter
//! retries at once and the old holder has not renewed yet.

use lock_core::{Lease, LockError};
use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

use super::{ensure, missing_hook, ms, CaseError, CaseResult, Ctx};
use crate::{Fixture, ServerControl};

/// Brings a stopped server back even when the case fails half-way.
struct Restart(Option<Arc<dyn ServerControl>>);

impl Drop for Restart {
    fn drop(&mut self) {
        let Some(s) = self.0.take() else { return };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = s.start().await;
            });
        }
    }
}

/// One held lease and the conflicting acquire another client makes after the restart.
struct Probe {
    kind: &'static str,
    held: Lease,
}

/// Holders of every kind the backend declares (exclusive; a reader and a writer; a permit of
/// one), none renewing, so each believes its lease until its `valid_until`; an empty restart;
/// then, at once, another client asks for each in a conflicting way. Every grant must come only
/// once the lease it conflicts with can no longer be valid. Backends that keep their state
/// across restarts pass because the locks are still held.
pub async fn fault_restart_quiet_period(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fault_restart_quiet_period").await?;
    let Some(server) = cx.fx.server() else {
        return Err(missing_hook(
            "the fixture does not control the server process (Fixture::server is None), so the suite cannot \
             restart it",
        ));
    };
    let hold = cx.opts(cx.ttl() * 2).auto_renew(false);
    let after_restart = cx.opts(cx.expiry() * 4 + cx.ttl() * 4);
    let (a, b) = (cx.client().await?, cx.client().await?);
    let rw = match (cx.caps.rw_lock, cx.fx.rw_client().await, cx.fx.rw_client().await) {
        (true, Ok(Some(x)), Ok(Some(y))) => Some((x, y)),
        (true, x, y) => return Err(no_client("read-write lock", x.err().or(y.err()))),
        _ => None,
    };
    let sem = match (cx.caps.semaphore, cx.fx.semaphore_client().await, cx.fx.semaphore_client().await) {
        (true, Ok(Some(x)), Ok(Some(y))) => Some((x, y)),
        (true, x, y) => return Err(no_client("semaphore", x.err().or(y.err()))),
        _ => None,
    };
    // Warm the second clients up, so their first request after the restart is no first connect.
    b.try_acquire(&cx.name("warm")?, &cx.opts(cx.ttl())).await?;

    let names = [cx.name("exclusive")?, cx.name("read")?, cx.name("write")?, cx.name("permit")?];
    let mut probes = vec![Probe { kind: "exclusive", held: a.acquire(&names[0], &hold).await? }];
    if let Some((ra, _)) = &rw {
        probes.push(Probe { kind: "read (then a writer)", held: ra.acquire_read(&names[1], &hold).await? });
        probes.push(Probe { kind: "write (then a reader)", held: ra.acquire_write(&names[2], &hold).await? });
    }
    if let Some((sa, _)) = &sem {
        probes.push(Probe { kind: "permit of 1", held: sa.acquire_permit(&names[3], 1, &hold).await? });
    }

    server.stop().await?;
    let mut guard = Restart(Some(server.clone()));
    let down_at = Instant::now();
    server.start().await?;
    guard.0 = None;
    let restarted_at = Instant::now();
    let earliest_end = probes.iter().map(|p| p.held.valid_until()).min().unwrap_or(restarted_at);
    if restarted_at >= earliest_end {
        // Nothing can be granted early (a delayed restart, or a slow one): the promise holds,
        // but the window this case looks for did not occur; the detail says so.
        for p in probes {
            let _ = p.held.release().await;
        }
        return Ok(format!(
            "the server was back only {} ms after the stop, when every lease had ended: no early-grant window",
            ms(restarted_at.saturating_duration_since(down_at))
        ));
    }

    // Every conflicting acquire at once, as waiters woken by a reconnect would.
    let mut attempts: Vec<std::pin::Pin<Box<dyn Future<Output = Granted> + Send + '_>>> = Vec::new();
    attempts.push(Box::pin(timed(b.acquire(&names[0], &after_restart))));
    if let Some((_, rb)) = &rw {
        attempts.push(Box::pin(timed(rb.acquire_write(&names[1], &after_restart))));
        attempts.push(Box::pin(timed(rb.acquire_read(&names[2], &after_restart))));
    }
    if let Some((_, sb)) = &sem {
        attempts.push(Box::pin(timed(sb.acquire_permit(&names[3], 1, &after_restart))));
    }
    // A per-session lease (ZooKeeper) outlives a server restart and is never "forgotten": its
    // holder lets go once every per-lock lease has surely ended, so the waiters finish. A grant
    // after that release proves nothing either way, one before it must respect `valid_until`.
    let latest_end = probes.iter().map(|p| p.held.valid_until()).max().unwrap_or(restarted_at);
    let let_go = async {
        tokio::time::sleep_until(latest_end + cx.ttl() / 2).await;
        let released_at = Instant::now();
        for p in &probes {
            let _ = p.held.release().await;
        }
        released_at
    };
    let (grants, released_at) = futures::future::join(futures::future::join_all(attempts), let_go).await;

    let notes = no_early_grant(&probes, grants, restarted_at, released_at).await?;
    Ok(format!("down {} ms; {}", ms(restarted_at.saturating_duration_since(down_at)), notes.join(", ")))
}

/// Every conflicting acquire was granted, and none before the lease it conflicts with had
/// ended (`valid_until`) or was released; one note per probe.
async fn no_early_grant(
    probes: &[Probe],
    grants: Vec<Granted>,
    restarted_at: Instant,
    released_at: Instant,
) -> Result<Vec<String>, CaseError> {
    let (mut notes, mut early) = (Vec::new(), Vec::new());
    for (probe, (granted, at)) in probes.iter().zip(grants) {
        let lease =
            granted.map_err(|e| CaseError::Failed(format!("{}: no grant after the restart: {e}", probe.kind)))?;
        let until = probe.held.valid_until();
        let after = ms(at.saturating_duration_since(restarted_at));
        if at < until && at < released_at {
            early.push(format!(
                "{}: granted {after} ms after the restart while the first lease was still valid for {} ms",
                probe.kind,
                ms(until.saturating_duration_since(at))
            ));
        }
        notes.push(format!("{} granted {after} ms after the restart", probe.kind));
        let _ = lease.release().await;
    }
    ensure!(
        early.is_empty(),
        "another client was granted a lock right after an empty restart ({}); a server that lost its state must \
         grant nothing until the leases it forgot have ended",
        early.join("; ")
    );
    Ok(notes)
}

/// An acquire's outcome and the instant its answer arrived (the grant happened before it).
type Granted = (Result<Lease, LockError>, Instant);

async fn timed(acquire: impl Future<Output = Result<Lease, LockError>>) -> Granted {
    let r = acquire.await;
    (r, Instant::now())
}

fn no_client(kind: &str, e: Option<LockError>) -> CaseError {
    match e {
        Some(e) => CaseError::Skipped(format!("the fixture could not make a {kind} client: {e}")),
        None => {
            CaseError::Failed(format!("the capabilities declare a {kind}, but the fixture offers no client for it"))
        }
    }
}
