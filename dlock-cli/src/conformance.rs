//! `dlock conformance --url URL | --config FILE [--json] [--filter TEXT] [--parallel N]`: the
//! conformance suite against a deployment, then the clean-up of the names it used.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use lock_conformance::memory::MemoryFixture;
use lock_conformance::runner::{run_suite, CaseReport, Outcome, Report, RunOptions};
use lock_conformance::Fixture;

use crate::redactor::Redactor;
use crate::target::Target;
use crate::{cleanup, fixture, progress};
use dlock::{LockError, MemoryLock, Scheme};

#[derive(Args)]
pub(crate) struct ConformanceArgs {
    #[command(flatten)]
    target: Target,
    /// Print the report as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Run only the cases whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// How many cases run at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
}

/// Runs the suite; `Ok(false)` when a case failed or was skipped, or the clean-up failed.
pub(crate) async fn run(args: ConformanceArgs, out: &Redactor) -> Result<bool, LockError> {
    let config = args.target.load(out)?;
    out.eprintln(&format!("dlock conformance against {}", config.redacted_url()));
    // Names under this prefix are deleted after the run (`None`: an in-process server).
    let mut cleanup = None;
    let fixture: Arc<dyn Fixture> = match Scheme::of(&config.url)? {
        // The in-process server offers every fault hook; keep it alive for the whole run. Its
        // cases share one process with the tool's other work, so they get the base ttl of the
        // tool's other fixtures (1.5 s): at the memory fixture's own 500 ms, a loaded machine that
        // stalls the process for a third of a second loses leases of the cases running then.
        Scheme::Memory => {
            let name = config.url.split_once("://").map(|(_, n)| n).unwrap_or("");
            Arc::new(MemoryFixture::with_server(MemoryLock::named(name)).with_base_ttl(Duration::from_millis(1500)))
        }
        _ => {
            let fixture = fixture::UrlFixture::new(config.clone()).await?;
            cleanup = Some(fixture.name_prefix());
            Arc::new(fixture)
        }
    };
    let filter = args.filter.as_deref();
    let total = lock_conformance::all_cases()
        .iter()
        .filter(|c| filter.is_none_or(|f| c.name.contains(f) || f.contains(c.name)))
        .count();
    let bar = Arc::new(progress::Progress::new(total, out));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress = {
        let (done, bar) = (Arc::clone(&done), Arc::clone(&bar));
        move |case: &CaseReport| {
            let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let line = format!(
                "[{n:>3}/{total}] {:<15} {:<40} {:>6} ms  {}",
                outcome_label(case.outcome),
                case.name,
                case.ms,
                first_line(&case.detail)
            );
            // On a terminal only what needs a look is printed above the bar.
            bar.finished(&line, !matches!(case.outcome, Outcome::Passed | Outcome::NotApplicable));
            bar.started(&case.name, None);
        }
    };
    let options = RunOptions {
        filter: args.filter.clone(),
        parallelism: args.parallel.max(1),
        on_case: Some(Arc::new(progress)),
    };
    let report = run_suite(fixture, &options).await;
    bar.done();
    let cleaned = match cleanup {
        None => true,
        Some(prefix) => match cleanup::purge(&config, &prefix).await {
            Ok(n) => {
                out.eprintln(&format!("cleaned up {n} rows/keys/nodes under the run's prefix {prefix:?}"));
                true
            }
            // A registered backend without `purge`: its author chose so; the report stands.
            Err(e @ LockError::Unsupported { .. }) => {
                out.eprintln(&format!("dlock: no clean-up ({e}): the names under {prefix:?} stay in the deployment"));
                true
            }
            Err(e) => {
                out.eprintln(&format!(
                    "dlock: CLEAN-UP FAILED: the names under {prefix:?} are still in the deployment ({e}); \
                     delete them by hand (see README, \"dlock conformance\")"
                ));
                false
            }
        },
    };
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| LockError::backend("dlock", e))?;
        out.println(&json);
    } else {
        out.println(&table(&report));
    }
    Ok(report.ok() && cleaned)
}

fn outcome_label(o: Outcome) -> &'static str {
    match o {
        Outcome::Passed => "passed",
        Outcome::Failed => "FAILED",
        Outcome::Skipped => "SKIPPED",
        Outcome::NotApplicable => "not applicable",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn table(report: &Report) -> String {
    let width = report.cases.iter().map(|c| c.name.len()).max().unwrap_or(4).max(4);
    let mut text = format!("{:<width$}  {:<15} {:>8}  detail\n", "case", "outcome", "ms");
    for c in &report.cases {
        let _ = writeln!(
            text,
            "{:<width$}  {:<15} {:>8}  {}",
            c.name,
            outcome_label(c.outcome),
            c.ms,
            first_line(&c.detail)
        );
    }
    let _ = write!(
        text,
        "\n{}: {} passed, {} failed, {} skipped, {} not applicable",
        report.backend, report.passed, report.failed, report.skipped, report.not_applicable
    );
    text
}
