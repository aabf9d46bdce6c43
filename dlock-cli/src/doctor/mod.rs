//! `dlock doctor`: checks a deployment for what would break dlock's promises and says what to
//! fix. Each finding is ok, warn or fail; the exit status is 1 when any check failed (69 when
//! the deployment cannot be reached, 78 for a bad configuration).
//!
//! One module per backend: [`redis`] (eviction policy, persistence, scripts, ACL, connection
//! limit, clock; on Sentinel and Cluster every node's clock offset), [`sql`] (durability settings, table privileges, connection budget, clock),
//! [`zk`] (server version and container nodes, ensemble mode, clock). Every backend's checks
//! also connect the way the lock client does ([`client_connects`]), which runs the backend's
//! own start-up checks (ACL permissions, tables).

#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sql")]
mod sql;
#[cfg(feature = "zk")]
mod zk;

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use dlock::{Config, LockError, Scheme};
use serde::Serialize;

use super::redactor::Redactor;

/// Arguments of `dlock doctor`.
#[derive(Args)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    target: crate::target::Target,
    /// Print the findings as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
}

/// One check's outcome: what was found and, unless ok, what to do about it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Finding {
    /// Short name of the check (`maxmemory-policy`, `synchronous_commit`, …).
    pub(crate) check: String,
    pub(crate) status: Status,
    /// What was found.
    pub(crate) detail: String,
    /// What to change (empty when ok).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) fix: String,
}

impl Finding {
    pub(crate) fn ok(check: &str, detail: impl Into<String>) -> Finding {
        Finding { check: check.to_owned(), status: Status::Ok, detail: detail.into(), fix: String::new() }
    }

    pub(crate) fn warn(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check: check.to_owned(), status: Status::Warn, detail: detail.into(), fix: fix.into() }
    }

    pub(crate) fn fail(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check: check.to_owned(), status: Status::Fail, detail: detail.into(), fix: fix.into() }
    }

    /// A check that could not be made: a warning that says why.
    pub(crate) fn unknown(check: &str, e: impl std::fmt::Display, fix: impl Into<String>) -> Finding {
        Finding::warn(check, format!("could not check: {e}"), fix)
    }
}

#[derive(Serialize)]
struct Report<'a> {
    backend: String,
    url: String,
    ok: bool,
    findings: &'a [Finding],
}

/// Runs the checks for the configured backend and prints them; `Ok(false)` when any failed.
pub(crate) async fn run(args: DoctorArgs, out: &Redactor) -> Result<bool, LockError> {
    let config = args.target.load(out)?;
    let scheme = Scheme::of(&config.url)?;
    let mut findings = vec![client_connects(&config).await?];
    findings.extend(backend_checks(scheme, &config).await?);
    let ok = findings.iter().all(|f| f.status != Status::Fail);
    if args.json {
        let report = Report {
            backend: scheme.driver().map_or_else(|| format!("{scheme:?}").to_lowercase(), |d| d.name.to_owned()),
            url: config.redacted_url(),
            ok,
            findings: &findings,
        };
        let json = serde_json::to_string_pretty(&report).map_err(|e| LockError::backend("dlock", e))?;
        out.println(&json);
    } else {
        out.println(&table(&config, &findings));
    }
    Ok(ok)
}

async fn backend_checks(scheme: Scheme, config: &Config) -> Result<Vec<Finding>, LockError> {
    match scheme {
        Scheme::Memory => Ok(vec![Finding::warn(
            "backend",
            "memory:// is an in-process lock: it excludes only within this process",
            "use redis://, postgres://, mysql://, sqlite:// or zk:// to lock across processes",
        )]),
        Scheme::Registered(name) => Ok(vec![Finding::warn(
            "backend",
            format!("dlock has no checks of the registered backend {name:?}: only that it connects"),
            "check its durability, eviction and privileges as its documentation says",
        )]),
        #[cfg(feature = "redis")]
        Scheme::Redis | Scheme::Redlock => redis::checks(config).await,
        #[cfg(feature = "sql")]
        Scheme::Postgres | Scheme::Mysql | Scheme::Sqlite => sql::checks(config).await,
        #[cfg(feature = "zk")]
        Scheme::ZooKeeper => zk::checks(config).await,
        #[allow(unreachable_patterns)]
        other => Err(LockError::config(format!("this build of dlock has no {other:?} backend to check"))),
    }
}

/// Connects a lock client as an application would: the backend's own start-up checks (server
/// reachable, credentials, ACL permissions, lease tables; SQL tables are created if missing, as
/// the first lock client would) run on the way. An unreachable deployment is an error (exit 69):
/// there is nothing to check.
async fn client_connects(config: &Config) -> Result<Finding, LockError> {
    match tokio::time::timeout(super::raw::WAIT, dlock::connect_with(config)).await {
        Ok(Ok(lock)) => Ok(Finding::ok("client", format!("a {} lock client connects", lock.backend()))),
        Ok(Err(e @ LockError::Unavailable { .. })) => Err(e),
        Ok(Err(e)) => {
            Ok(Finding::fail("client", format!("a lock client cannot connect: {e}"), "fix what the error names"))
        }
        Err(_) => Err(LockError::unavailable(
            "dlock",
            format!(
                "a lock client did not connect within {:?}; check the server is up and reachable",
                super::raw::WAIT
            ),
        )),
    }
}

/// The clock check shared by the backends: `server_ms` (server time in ms since the epoch)
/// read between `before` and `after` on this machine.
pub(crate) fn clock_skew(server: &str, server_ms: i64, before: SystemTime, after: SystemTime) -> Finding {
    let ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_millis() as i64;
    let (b, a) = (ms(before), ms(after));
    let local = b + (a - b) / 2;
    let skew = server_ms - local;
    let detail = format!("{server}'s clock is {skew:+} ms from this machine's (±{} ms round trip)", (a - b + 1) / 2);
    if skew.abs() <= 500 {
        Finding::ok("clock skew", detail)
    } else {
        Finding::warn(
            "clock skew",
            detail,
            "run NTP (chrony, systemd-timesyncd) on both machines: leases are timed by the server, but logs, \
             `dlock status` expiry times and any fencing checks by timestamp compare the two clocks",
        )
    }
}

fn table(config: &Config, findings: &[Finding]) -> String {
    let width = findings.iter().map(|f| f.check.len()).max().unwrap_or(5).max(5);
    let mut text = format!("dlock doctor: {}\n\n", config.redacted_url());
    for f in findings {
        let label = match f.status {
            Status::Ok => "ok",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        };
        let _ = writeln!(text, "{label:<4}  {:<width$}  {}", f.check, f.detail);
        if !f.fix.is_empty() {
            let _ = writeln!(text, "{:<4}  {:<width$}  fix: {}", "", "", f.fix);
        }
    }
    let count = |s: Status| findings.iter().filter(|f| f.status == s).count();
    let _ =
        write!(text, "\n{} ok, {} warnings, {} failed", count(Status::Ok), count(Status::Warn), count(Status::Fail));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_is_measured_against_the_middle_of_the_round_trip() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let t1 = t0 + Duration::from_millis(100);
        let ok = clock_skew("s", 1_000_000_050, t0, t1);
        assert_eq!(ok.status, Status::Ok, "{ok:?}");
        assert!(ok.detail.contains("+0 ms"), "{ok:?}");
        let off = clock_skew("s", 1_000_002_050, t0, t1);
        assert_eq!(off.status, Status::Warn, "{off:?}");
        assert!(off.detail.contains("+2000 ms"), "{off:?}");
    }
}
