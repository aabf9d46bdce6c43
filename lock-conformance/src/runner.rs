//! The runner: runs the suite (or a filtered part) against one fixture and returns a report.
//! `dlock conformance` and [`conformance_tests!`](crate::conformance_tests) both sit on it.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! use std::sync::Arc;
//! use lock_conformance::{memory::MemoryFixture, runner::{run_suite, RunOptions}};
//! let options = RunOptions { filter: Some("try_acquire".into()), ..RunOptions::default() };
//! let report = run_suite(Arc::new(MemoryFixture::new()), &options).await;
//! assert!(report.ok(), "{}", serde_json::to_string_pretty(&report).unwrap());
//! # }
//! ```

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::cases::{all_cases, Case, CaseError};
use crate::Fixture;

/// How a case ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every check of the case held.
    Passed,
    /// A check failed, the case panicked, or it ran past its time limit.
    Failed,
    /// The case could not run (e.g. the fixture could not make a client). Not ok.
    Skipped,
    /// The case does not apply to this backend or fixture; `detail` says why.
    NotApplicable,
}

/// The result of one case.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseReport {
    /// `<backend>::<case>`.
    pub name: String,
    /// How it ended.
    pub outcome: Outcome,
    /// How long it took, in milliseconds.
    pub ms: u64,
    /// Measurements when passed; what went wrong, or why it does not apply, otherwise.
    pub detail: String,
}

/// The result of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The fixture's backend label.
    pub backend: String,
    /// One entry per case run, in suite order.
    pub cases: Vec<CaseReport>,
    /// How many passed.
    pub passed: usize,
    /// How many failed.
    pub failed: usize,
    /// How many could not run.
    pub skipped: usize,
    /// How many do not apply.
    pub not_applicable: usize,
}

impl Report {
    /// No case failed and none was skipped.
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.skipped == 0
    }
}

/// A progress callback, called once per finished case.
pub type OnCase = Arc<dyn Fn(&CaseReport) + Send + Sync>;

/// What to run and how.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Only cases whose name contains this substring.
    pub filter: Option<String>,
    /// How many cases run at once (0 counts as 1). Cases that stop or pause the server, and the
    /// nemesis, always run alone after the others.
    pub parallelism: usize,
    /// Called as each case finishes (in completion order).
    pub on_case: Option<OnCase>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("filter", &self.filter)
            .field("parallelism", &self.parallelism)
            .field("on_case", &self.on_case.is_some())
            .finish()
    }
}

/// Cases that stop, pause or restart the server disturb every other case on it: run alone. So do
/// the election cases, whose bounds (a hand-over, an observer within one ttl) a single-writer
/// backend such as SQLite cannot keep while the other cases load it (seen: a leader's lease lost
/// in `dlock conformance` on SQLite with every case running at once).
fn exclusive(case: &Case) -> bool {
    matches!(
        case.name,
        "fault_server_pause"
            | "fault_server_restart"
            | "fault_unavailable"
            | "nemesis"
            | "kinds_server_pause"
            | "kinds_nemesis"
            | "election_nemesis"
            | "election_resign_hands_over"
            | "election_observers_converge"
            | "fault_restart_quiet_period"
    )
}

/// Whether `run_suite` runs `case` alone, after the others (it stops, pauses or restarts the
/// server, or its bounds need the server to itself). For runners that split the suite.
pub fn runs_alone(case: &Case) -> bool {
    exclusive(case)
}

/// Runs one case under its time limit, catching panics.
pub async fn run_case(case: &Case, fixture: Arc<dyn Fixture>) -> CaseReport {
    let name = format!("{}::{}", fixture.backend(), case.name);
    let limit = case.time_limit(&*fixture);
    let started = Instant::now();
    if let Some(why) = fixture.not_applicable(case.name) {
        return CaseReport { name, outcome: Outcome::NotApplicable, ms: 0, detail: why };
    }
    let mut task = tokio::spawn(case.run(fixture));
    let (outcome, detail) = match tokio::time::timeout(limit, &mut task).await {
        Ok(Ok(Ok(detail))) => (Outcome::Passed, detail),
        Ok(Ok(Err(CaseError::Failed(d)))) => (Outcome::Failed, d),
        Ok(Ok(Err(CaseError::NotApplicable(d)))) => (Outcome::NotApplicable, d),
        Ok(Ok(Err(CaseError::Skipped(d)))) => (Outcome::Skipped, d),
        Ok(Err(e)) if e.is_panic() => (Outcome::Failed, format!("the case panicked: {}", panic_text(e))),
        Ok(Err(e)) => (Outcome::Failed, format!("the case was cancelled: {e}")),
        Err(_) => {
            task.abort();
            (
                Outcome::Failed,
                format!(
                    "the case did not finish within {:?}: a call hung or a wait never ended (every network \
                     wait must have a timeout)",
                    limit
                ),
            )
        }
    };
    CaseReport { name, outcome, ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), detail }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    let p = e.into_panic();
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-text panic)".to_owned()
    }
}

/// Runs every case (matching `options.filter`) against `fixture` and reports each outcome.
/// Never hangs: each case runs under [`Case::time_limit`].
pub async fn run_suite(fixture: Arc<dyn Fixture>, options: &RunOptions) -> Report {
    let selected: Vec<&'static Case> = all_cases()
        .iter()
        .filter(|c| options.filter.as_deref().is_none_or(|f| c.name.contains(f) || f.contains(c.name)))
        .collect();
    let run = |case: &'static Case| {
        let fixture = Arc::clone(&fixture);
        let on_case = options.on_case.clone();
        async move {
            let r = run_case(case, fixture).await;
            if let Some(cb) = &on_case {
                cb(&r);
            }
            r
        }
    };
    let (shared, alone): (Vec<&'static Case>, Vec<&'static Case>) = selected.iter().partition(|c| !exclusive(c));
    let mut reports: Vec<CaseReport> =
        futures::stream::iter(shared).map(run).buffered(options.parallelism.max(1)).collect().await;
    for case in alone {
        reports.push(run(case).await);
    }
    // Suite order, whatever order they ran in.
    let order = |r: &CaseReport| selected.iter().position(|c| r.name.ends_with(&format!("::{}", c.name)));
    reports.sort_by_key(order);
    let count = |o: Outcome| reports.iter().filter(|r| r.outcome == o).count();
    Report {
        backend: fixture.backend().to_owned(),
        passed: count(Outcome::Passed),
        failed: count(Outcome::Failed),
        skipped: count(Outcome::Skipped),
        not_applicable: count(Outcome::NotApplicable),
        cases: reports,
    }
}

#[cfg(test)]
mod tests {
    /// A case that takes the fixture's server hook stops, pauses or restarts the one server every
    /// other case of a `dlock conformance` run shares: it must be listed in `exclusive`.
    #[test]
    fn every_case_that_controls_the_server_runs_alone() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cases");
        for case in crate::cases::all_cases() {
            let uses_server = std::fs::read_dir(dir)
                .expect("cases dir")
                .filter_map(Result::ok)
                .filter_map(|f| std::fs::read_to_string(f.path()).ok())
                .any(|src| {
                    case_body(&src, case.name).is_some_and(|b| {
                        b.contains("fx.server()") || b.contains("server_of(") || b.contains("fx.deployment()")
                    })
                });
            assert!(!uses_server || super::exclusive(case), "{} controls the server but is not exclusive", case.name);
        }
    }

    /// The text of `pub async fn <name>` up to the next `pub async fn`.
    fn case_body<'a>(src: &'a str, name: &str) -> Option<&'a str> {
        let start = src.find(&format!("pub async fn {name}("))?;
        let rest = &src[start + 1..];
        Some(rest.find("pub async fn ").map_or(rest, |end| &rest[..end]))
    }
}
