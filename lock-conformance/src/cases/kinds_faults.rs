//! The other lock kinds under faults: holders of read-write locks and semaphores
//! that stop renewing, a paused server, and a randomized run mixing both, checked like the
//! exclusive lock: no writer overlaps anyone, at most `permits` permit holders at once, tokens
//! never repeat and a writer's token is above every token whose lease ended before it began.
//! Each kind runs only where the capabilities declare it; otherwise the case is not_applicable
//! with that reason.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{
    AcquireOptions, DistributedRwLock, DistributedSemaphore, FencedRegister, Lease, LeaseModel, LockError, LockName,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::kinds::{rw_client, semaphore_client};
use super::{ensure, ms, nemesis, CaseError, CaseResult, Ctx};
use crate::Fixture;

const PERMITS: u32 = 2;

fn no_kinds(cx: &Ctx<'_>) -> Result<(), CaseError> {
    if !cx.caps.rw_lock && !cx.caps.semaphore {
        return Err(CaseError::NotApplicable("the backend declares neither rw_lock nor semaphore".into()));
    }
    Ok(())
}

/// Holders of each kind stop renewing (a paused process): the next writer or permit holder
/// gets in only after their validity ended, with a greater token, and a fenced register
/// rejects the paused writer's late write.
pub async fn kinds_pause_past_ttl(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "kinds_pause_past_ttl").await?;
    no_kinds(&cx)?;
    if cx.caps.lease_model == LeaseModel::PerSession {
        return Err(CaseError::NotApplicable(
            "per-session leases: a holder only vanishes when its session is cut off, and the fixture has no \
             linked read-write or semaphore client"
                .into(),
        ));
    }
    let vanishing = cx.opts(cx.expiry() * 4).auto_renew(false);
    let wait = cx.opts(cx.expiry() * 4);
    let mut done = Vec::new();
    if cx.caps.rw_lock {
        let (a, b) = (rw_client(&cx).await?, rw_client(&cx).await?);
        // A writer, then a reader, vanish; the next writer must wait for each to expire.
        let reg = FencedRegister::new(0u32);
        let name = cx.name("rw-writer")?;
        let old = a.acquire_write(&name, &vanishing).await?;
        ensure!(reg.write_as(old.owner(), old.token(), |v| *v += 1).is_ok(), "the first writer's write was rejected");
        let new = b.acquire_write(&name, &wait).await?;
        let at = Instant::now();
        check_after(&old, &new, at, "writer", "writer")?;
        ensure!(reg.write_as(new.owner(), new.token(), |v| *v += 10).is_ok(), "the new writer's write was rejected");
        ensure!(
            reg.write_as(old.owner(), old.token(), |v| *v += 100).is_err(),
            "the register accepted the paused writer's stale token {}",
            old.token()
        );
        new.release().await?;
        let name = cx.name("rw-reader")?;
        let reader = a.acquire_read(&name, &vanishing).await?;
        let writer = b.acquire_write(&name, &wait).await?;
        check_after(&reader, &writer, Instant::now(), "reader", "writer")?;
        writer.release().await?;
        done.push("read-write");
    }
    if cx.caps.semaphore {
        let (a, b) = (semaphore_client(&cx).await?, semaphore_client(&cx).await?);
        let name = cx.name("permits")?;
        let mut old = Vec::new();
        for _ in 0..PERMITS {
            old.push(a.acquire_permit(&name, PERMITS, &vanishing).await?);
        }
        let new = b.acquire_permit(&name, PERMITS, &wait).await?;
        let at = Instant::now();
        // One of the vanished holders must have ended before the new one came in.
        let first_end = old.iter().map(Lease::valid_until).min().unwrap_or(at);
        ensure!(first_end <= at, "a permit beyond {PERMITS} was granted while {PERMITS} holders were still valid");
        let highest = old.iter().map(Lease::token).max();
        ensure!(
            highest.is_none_or(|h| new.token() > h),
            "the new permit's token {} is not above the vanished holders' {highest:?}",
            new.token()
        );
        new.release().await?;
        done.push("semaphore");
    }
    Ok(format!("checked: {}", done.join(", ")))
}

fn check_after(old: &Lease, new: &Lease, granted_by: Instant, was: &str, is: &str) -> Result<(), CaseError> {
    ensure!(
        old.valid_until() <= granted_by,
        "a {is} got in while the paused {was} was still valid ({} ms left)",
        ms(old.valid_until().saturating_duration_since(granted_by))
    );
    ensure!(
        new.token() > old.token(),
        "the {is}'s token {} is not above the paused {was}'s {}",
        new.token(),
        old.token()
    );
    Ok(())
}

/// A paused server: a writer and the permit holders lose their leases on time (their lost
/// signals fire, they are no longer valid), and after the server resumes the kind works again
/// with a greater token.
pub async fn kinds_server_pause(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "kinds_server_pause").await?;
    no_kinds(&cx)?;
    let Some(server) = fx.server() else {
        return Err(super::missing_hook("the fixture offers no server control (Fixture::server)"));
    };
    let opts = cx.opts(cx.expiry() * 4);
    let mut held: Vec<(&str, Lease)> = Vec::new();
    let (rw, sem) = (
        if cx.caps.rw_lock { Some(rw_client(&cx).await?) } else { None },
        if cx.caps.semaphore { Some(semaphore_client(&cx).await?) } else { None },
    );
    let (rw_name, sem_name) = (cx.name("rw")?, cx.name("sem")?);
    if let Some(c) = &rw {
        held.push(("writer", c.acquire_write(&rw_name, &opts).await?));
    }
    if let Some(c) = &sem {
        held.push(("permit", c.acquire_permit(&sem_name, PERMITS, &opts).await?));
    }
    server.pause(true).await?;
    let paused_at = Instant::now();
    let bound = cx.expiry() * 2 + Duration::from_secs(1);
    let mut late = Vec::new();
    for (what, lease) in &held {
        if tokio::time::timeout(bound.saturating_sub(paused_at.elapsed()), lease.lost().fired()).await.is_err() {
            late.push(*what);
        }
    }
    let lost_after = paused_at.elapsed();
    server.pause(false).await?;
    ensure!(late.is_empty(), "the lost signal of {late:?} did not fire within {} ms of the server pausing", ms(bound));
    for (what, lease) in &held {
        ensure!(!lease.is_valid(), "the {what}'s lease is valid after its lost signal fired");
    }
    let wait = cx.opts(cx.expiry() * 4);
    for (what, lease) in &held {
        let next = match *what {
            "writer" => match &rw {
                Some(c) => c.acquire_write(&rw_name, &wait).await,
                None => continue,
            },
            _ => match &sem {
                Some(c) => c.acquire_permit(&sem_name, PERMITS, &wait).await,
                None => continue,
            },
        };
        let next = next.map_err(|e| CaseError::Failed(format!("after the server resumed, no {what} came in: {e}")))?;
        ensure!(next.token() > lease.token(), "{what} token {} after {}", next.token(), lease.token());
        next.release().await?;
    }
    Ok(format!("{} holders lost their leases {} ms after the pause", held.len(), ms(lost_after)))
}

/// One holder's window: from `acquire` returning to the earlier of its release and its
/// `valid_until`.
#[derive(Clone, Debug)]
struct Window {
    exclusive: bool,
    token: u64,
    start: Instant,
    end: Instant,
}

/// Read-write windows: a writer overlaps nobody; tokens never repeat; a writer's token is above
/// the token of every window that ended before it began.
fn rw_violations(windows: &[Window]) -> Vec<String> {
    let mut out = token_violations(windows);
    // Windows are told in ms from the first start, to tell a grant over a holder from a slow release.
    let base = windows.iter().map(|w| w.start).min();
    let at = |w: &Window| {
        let since = |i: Instant| base.map_or(0, |b| ms(i.saturating_duration_since(b)));
        format!("{}..{} ms", since(w.start), since(w.end))
    };
    for w in windows.iter().filter(|w| w.exclusive) {
        for o in windows.iter().filter(|o| o.token != w.token) {
            if o.start < w.end && w.start < o.end {
                out.push(format!(
                    "writer token {} ({}) overlapped {} token {} ({})",
                    w.token,
                    at(w),
                    kind(o),
                    o.token,
                    at(o)
                ));
            }
            if o.end <= w.start && o.token >= w.token {
                out.push(format!("writer token {} came after {} token {} had ended", w.token, kind(o), o.token));
            }
        }
    }
    out
}

fn kind(w: &Window) -> &'static str {
    if w.exclusive {
        "writer"
    } else {
        "reader"
    }
}

/// Permit windows: at no instant more than `permits` at once; tokens never repeat.
fn permit_violations(windows: &[Window], permits: usize) -> Vec<String> {
    let mut out = token_violations(windows);
    for w in windows {
        // The number of windows holding at the instant `w` began.
        let at_once = windows.iter().filter(|o| o.start <= w.start && w.start < o.end).count();
        if at_once > permits {
            out.push(format!("{at_once} permit holders at once (at token {}), only {permits} permits", w.token));
        }
    }
    out
}

fn token_violations(windows: &[Window]) -> Vec<String> {
    let mut tokens: Vec<u64> = windows.iter().map(|w| w.token).collect();
    tokens.sort_unstable();
    tokens.windows(2).filter(|p| p[0] == p[1]).map(|p| format!("token {} was issued twice", p[0])).collect()
}

#[derive(Default)]
struct Log {
    rw: Mutex<Vec<Window>>,
    permits: Mutex<Vec<Window>>,
    violations: Mutex<Vec<String>>,
    errors: AtomicU64,
}

fn record(into: &Mutex<Vec<Window>>, lease: &Lease, exclusive: bool, start: Instant) {
    let end = Instant::now().min(lease.valid_until());
    if end > start {
        let w = Window { exclusive, token: lease.token().get(), start, end };
        into.lock().unwrap_or_else(|e| e.into_inner()).push(w);
    }
}

/// Several clients mix reads and writes on one read-write lock and take permits of one
/// semaphore while the server is paused (and, where leases and fencing are durable, restarted)
/// at random and some holders stop renewing past their ttl; the checkers above then run.
pub async fn kinds_nemesis(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "kinds_nemesis").await?;
    no_kinds(&cx)?;
    let seed: u64 =
        std::env::var("DLOCK_NEMESIS_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or_else(rand::random);
    eprintln!("kinds_nemesis on {}: seed {seed} (DLOCK_NEMESIS_SEED={seed} replays it)", fx.backend());
    let mut rng = StdRng::seed_from_u64(seed);
    let run_for = nemesis::duration();
    let ttl = cx.ttl();
    let deadline = Instant::now() + run_for;
    let crew = Crew {
        log: Arc::new(Log::default()),
        opts: cx.opts(ttl * 2),
        stop: Arc::new(nemesis::Stop::for_run(deadline, &cx)),
        ttl,
        per_lock: cx.caps.lease_model != LeaseModel::PerSession,
    };
    let register = Arc::new(FencedRegister::new(0u64));
    let mut workers = Vec::new();
    for i in 0..3u64 {
        if cx.caps.rw_lock {
            let rng = StdRng::seed_from_u64(seed.wrapping_add(1 + i));
            workers.push(rw_worker(rw_client(&cx).await?, cx.name("rw")?, register.clone(), crew.clone(), rng));
        }
        if cx.caps.semaphore {
            let rng = StdRng::seed_from_u64(seed.wrapping_add(100 + i));
            workers.push(permit_worker(semaphore_client(&cx).await?, cx.name("sem")?, crew.clone(), rng));
        }
    }
    let faults = server_faults(&cx, deadline, &mut rng).await;
    crew.stop.healed();
    let faults = faults?;
    nemesis::join_workers(workers, ttl, &cx, "a client", seed).await?;
    let log = &crew.log;
    let rw = log.rw.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let permits = log.permits.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut violations = log.violations.lock().unwrap_or_else(|e| e.into_inner()).clone();
    violations.extend(rw_violations(&rw));
    violations.extend(permit_violations(&permits, PERMITS as usize));
    nemesis::no_violations(seed, &violations, &faults)?;
    ensure!(
        rw.len() + permits.len() > 0,
        "seed {seed}: nobody held anything in {} ms nor in the grace after the faults healed: the run proves nothing",
        ms(run_for)
    );
    Ok(format!(
        "seed {seed}: {} read-write and {} permit holds, {} faults ({}), {} client errors",
        rw.len(),
        permits.len(),
        faults.len(),
        faults.iter().take(6).cloned().collect::<Vec<_>>().join(", "),
        log.errors.load(Ordering::Relaxed)
    ))
}

/// What every worker of [`kinds_nemesis`] shares: the log, the options, when to stop, the
/// ttl, and whether holders may vanish by not renewing (per-lock leases).
#[derive(Clone)]
struct Crew {
    log: Arc<Log>,
    opts: AcquireOptions,
    stop: Arc<nemesis::Stop>,
    ttl: Duration,
    per_lock: bool,
}

/// A client that mixes reads and writes of `name` until the run stops (`nemesis::Stop`); each writer writes its
/// token to the fenced `register`, which must accept every valid writer and only rising tokens.
fn rw_worker(
    c: Arc<dyn DistributedRwLock>,
    name: LockName,
    register: Arc<FencedRegister<u64>>,
    crew: Crew,
    mut rng: StdRng,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let log = &crew.log;
        while crew.stop.go_on() {
            let write = rng.random_bool(0.4);
            let o = vanish_sometimes(&crew.opts, crew.per_lock, &mut rng);
            let got = if write { c.acquire_write(&name, &o).await } else { c.acquire_read(&name, &o).await };
            let Some(lease) = taken(got, &crew).await else { continue };
            let start = Instant::now();
            if write {
                write_token(&lease, &register, log);
            }
            hold_and_release(lease, &o, &crew, &mut rng, &log.rw, write, start).await;
        }
    })
}

/// A writer's write to the fenced register: a token at or below the last one accepted, or a
/// valid writer's token refused, is a violation.
fn write_token(lease: &Lease, register: &FencedRegister<u64>, log: &Log) {
    let token = lease.token().get();
    let violation = match register.write_as(lease.owner(), lease.token(), |v| std::mem::replace(v, token)) {
        Ok(prev) if prev >= token && prev != 0 => format!("writer token {token} accepted after {prev}"),
        Err(stale) if lease.is_valid() => {
            format!("a valid writer's token {token} was rejected: the register had {}", stale.highest)
        }
        _ => return,
    };
    log.violations.lock().unwrap_or_else(|e| e.into_inner()).push(violation);
}

/// A client that takes and returns permits of `name` until the run stops.
fn permit_worker(
    c: Arc<dyn DistributedSemaphore>,
    name: LockName,
    crew: Crew,
    mut rng: StdRng,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while crew.stop.go_on() {
            let o = vanish_sometimes(&crew.opts, crew.per_lock, &mut rng);
            let Some(lease) = taken(c.acquire_permit(&name, PERMITS, &o).await, &crew).await else { continue };
            hold_and_release(lease, &o, &crew, &mut rng, &crew.log.permits, false, Instant::now()).await;
        }
    })
}

/// The lease of an acquisition, told to the run; a failure is counted and, after a short
/// pause, the worker tries again (`None`).
async fn taken(got: Result<Lease, LockError>, crew: &Crew) -> Option<Lease> {
    match got {
        Ok(lease) => {
            crew.stop.held();
            Some(lease)
        }
        Err(_) => {
            crew.log.errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
            None
        }
    }
}

/// Holds `lease` (taken at `start`) as the run says, records the hold in `into` and releases it
/// (a failed release is counted).
async fn hold_and_release(
    lease: Lease,
    o: &AcquireOptions,
    crew: &Crew,
    rng: &mut StdRng,
    into: &Mutex<Vec<Window>>,
    exclusive: bool,
    start: Instant,
) {
    hold(&lease, o, crew.ttl, rng).await;
    record(into, &lease, exclusive, start);
    if lease.release().await.is_err() {
        crew.log.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Pauses the server (or, where leases and fencing are durable, restarts it) at random until
/// the deadline; the faults injected, for the report. None without [`Fixture::server`].
async fn server_faults(cx: &Ctx<'_>, deadline: Instant, rng: &mut StdRng) -> Result<Vec<String>, CaseError> {
    let Some(s) = cx.fx.server() else { return Ok(Vec::new()) };
    let ttl = cx.ttl();
    let restarts = s.persistent() && cx.caps.durable_leases && cx.caps.durable_fencing;
    let mut faults = Vec::new();
    while Instant::now() + ttl / 4 < deadline {
        tokio::time::sleep(Duration::from_millis(
            rng.random_range(ttl.as_millis() as u64 / 8..=ttl.as_millis() as u64 / 2),
        ))
        .await;
        let span = Duration::from_millis(rng.random_range(ttl.as_millis() as u64 / 4..=ttl.as_millis() as u64 * 2));
        if restarts && rng.random_bool(0.3) {
            faults.push("restart".to_owned());
            s.stop().await?;
            s.start().await?;
        } else {
            faults.push(format!("pause {} ms", ms(span)));
            s.pause(true).await?;
            tokio::time::sleep(span).await;
            s.pause(false).await?;
        }
    }
    Ok(faults)
}

/// One acquisition in five (per-lock leases only) stops renewing: a holder paused past its ttl.
fn vanish_sometimes(opts: &AcquireOptions, per_lock: bool, rng: &mut StdRng) -> AcquireOptions {
    let o = opts.clone();
    if per_lock && rng.random_bool(0.2) {
        o.auto_renew(false)
    } else {
        o
    }
}

/// Holds for a random time up to half a ttl (past the ttl for a holder that stopped renewing),
/// or until the lease is lost.
async fn hold(lease: &Lease, opts: &AcquireOptions, ttl: Duration, rng: &mut StdRng) {
    let most = if opts.auto_renew { ttl / 2 } else { ttl * 3 / 2 };
    let d = Duration::from_millis(rng.random_range(0..=(most.as_millis() as u64).max(1)));
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = lease.lost().fired() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(exclusive: bool, token: u64, s: u64, e: u64, t: Instant) -> Window {
        Window { exclusive, token, start: t + Duration::from_millis(s), end: t + Duration::from_millis(e) }
    }

    #[test]
    fn the_kind_checkers_can_fail() {
        let t = Instant::now();
        // Readers share; a writer after them with a greater token is fine.
        assert!(rw_violations(&[w(false, 1, 0, 10, t), w(false, 2, 5, 15, t), w(true, 3, 15, 20, t)]).is_empty());
        // A writer overlapping a reader; a writer whose token is below an ended reader's; a repeat.
        assert_eq!(rw_violations(&[w(false, 1, 0, 10, t), w(true, 2, 9, 20, t)]).len(), 1);
        assert_eq!(rw_violations(&[w(false, 5, 0, 10, t), w(true, 4, 10, 20, t)]).len(), 1);
        assert!(!rw_violations(&[w(true, 4, 0, 10, t), w(true, 4, 10, 20, t)]).is_empty());
        // Permits: two at once is fine with two permits, three is not.
        assert!(permit_violations(&[w(false, 1, 0, 10, t), w(false, 2, 5, 15, t)], 2).is_empty());
        assert!(!permit_violations(&[w(false, 1, 0, 10, t), w(false, 2, 5, 15, t), w(false, 3, 6, 8, t)], 2).is_empty());
        assert!(!permit_violations(&[w(false, 1, 0, 10, t), w(false, 1, 20, 30, t)], 2).is_empty());
    }
}
