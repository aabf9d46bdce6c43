//! The `dlock` command-line tool.
//!
//! - `dlock conformance --url URL | --config FILE [--json]`: runs the conformance suite against a
//!   deployment; exit status 0 only when nothing failed and nothing was skipped.
//! - `dlock acquire NAME [--hold 5s]`: takes a lock, prints its fencing token, holds, releases.
//! - `dlock run --name NAME [--ttl 30s] [--wait 0s|10s|forever] -- CMD ARGS…`: runs a command under
//!   a lock (exit codes in `exit.rs`).
//! - `dlock config`: shows the effective configuration (secrets redacted).
//! - `dlock bench --url URL [--duration 5s] [--clients 8] [--json]`: measures the deployment next to
//!   a baseline taken in the same run with the same client library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use dlock::conformance::memory::MemoryFixture;
use dlock::conformance::runner::{run_suite, CaseReport, Outcome, Report, RunOptions};
use dlock::conformance::Fixture;
use dlock::{Config, LockError, LockName};

mod bench;
mod exit;
mod run;
mod url_fixture;

#[derive(Parser)]
#[command(name = "dlock", version, about = "One distributed-lock API over Redis, Redlock, SQL and ZooKeeper")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the conformance suite against a deployment.
    Conformance(ConformanceArgs),
    /// Acquire a lock, print its fencing token, hold it, release it.
    Acquire(AcquireArgs),
    /// Print the effective configuration (secrets redacted).
    Config(Target),
    /// Measure the deployment next to a baseline taken in the same run (see BENCHMARKS.md).
    Bench(bench::BenchArgs),
    /// Run a command while holding a lock (exit codes: 1 busy, 2 usage, 3 lease lost,
    /// 69 backend unavailable, 78 configuration error; otherwise the command's own status).
    Run(run::RunArgs),
}

#[derive(Args)]
struct Target {
    /// Backend URL (overrides the config file and DLOCK_URL).
    #[arg(long)]
    url: Option<String>,
    /// Config file (default: dlock.toml in the working directory, or DLOCK_CONFIG).
    #[arg(long)]
    config: Option<PathBuf>,
}

impl Target {
    fn load(&self) -> Result<Config, LockError> {
        let mut config = match &self.config {
            Some(path) => Config::load_file(path)?,
            None => Config::load()?,
        };
        if let Some(url) = &self.url {
            config.url = url.clone();
            config.validate()?;
        }
        Ok(config)
    }
}

#[derive(Args)]
struct ConformanceArgs {
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

#[derive(Args)]
struct AcquireArgs {
    #[command(flatten)]
    target: Target,
    /// The lock name.
    name: String,
    /// How long to hold the lock before releasing it.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    hold: Duration,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("DLOCK_LOG").unwrap_or_else(|_| "error".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dlock: cannot start the async runtime: {e}");
            return exit::code(exit::UNAVAILABLE);
        }
    };
    let code = runtime.block_on(async move {
        let result = match cli.command {
            Command::Run(args) => return run::run(args).await,
            Command::Conformance(args) => conformance(args).await,
            Command::Acquire(args) => acquire(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Config(target) => target.load().map(|config| {
                println!("{config:#?}");
                true
            }),
        };
        match result {
            Ok(true) => exit::SUCCESS,
            // A conformance run with failures, a bench case that broke exclusion.
            Ok(false) => exit::BUSY,
            Err(e) => {
                eprintln!("dlock: {e}");
                exit::of_error(&e)
            }
        }
    });
    exit::code(code)
}

async fn acquire(args: AcquireArgs) -> Result<bool, LockError> {
    let config = args.target.load()?;
    let lock = dlock::connect_with(&config).await?;
    let name = LockName::new(&args.name)?;
    let lease = lock.acquire(&name, &config.acquire_options()).await?;
    println!("acquired {:?} on {} with fencing token {}", name.as_str(), lock.backend(), lease.token());
    tokio::select! {
        _ = tokio::time::sleep(args.hold) => {}
        _ = lease.lost().fired() => {
            eprintln!("lease lost: {}", lease.lost().reason().unwrap_or("unknown"));
            return Err(LockError::Lost { name: name.as_str().to_owned() });
        }
    }
    lease.release().await?;
    println!("released");
    Ok(true)
}

async fn conformance(args: ConformanceArgs) -> Result<bool, LockError> {
    let config = args.target.load()?;
    eprintln!("dlock conformance against {}", config.redacted_url());
    let fixture: Arc<dyn Fixture> = match dlock::Scheme::of(&config.url)? {
        // The in-process server offers every fault hook; keep it alive for the whole run.
        dlock::Scheme::Memory => {
            let name = config.url.split_once("://").map(|(_, n)| n).unwrap_or("");
            Arc::new(MemoryFixture::with_server(dlock::MemoryLock::named(name)))
        }
        _ => Arc::new(url_fixture::UrlFixture::new(config).await?),
    };
    let total = dlock::conformance::all_cases().len();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress = {
        let done = Arc::clone(&done);
        move |case: &CaseReport| {
            let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "[{n:>3}/{total}] {:<15} {:<40} {:>6} ms  {}",
                outcome_label(case.outcome),
                case.name,
                case.ms,
                first_line(&case.detail)
            );
        }
    };
    let options = RunOptions {
        filter: args.filter.clone(),
        parallelism: args.parallel.max(1),
        on_case: Some(Arc::new(progress)),
    };
    let report = run_suite(fixture, &options).await;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| LockError::backend("dlock", e))?;
        println!("{json}");
    } else {
        print_table(&report);
    }
    Ok(report.ok())
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

fn print_table(report: &Report) {
    let width = report.cases.iter().map(|c| c.name.len()).max().unwrap_or(4).max(4);
    println!("{:<width$}  {:<15} {:>8}  detail", "case", "outcome", "ms");
    for c in &report.cases {
        println!("{:<width$}  {:<15} {:>8}  {}", c.name, outcome_label(c.outcome), c.ms, first_line(&c.detail));
    }
    println!(
        "\n{}: {} passed, {} failed, {} skipped, {} not applicable",
        report.backend, report.passed, report.failed, report.skipped, report.not_applicable
    );
}
