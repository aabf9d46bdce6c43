//! The randomized nemesis: several clients contend for a few locks for a bounded time while
//! faults are injected at random (seeded; the seed is printed). A checker then verifies that no
//! two holders' lease windows overlapped — all clients share the test's monotonic clock — and
//! that each lock's fenced register accepted only strictly increasing tokens.
//!
//! `DLOCK_NEMESIS_SECS` sets the duration (default 4 s, for CI; raise it for soak runs);
//! `DLOCK_NEMESIS_SEED` replays a run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lock_core::{DistributedLock, FencedRegister, LockName};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::{fail, ms, CaseError, CaseResult, Ctx};
use crate::{ClientLink, DeploymentControl, Fixture, ServerControl};

const LOCKS: usize = 2;
const LINKED: usize = 3;
const PLAIN: usize = 2;

/// How long the nemesis runs: `DLOCK_NEMESIS_SECS` (fractions allowed), default 4 s.
pub fn duration() -> Duration {
    std::env::var("DLOCK_NEMESIS_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 86_400.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(4))
}

pub(crate) fn seed() -> u64 {
    std::env::var("DLOCK_NEMESIS_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or_else(rand::random)
}

/// One holder's window of exclusivity: from `acquire` returning to the earlier of its release
/// and its `valid_until`.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    pub(crate) lock: usize,
    pub(crate) client: usize,
    pub(crate) token: u64,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

/// When a run's clients stop. At the deadline once anyone has held; if nobody has (a failover in
/// the run's first second can keep everyone out until after the deadline), they go on until
/// someone holds or a grace period after the faults healed has passed — so a run that proves
/// nothing is the deployment's failure, not the seed's bad luck. The grace (two ttls and an
/// expiry) plus one bounded attempt and hold stays inside [`join_workers`]' bound.
pub(crate) struct Stop {
    deadline: Instant,
    grace: Duration,
    held: AtomicBool,
    healed: OnceLock<Instant>,
}

impl Stop {
    pub(crate) fn for_run(deadline: Instant, cx: &Ctx<'_>) -> Self {
        Self::new(deadline, cx.ttl() * 2 + cx.expiry())
    }

    fn new(deadline: Instant, grace: Duration) -> Self {
        Stop { deadline, grace, held: AtomicBool::new(false), healed: OnceLock::new() }
    }

    /// Whether a client should make another attempt now.
    pub(crate) fn go_on(&self) -> bool {
        let now = Instant::now();
        now < self.deadline
            || (!self.held.load(Ordering::Relaxed) && self.healed.get().is_none_or(|h| now < *h + self.grace))
    }

    /// Someone held (or led): the run is no longer vacuous.
    pub(crate) fn held(&self) {
        self.held.store(true, Ordering::Relaxed);
    }

    /// The fault injector is done and every link healed (called on its error path too, so no
    /// client runs on after a failed case).
    pub(crate) fn healed(&self) {
        let _ = self.healed.set(Instant::now());
    }
}

#[derive(Default)]
struct Log {
    windows: Mutex<Vec<Window>>,
    violations: Mutex<Vec<String>>,
    errors: AtomicU64,
}

impl Log {
    fn violation(&self, v: String) {
        self.violations.lock().unwrap_or_else(|e| e.into_inner()).push(v);
    }
}

/// See the module docs.
pub async fn nemesis(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "nemesis").await?;
    let seed = seed();
    eprintln!("nemesis on {}: seed {seed} (DLOCK_NEMESIS_SEED={seed} replays it)", fx.backend());
    let mut rng = StdRng::seed_from_u64(seed);
    let run_for = duration();
    let ttl = cx.ttl();
    let names: Vec<LockName> = (0..LOCKS).map(|i| cx.name(&format!("n{i}"))).collect::<Result<_, _>>()?;
    let registers: Arc<Vec<FencedRegister<u64>>> = Arc::new((0..LOCKS).map(|_| FencedRegister::new(0)).collect());
    let (clients, links) = nemesis_clients(&cx).await?;
    let server = fx.server();
    let restarts_allowed =
        server.as_ref().is_some_and(|s| s.persistent()) && cx.caps.durable_leases && cx.caps.durable_fencing;

    let log = Arc::new(Log::default());
    let deadline = Instant::now() + run_for;
    let stop = Arc::new(Stop::for_run(deadline, &cx));
    let opts = cx.opts(ttl * 2);
    let mut workers = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, names, registers, log, opts, stop) =
            (client.clone(), names.clone(), registers.clone(), log.clone(), opts.clone(), stop.clone());
        let mut wrng = StdRng::seed_from_u64(seed.wrapping_add(1 + i as u64));
        workers.push(tokio::spawn(async move {
            while stop.go_on() {
                let lock = wrng.random_range(0..LOCKS);
                let Ok(lease) = client.acquire(&names[lock], &opts).await else {
                    log.errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                stop.held();
                hold_and_log(&lease, &registers[lock], &log, Holder { lock, client: i }, ttl, &mut wrng).await;
                if lease.release().await.is_err() {
                    log.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    let hooks = Hooks { links: &links, server, restarts_allowed, deployment: fx.deployment() };
    let faults = inject_faults(&mut rng, deadline, run_for, ttl, &hooks).await;
    stop.healed();
    let faults = faults?;
    join_workers(workers, ttl, &cx, "a nemesis client", seed).await?;

    let mut windows = log.windows.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut violations = log.violations.lock().unwrap_or_else(|e| e.into_inner()).clone();
    violations.extend(overlaps(&mut windows));
    no_violations(seed, &violations, &faults)?;
    if windows.is_empty() {
        fail!(
            "seed {seed}: no client held any lock in {} ms nor in the grace after the faults healed: the run proves nothing",
            ms(run_for)
        );
    }
    let note = hooks.note();
    Ok(format!(
        "seed {seed}: {} holds over {} clients, {} faults{note} ({}), {} client errors, {} ms",
        windows.len(),
        clients.len(),
        faults.len(),
        faults.iter().take(6).cloned().collect::<Vec<_>>().join(", "),
        log.errors.load(Ordering::Relaxed),
        ms(run_for)
    ))
}

/// The nemesis's clients: up to [`LINKED`] whose links it can break (as many as the fixture
/// offers), then [`PLAIN`] ordinary ones; and the links.
async fn nemesis_clients(cx: &Ctx<'_>) -> Result<(Vec<Arc<dyn DistributedLock>>, Vec<Arc<dyn ClientLink>>), CaseError> {
    let mut clients: Vec<Arc<dyn DistributedLock>> = Vec::new();
    let mut links: Vec<Arc<dyn ClientLink>> = Vec::new();
    for _ in 0..LINKED {
        match cx.linked().await {
            Ok((c, l)) => {
                clients.push(c);
                links.push(l);
            }
            Err(CaseError::NotApplicable(_)) => break,
            Err(e) => return Err(e),
        }
    }
    for _ in 0..PLAIN {
        clients.push(cx.client().await?);
    }
    Ok((clients, links))
}

/// Which lock a nemesis lease is of, and which client holds it.
#[derive(Clone, Copy)]
struct Holder {
    lock: usize,
    client: usize,
}

/// One hold of a nemesis client: writes the lease's token to the lock's fenced register (a
/// token at or below the last accepted, or a valid lease's token refused, is a violation),
/// holds up to half a ttl or until the lease is lost, and logs the window it was valid in.
async fn hold_and_log(
    lease: &lock_core::Lease,
    register: &FencedRegister<u64>,
    log: &Log,
    who: Holder,
    ttl: Duration,
    rng: &mut StdRng,
) {
    let Holder { lock, client: i } = who;
    let start = Instant::now();
    let token = lease.token().get();
    match register.write_as(lease.owner(), lease.token(), |v| std::mem::replace(v, token)) {
        Ok(prev) if prev >= token && prev != 0 => log.violation(format!(
            "lock {lock}: client {i} wrote token {token} after token {prev}: not strictly increasing"
        )),
        Ok(_) => {}
        Err(stale) if lease.is_valid() => log.violation(format!(
            "lock {lock}: client {i} held a valid lease with token {token} but the register had seen {}",
            stale.highest
        )),
        Err(_) => {}
    }
    let hold = Duration::from_millis(rng.random_range(0..=(ttl.as_millis() as u64 / 2).max(1)));
    tokio::select! {
        _ = tokio::time::sleep(hold) => {}
        _ = lease.lost().fired() => {}
    }
    let end = Instant::now().min(lease.valid_until());
    if end > start {
        log.windows.lock().unwrap_or_else(|e| e.into_inner()).push(Window { lock, client: i, token, start, end });
    }
}

/// What the nemesis can hurt: the clients' links, the server (the whole deployment) and, for a
/// replicated deployment, its single nodes.
pub(crate) struct Hooks<'a> {
    pub(crate) links: &'a [Arc<dyn ClientLink>],
    pub(crate) server: Option<Arc<dyn ServerControl>>,
    /// Whether a server restart keeps what the run checks (persistent server, durable leases
    /// and fencing).
    pub(crate) restarts_allowed: bool,
    pub(crate) deployment: Option<Arc<dyn DeploymentControl>>,
}

impl Hooks<'_> {
    /// Says in the report which hooks the run had, so "no faults" is never silent.
    fn note(&self) -> &'static str {
        match (self.links.is_empty() && self.server.is_none(), self.deployment.is_none()) {
            (true, true) => " (no fault hooks: contention only)",
            (false, true) => "",
            (_, false) => " (with deployment node faults)",
        }
    }
}

/// Injects random faults until `deadline`: partitions, connection resets and latency on the
/// links, pauses (and, when restarts are allowed, restarts) of the server, and the deployment's
/// node faults (kills, failovers, peer partitions); heals every link at the end. Returns what
/// it did, for the report.
pub(crate) async fn inject_faults(
    rng: &mut StdRng,
    deadline: Instant,
    run_for: Duration,
    ttl: Duration,
    hooks: &Hooks<'_>,
) -> Result<Vec<String>, CaseError> {
    let (links, server, restarts_allowed) = (hooks.links, hooks.server.as_ref(), hooks.restarts_allowed);
    let node_faults = hooks.deployment.as_ref().map(|d| d.faults()).unwrap_or_default();
    let mut faults: Vec<String> = Vec::new();
    while Instant::now() + ttl / 4 < deadline {
        // Short quiet gaps: a short CI run still sees several faults.
        let quiet = rng.random_range(ttl.as_millis() as u64 / 8..=ttl.as_millis() as u64 / 2);
        tokio::time::sleep(Duration::from_millis(quiet)).await;
        let mut kinds: Vec<&str> = Vec::new();
        if !links.is_empty() {
            kinds.extend(["partition", "reset", "latency"]);
        }
        if server.is_some() {
            kinds.push("pause");
            if restarts_allowed {
                kinds.push("restart");
            }
        }
        if !node_faults.is_empty() {
            kinds.push("node");
        }
        if kinds.is_empty() {
            // No hooks at all: the run is plain contention, still checked.
            continue;
        }
        // A deployment's node faults are what its run is for: the first fault is one of them,
        // so no seed leaves a deployment run without a kill, failover or peer partition.
        let kind =
            if faults.is_empty() && !node_faults.is_empty() { "node" } else { kinds[rng.random_range(0..kinds.len())] };
        let span = Duration::from_millis(rng.random_range(ttl.as_millis() as u64 / 4..=ttl.as_millis() as u64 * 2));
        let at = ms(run_for.saturating_sub(deadline.saturating_duration_since(Instant::now())));
        match kind {
            "partition" => {
                let l = rng.random_range(0..links.len());
                faults.push(format!("{at}ms partition link {l} for {} ms", ms(span)));
                links[l].set_partitioned(true).await;
                tokio::time::sleep(span).await;
                links[l].set_partitioned(false).await;
            }
            "reset" => {
                let l = rng.random_range(0..links.len());
                faults.push(format!("{at}ms reset link {l}"));
                links[l].reset_connections().await;
            }
            "latency" => {
                let l = rng.random_range(0..links.len());
                let d = Duration::from_millis(rng.random_range(1..=(ttl.as_millis() as u64 / 8).max(2)));
                faults.push(format!("{at}ms latency {} ms on link {l} for {} ms", ms(d), ms(span)));
                links[l].set_latency(d).await;
                tokio::time::sleep(span).await;
                links[l].set_latency(Duration::ZERO).await;
            }
            "pause" => {
                if let Some(s) = &server {
                    faults.push(format!("{at}ms pause server for {} ms", ms(span)));
                    if s.pause(true).await.is_ok() {
                        tokio::time::sleep(span).await;
                    }
                    if let Err(e) = s.pause(false).await {
                        fail!("could not resume the server: {e}");
                    }
                }
            }
            "restart" => {
                if let Some(s) = &server {
                    faults.push(format!("{at}ms restart server"));
                    s.stop().await?;
                    s.start().await?;
                }
            }
            "node" => {
                if let Some(d) = &hooks.deployment {
                    let fault = node_faults[rng.random_range(0..node_faults.len())];
                    match d.inject(fault, span).await {
                        Ok(what) => faults.push(format!("{at}ms {fault}: {what}")),
                        Err(e) => fail!("the deployment did not recover from {fault}: {e}"),
                    }
                }
            }
            _ => {}
        }
    }
    for l in links {
        l.set_partitioned(false).await;
        l.set_latency(Duration::ZERO).await;
    }
    Ok(faults)
}

/// Waits for the run's clients (`who`: "a client", for messages), each within a bound of six
/// TTLs plus two expiries and two request timeouts; a panic or a client that does not stop fails
/// the case.
pub(crate) async fn join_workers(
    workers: Vec<tokio::task::JoinHandle<()>>,
    ttl: Duration,
    cx: &Ctx<'_>,
    who: &str,
    seed: u64,
) -> Result<(), CaseError> {
    let join_bound = ttl * 6 + cx.expiry() * 2 + cx.request_timeout() * 2;
    for w in workers {
        match tokio::time::timeout(join_bound, w).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => fail!("{who} panicked: {e} (seed {seed})"),
            Err(_) => fail!("{who} did not stop within {} ms after the run (seed {seed})", ms(join_bound)),
        }
    }
    Ok(())
}

/// Fails the case with the first five violations, the seed and the faults injected, if any.
pub(crate) fn no_violations(seed: u64, violations: &[String], faults: &[String]) -> Result<(), CaseError> {
    if !violations.is_empty() {
        fail!(
            "seed {seed}: {} violation(s): {}; faults: {}",
            violations.len(),
            violations.iter().take(5).cloned().collect::<Vec<_>>().join("; "),
            faults.join(", ")
        );
    }
    Ok(())
}

/// Per lock, windows sorted by start must not overlap.
pub(crate) fn overlaps(windows: &mut [Window]) -> Vec<String> {
    windows.sort_by_key(|w| (w.lock, w.start));
    let mut out = Vec::new();
    let mut prev: Option<&Window> = None;
    for w in windows.iter() {
        if let Some(p) = prev.filter(|p| p.lock == w.lock) {
            if w.start < p.end {
                out.push(format!(
                    "lock {}: client {} (token {}) held from +0 to +{} ms while client {} (token {}) held from +{} ms",
                    w.lock,
                    p.client,
                    p.token,
                    ms(p.end - p.start),
                    w.client,
                    w.token,
                    ms(w.start - p.start)
                ));
            }
            if w.end > p.end {
                prev = Some(w);
            }
        } else {
            prev = Some(w);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_run_nobody_held_in_goes_on_until_the_grace_after_healing() {
        let ms = Duration::from_millis;
        let stop = Stop::new(Instant::now() + ms(100), ms(50));
        assert!(stop.go_on(), "before the deadline");
        tokio::time::advance(ms(200)).await;
        assert!(stop.go_on(), "nobody held and the faults are still on: go on past the deadline");
        stop.healed();
        tokio::time::advance(ms(40)).await;
        assert!(stop.go_on(), "inside the grace after healing");
        tokio::time::advance(ms(20)).await;
        assert!(!stop.go_on(), "the grace is over: the case reports a vacuous run");

        let stop = Stop::new(Instant::now() + ms(100), ms(50));
        stop.held();
        assert!(stop.go_on(), "someone held, but the deadline is not reached");
        tokio::time::advance(ms(100)).await;
        assert!(!stop.go_on(), "someone held: stop at the deadline, healed or not");
    }

    #[test]
    fn the_overlap_checker_can_fail() {
        let t = Instant::now();
        let w = |lock, token, s: u64, e: u64| Window {
            lock,
            client: token as usize,
            token,
            start: t + Duration::from_millis(s),
            end: t + Duration::from_millis(e),
        };
        assert!(overlaps(&mut [w(0, 1, 0, 10), w(0, 2, 10, 20), w(1, 3, 5, 15)]).is_empty());
        assert_eq!(overlaps(&mut [w(0, 1, 0, 10), w(0, 2, 9, 20)]).len(), 1);
        // A long window hides behind a short one only if the checker forgets the running max.
        assert_eq!(overlaps(&mut [w(0, 1, 0, 100), w(0, 2, 10, 20), w(0, 3, 30, 40)]).len(), 2);
    }
}
