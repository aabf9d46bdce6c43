//! `dlock bench`: measures a deployment the way users meet it, next to a baseline measured in the
//! same run with the same client library (so machine speed and load cancel out in the ratios).
//!
//! Cases:
//! - `baseline`: the least the server must do for one acquire + release, with the client library
//!   the backend uses (Redis `SET NX PX` + scripted delete; SQL one upsert + one update; ZooKeeper
//!   create + delete of an ephemeral node; etcd a put-if-absent transaction + delete; Redlock: the
//!   same as Redis on every master in parallel).
//! - `uncontended`: one client, `try_acquire` + `release` of one name in a loop.
//! - `contended`: `--clients` clients (each its own connections) on one name, each doing a
//!   read-yield-write of a shared counter while it holds the lock; hand-off time from the
//!   releaser's `release()` call to the next grant, the share of hand-offs that went to another
//!   client, and a counter check that proves exclusion.
//! - `spread`: the same clients on distinct names.
//! - `held`: `--held` leases with auto-renew in this process: CPU share of one core and resident
//!   memory per lease while they renew.
//!
//! `baseline` and `uncontended` run interleaved, in alternating turns of `--interleave` (see
//! [`turns`]), so that their ratio compares them in the same machine state.

mod baseline;
mod cases;
mod rtt;
mod turns;

use std::time::Duration;

use clap::Args;
use dlock::{Config, LockError};
use serde::Serialize;

/// Arguments of `dlock bench`.
#[derive(Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    pub(crate) target: crate::target::Target,
    /// How long each timed case runs.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub(crate) duration: Duration,
    /// Clients of the `contended` and `spread` cases.
    #[arg(long, default_value_t = 8)]
    pub(crate) clients: usize,
    /// Leases of the `held` case.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) held: usize,
    /// Lease time of every acquisition.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub(crate) ttl: Duration,
    /// Cases to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "baseline,uncontended,contended,spread,held")]
    pub(crate) cases: Vec<String>,
    /// `baseline` and `uncontended` take turns of this long (their ratio then compares the same
    /// minutes); `0s` runs them one after the other.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "250ms")]
    pub(crate) interleave: Duration,
    /// Print the report as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub(crate) json: bool,
    /// Add this round-trip time between every client (baseline included) and the server: a
    /// local proxy per server address delays each direction by half of it (`500us`: 0.25 ms one
    /// way). For URLs that name every server (not Sentinel, Cluster or SQLite).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) rtt: Option<Duration>,
}

/// One measured case. Fields that do not apply to a case are left out of the JSON.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct CaseResult {
    pub(crate) name: String,
    pub(crate) ops_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) p99_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) handoff_p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) handoff_p99_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) other_client_pct: Option<f64>,
    /// Acquisitions per client, lowest and highest (a starved client shows as 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) per_client_min_max: Option<(u64, u64)>,
    /// The shared counter matched the number of grants and no two holders overlapped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exclusion_ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_pct_of_one_core: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) bytes_per_lease: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leases_lost: Option<u64>,
    pub(crate) clients: usize,
    pub(crate) ops: u64,
    pub(crate) errors: u64,
    /// The case that took turns with this one (`--interleave`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) interleaved_with: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
}

/// Ratios against the baseline of the same run.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Ratios {
    /// `uncontended` ops/s over `baseline` ops/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    uncontended_vs_baseline: Option<f64>,
    /// `contended` hand-off p50 over `baseline` p50.
    #[serde(skip_serializing_if = "Option::is_none")]
    handoff_p50_vs_baseline_p50: Option<f64>,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub(crate) struct BenchReport {
    backend: String,
    url: String,
    duration_ms: u128,
    /// The turns of `baseline` and `uncontended` (0: one after the other).
    interleave_ms: u128,
    clients: usize,
    ttl_ms: u128,
    /// The round trip `--rtt` added between the clients and the server (0: none).
    rtt_us: u128,
    cases: Vec<CaseResult>,
    ratios: Ratios,
}

const KNOWN: [&str; 5] = ["baseline", "uncontended", "contended", "spread", "held"];

/// Runs the selected cases; `Ok(false)` when a case failed its exclusion check or errored.
pub(crate) async fn run(args: BenchArgs, out: &crate::redactor::Redactor) -> Result<bool, LockError> {
    for c in &args.cases {
        if !KNOWN.contains(&c.as_str()) {
            return Err(LockError::config(format!("unknown bench case {c:?}; the cases are {}", KNOWN.join(", "))));
        }
    }
    if args.clients == 0 || args.duration.is_zero() {
        return Err(LockError::config("--clients and --duration must be above zero"));
    }
    let mut config: Config = args.target.load(out)?;
    // The deployment as given, not the local proxies `--rtt` puts in front of it.
    let shown_url = config.redacted_url();
    let rtt = args.rtt.filter(|d| !d.is_zero());
    if let Some(rtt) = rtt {
        config.url = rtt::through_delay(&config.url, rtt)?;
        out.add(Some(config.url.clone()));
    }
    let lock = dlock::connect_with(&config).await?;
    let backend = lock.backend().to_owned();
    let plan = cases::Plan {
        config: config.clone(),
        duration: args.duration,
        clients: args.clients,
        held: args.held,
        ttl: args.ttl,
        run_id: format!("dlock-bench/{}", std::process::id()),
    };
    drop(lock);
    out.eprintln(&format!(
        "dlock bench against {shown_url} ({backend}): {:?} per case, {} clients, ttl {:?}{}",
        args.duration,
        args.clients,
        args.ttl,
        rtt.map(|d| format!(", {d:?} round trip added by local proxies")).unwrap_or_default()
    ));
    let mut results = Vec::new();
    let mut ok = true;
    let chosen: Vec<&str> = KNOWN.iter().copied().filter(|k| args.cases.iter().any(|c| c == k)).collect();
    let paired = !args.interleave.is_zero() && chosen.contains(&"baseline") && chosen.contains(&"uncontended");
    let progress = crate::progress::Progress::new(chosen.len(), out);
    let turns = turns::Turns::new(args.interleave);
    for name in chosen {
        let mut ran = Vec::new();
        match name {
            "uncontended" if paired => continue,
            "baseline" if paired => {
                progress.started(
                    "baseline and uncontended, taking turns …",
                    Some("[bench] baseline and uncontended, taking turns …"),
                );
                ran = taking_turns(&plan, &turns).await;
            }
            _ => {
                progress.started(&format!("{name} …"), Some(&format!("[bench] {name} …")));
                let alone = turns::Schedule::alone(plan.duration);
                let r = match name {
                    "baseline" => baseline::run(&plan, alone).await,
                    "uncontended" => cases::uncontended(&plan, alone).await,
                    "contended" => cases::contended(&plan).await,
                    "spread" => cases::spread(&plan).await,
                    _ => cases::held(&plan).await,
                };
                ran.push((name, r));
            }
        }
        for (name, result) in ran {
            let result = result.unwrap_or_else(|e| {
                ok = false;
                CaseResult { name: name.to_owned(), note: Some(format!("error: {e}")), errors: 1, ..Default::default() }
            });
            // A case that did nothing measured nothing: the run fails and says why (its note).
            if result.exclusion_ok == Some(false) || (result.ops == 0 && result.errors > 0) {
                ok = false;
            }
            progress.finished(&format!("[bench] {}", one_line(&result)), true);
            results.push(result);
        }
    }
    progress.done();
    let ratios = ratios(&results);
    let report = BenchReport {
        backend,
        url: shown_url,
        duration_ms: args.duration.as_millis(),
        interleave_ms: if paired { args.interleave.as_millis() } else { 0 },
        clients: args.clients,
        ttl_ms: args.ttl.as_millis(),
        rtt_us: rtt.map_or(0, |d| d.as_micros()),
        cases: results,
        ratios,
    };
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| LockError::backend("dlock", e))?;
        println!("{json}");
    } else {
        print_table(&report);
    }
    Ok(ok)
}

/// The baseline and the uncontended case at once, taking turns on the server, each result naming
/// the other.
async fn taking_turns(plan: &cases::Plan, turns: &turns::Turns) -> Vec<(&'static str, Result<CaseResult, LockError>)> {
    let d = plan.duration;
    let (b, u) = tokio::join!(
        baseline::run(plan, turns::Schedule::taking_turns(turns, 0, d)),
        cases::uncontended(plan, turns::Schedule::taking_turns(turns, 1, d)),
    );
    [("baseline", b, "uncontended"), ("uncontended", u, "baseline")]
        .into_iter()
        .map(|(case, r, other)| {
            let r = r.map(|mut r| {
                r.interleaved_with = Some(other.to_owned());
                r
            });
            (case, r)
        })
        .collect()
}

fn ratios(results: &[CaseResult]) -> Ratios {
    let find = |n: &str| results.iter().find(|r| r.name == n && r.errors == 0 && r.ops > 0);
    let base = find("baseline");
    Ratios {
        uncontended_vs_baseline: base
            .zip(find("uncontended"))
            .filter(|(b, _)| b.ops_per_s > 0.0)
            .map(|(b, u)| round2(u.ops_per_s / b.ops_per_s)),
        handoff_p50_vs_baseline_p50: base
            .and_then(|b| b.p50_us)
            .zip(find("contended").and_then(|c| c.handoff_p50_us))
            .filter(|(b, _)| *b > 0.0)
            .map(|(b, h)| round2(h / b)),
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map(|v| format!("{v:.0}{unit}")).unwrap_or_else(|| "-".into())
}

fn one_line(r: &CaseResult) -> String {
    let mut s = format!(
        "{:<12} {:>10.0} ops/s  p50 {:>8}  p99 {:>8}",
        r.name,
        r.ops_per_s,
        opt(r.p50_us, "µs"),
        opt(r.p99_us, "µs")
    );
    if r.handoff_p50_us.is_some() {
        s += &format!(
            "  hand-off p50 {} p99 {}  to another client {}",
            opt(r.handoff_p50_us, "µs"),
            opt(r.handoff_p99_us, "µs"),
            opt(r.other_client_pct, "%")
        );
    }
    if let Some(ok) = r.exclusion_ok {
        s += if ok { "  exclusion ok" } else { "  EXCLUSION VIOLATED" };
    }
    if r.cpu_pct_of_one_core.is_some() {
        s += &format!(
            "  cpu {}% of a core  {} B/lease  lost {}",
            r.cpu_pct_of_one_core.map(|c| format!("{c:.1}")).unwrap_or_default(),
            opt(r.bytes_per_lease, ""),
            r.leases_lost.unwrap_or(0)
        );
    }
    if let Some(n) = &r.note {
        s += &format!("  ({n})");
    }
    s
}

fn print_table(report: &BenchReport) {
    println!(
        "{} ({}), {} clients, {} ms per case, {} µs round trip added",
        report.backend, report.url, report.clients, report.duration_ms, report.rtt_us
    );
    for r in &report.cases {
        println!("{}", one_line(r));
    }
    if let Some(r) = report.ratios.uncontended_vs_baseline {
        println!("uncontended / baseline ops/s: {r:.2}");
    }
    if let Some(r) = report.ratios.handoff_p50_vs_baseline_p50 {
        println!("contended hand-off p50 / baseline p50: {r:.2}");
    }
}

/// Percentile of sorted microsecond samples.
pub(crate) fn percentile(sorted_us: &[f64], p: f64) -> Option<f64> {
    if sorted_us.is_empty() {
        return None;
    }
    let idx = ((sorted_us.len() - 1) as f64 * p).round() as usize;
    sorted_us.get(idx).copied()
}

/// Builds a result from per-operation latencies.
pub(crate) fn from_latencies(name: &str, mut lat: Vec<Duration>, elapsed: Duration, clients: usize) -> CaseResult {
    lat.sort();
    let us: Vec<f64> = lat.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    CaseResult {
        name: name.to_owned(),
        ops_per_s: us.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        p50_us: percentile(&us, 0.5),
        p99_us: percentile(&us, 0.99),
        clients,
        ops: us.len() as u64,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(51.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn ratios_need_a_baseline() {
        let u = CaseResult { name: "uncontended".into(), ops_per_s: 900.0, ops: 9, ..Default::default() };
        assert!(ratios(std::slice::from_ref(&u)).uncontended_vs_baseline.is_none());
        let b = CaseResult {
            name: "baseline".into(),
            ops_per_s: 1000.0,
            ops: 10,
            p50_us: Some(100.0),
            ..Default::default()
        };
        let c = CaseResult { name: "contended".into(), ops: 5, handoff_p50_us: Some(150.0), ..Default::default() };
        let r = ratios(&[b, u, c]);
        assert_eq!(r.uncontended_vs_baseline, Some(0.9));
        assert_eq!(r.handoff_p50_vs_baseline_p50, Some(1.5));
    }
}
