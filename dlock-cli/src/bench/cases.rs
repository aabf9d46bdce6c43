//! The lock cases of `dlock bench`: uncontended, contended, spread and held.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::{AcquireOptions, Config, DistributedLock, LockError, LockName};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::turns::Schedule;
use super::{from_latencies, percentile, CaseResult};

/// What every case needs.
pub(crate) struct Plan {
    pub(crate) config: Config,
    pub(crate) duration: Duration,
    pub(crate) clients: usize,
    pub(crate) held: usize,
    pub(crate) ttl: Duration,
    /// Prefix of every name this run uses.
    pub(crate) run_id: String,
}

impl Plan {
    pub(crate) fn name(&self, suffix: &str) -> Result<LockName, LockError> {
        LockName::new(format!("{}/{suffix}", self.run_id))
    }

    fn options(&self) -> AcquireOptions {
        AcquireOptions::new(self.ttl)
    }

    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        dlock::connect_with(&self.config).await
    }
}

/// One client: try_acquire + release of one free name, back to back, on `schedule`.
pub(crate) async fn uncontended(plan: &Plan, schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    let lock = plan.client().await?;
    let name = plan.name("uncontended")?;
    let opts = plan.options();
    let (lat, errors, elapsed, first) = loop_one(&*lock, &name, &opts, schedule).await?;
    let mut r = from_latencies("uncontended", lat, elapsed, 1);
    r.errors = errors;
    r.note = first.map(|f| format!("first failure: {f}"));
    Ok(r)
}

/// What made an attempt of a loop fail: a refusal of a free name, or an error.
const REFUSED: &str = "try_acquire refused a name nobody else uses: another process holds it, or a Redis \
                       server is in its quiet period after losing its state (docs/contract.md §3 'Quiet \
                       period after state loss'; it ends after restart_quiet_period, default 60 s)";

async fn loop_one(
    lock: &dyn DistributedLock,
    name: &LockName,
    opts: &AcquireOptions,
    mut schedule: Schedule<'_>,
) -> Result<(Vec<Duration>, u64, Duration, Option<String>), LockError> {
    let mut lat = Vec::new();
    let mut errors = 0u64;
    let mut first: Option<String> = None;
    while schedule.next().await {
        let t = Instant::now();
        let failure = match lock.try_acquire(name, opts).await {
            Ok(Some(lease)) => match lease.release().await {
                Ok(()) => {
                    lat.push(t.elapsed());
                    continue;
                }
                Err(e) => e.to_string(),
            },
            // Only a release of ours that has not landed yet can hold a free name.
            Ok(None) => REFUSED.to_owned(),
            Err(e) if lat.is_empty() && errors == 0 => return Err(e),
            Err(e) => e.to_string(),
        };
        errors += 1;
        first.get_or_insert(failure);
    }
    Ok((lat, errors, schedule.elapsed(), first))
}

/// Distinct names, one per client, all at once.
pub(crate) async fn spread(plan: &Plan) -> Result<CaseResult, LockError> {
    let mut tasks = JoinSet::new();
    let begun = Instant::now();
    for i in 0..plan.clients {
        let lock = plan.client().await?;
        let name = plan.name(&format!("spread/{i}"))?;
        let (opts, duration) = (plan.options(), plan.duration);
        tasks.spawn(async move { loop_one(&*lock, &name, &opts, Schedule::alone(duration)).await });
    }
    let mut all = Vec::new();
    let (mut errors, mut first) = (0, None);
    while let Some(joined) = tasks.join_next().await {
        let (lat, e, _, f) = joined.map_err(|e| LockError::backend("bench", e))??;
        all.extend(lat);
        errors += e;
        first = first.or(f);
    }
    let mut r = from_latencies("spread", all, begun.elapsed(), plan.clients);
    r.errors = errors;
    r.note = first.map(|f| format!("first failure: {f}"));
    Ok(r)
}

/// Who released last, and when: the next grant measures its hand-off against it.
#[derive(Default)]
struct Handoffs {
    last_release: Option<(usize, Instant)>,
    samples: Vec<Duration>,
    to_other: u64,
}

impl Handoffs {
    /// Client `me` was granted the lock at `at`: one hand-off sample from the last release.
    fn granted(&mut self, me: usize, at: Instant) {
        if let Some((from, released)) = self.last_release.take() {
            self.samples.push(at.saturating_duration_since(released));
            if from != me {
                self.to_other += 1;
            }
        }
    }
}

/// The work under the lock: a read-yield-write that loses updates if two hold it at once.
async fn guarded_increment(inside: &AtomicBool, overlaps: &AtomicU64, counter: &AtomicU64) {
    if inside.swap(true, Ordering::SeqCst) {
        overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let seen = counter.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    counter.store(seen + 1, Ordering::SeqCst);
    inside.store(false, Ordering::SeqCst);
}

/// Clients contending for one name.
pub(crate) async fn contended(plan: &Plan) -> Result<CaseResult, LockError> {
    let name = plan.name("contended")?;
    let handoffs = Arc::new(Mutex::new(Handoffs::default()));
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..plan.clients {
        clients.push(plan.client().await?);
    }
    let begun = Instant::now();
    let end = begun + plan.duration;
    let mut tasks = JoinSet::new();
    for (me, lock) in clients.into_iter().enumerate() {
        let (name, ttl) = (name.clone(), plan.ttl);
        let (handoffs, counter, inside, overlaps) =
            (Arc::clone(&handoffs), Arc::clone(&counter), Arc::clone(&inside), Arc::clone(&overlaps));
        tasks.spawn(async move {
            let (mut grants, mut errors, mut lat) = (0u64, 0u64, Vec::new());
            let mut first_error: Option<String> = None;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                // Wait past the end and drop the wait there (acquire is cancel-safe), so the
                // last attempts are not cut short by a deadline of their own.
                let opts = AcquireOptions::new(ttl).wait(ttl.max(Duration::from_secs(5)));
                let t = Instant::now();
                let attempt = tokio::select! {
                    r = lock.acquire(&name, &opts) => r,
                    _ = tokio::time::sleep_until(end) => break,
                };
                let lease = match attempt {
                    Ok(l) => l,
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                        continue;
                    }
                };
                let granted = Instant::now();
                lat.push(granted - t);
                handoffs.lock().unwrap_or_else(|e| e.into_inner()).granted(me, granted);
                guarded_increment(&inside, &overlaps, &counter).await;
                grants += 1;
                handoffs.lock().unwrap_or_else(|e| e.into_inner()).last_release = Some((me, Instant::now()));
                if let Err(e) = lease.release().await {
                    errors += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            (grants, errors, lat, first_error)
        });
    }
    let (mut grants, mut errors, mut per_client, mut lat) = (0u64, 0u64, Vec::new(), Vec::new());
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        let (g, e, l, f) = joined.map_err(|e| LockError::backend("bench", e))?;
        first_error = first_error.or(f);
        grants += g;
        errors += e;
        per_client.push(g);
        lat.extend(l);
    }
    let elapsed = begun.elapsed();
    let h = handoffs.lock().unwrap_or_else(|e| e.into_inner());
    let mut samples: Vec<f64> = h.samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    samples.sort_by(f64::total_cmp);
    let mut r = from_latencies("contended", lat, elapsed, plan.clients);
    r.ops_per_s = grants as f64 / elapsed.as_secs_f64().max(1e-9);
    r.ops = grants;
    r.errors = errors;
    r.handoff_p50_us = percentile(&samples, 0.5);
    r.handoff_p99_us = percentile(&samples, 0.99);
    r.other_client_pct =
        (!samples.is_empty()).then(|| (h.to_other as f64 * 1000.0 / samples.len() as f64).round() / 10.0);
    r.per_client_min_max =
        Some((per_client.iter().copied().min().unwrap_or(0), per_client.iter().copied().max().unwrap_or(0)));
    r.exclusion_ok = Some(counter.load(Ordering::SeqCst) == grants && overlaps.load(Ordering::SeqCst) == 0);
    r.note = Some(match first_error {
        Some(e) => format!("p50/p99: acquire latency (wait included); first error: {e}"),
        None => "p50/p99: acquire latency (wait included)".into(),
    });
    Ok(r)
}

/// Many leases renewing in this process: CPU share and memory per lease.
pub(crate) async fn held(plan: &Plan) -> Result<CaseResult, LockError> {
    let lock = plan.client().await?;
    let opts = plan.options();
    let rss_before = resident_bytes();
    let begun = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = JoinSet::new();
    for i in 0..plan.held {
        let (lock, opts, gate) = (Arc::clone(&lock), opts.clone(), Arc::clone(&gate));
        let name = plan.name(&format!("held/{i}"))?;
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.map_err(|e| LockError::backend("bench", e))?;
            lock.try_acquire(&name, &opts).await
        });
    }
    let mut leases = Vec::with_capacity(plan.held);
    let mut errors = 0u64;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|e| LockError::backend("bench", e))? {
            Ok(Some(lease)) => leases.push(lease),
            _ => errors += 1,
        }
    }
    let acquired_in = begun.elapsed();
    let rss_after = resident_bytes();
    // Watch at least one full renewal round (auto-renew every ttl/3).
    let window = plan.duration.max(plan.ttl / 2);
    let cpu_before = cpu_seconds();
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let cpu = cpu_seconds().zip(cpu_before).map(|(a, b)| (a - b) / t.elapsed().as_secs_f64() * 100.0);
    let lost = leases.iter().filter(|l| !l.is_valid()).count() as u64;
    let count = leases.len();
    let mut releases = JoinSet::new();
    for lease in leases {
        let gate = Arc::clone(&gate);
        releases.spawn(async move {
            let _permit = gate.acquire_owned().await;
            lease.release().await
        });
    }
    while let Some(joined) = releases.join_next().await {
        if !matches!(joined, Ok(Ok(()))) {
            errors += 1;
        }
    }
    Ok(CaseResult {
        name: "held".into(),
        ops_per_s: count as f64 / acquired_in.as_secs_f64().max(1e-9),
        cpu_pct_of_one_core: cpu.map(|c| (c * 10.0).round() / 10.0),
        bytes_per_lease: rss_before
            .zip(rss_after)
            .filter(|_| count > 0)
            .map(|(b, a)| (a.saturating_sub(b) as f64 / count as f64).round()),
        leases_lost: Some(lost),
        clients: 1,
        ops: count as u64,
        errors,
        note: Some(format!("{count} leases; cpu over {window:?} of renewals; ops_per_s: acquisitions")),
        ..Default::default()
    })
}

/// Resident set size of this process (Linux), in bytes.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// User + system CPU time of this process (Linux), in seconds.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Clock ticks are 100 per second on Linux.
    Some((utime + stime) / 100.0)
}
