//! The `dlock` command-line tool.
//!
//! - `dlock conformance --url URL | --config FILE [--json]`: runs the conformance suite against a
//!   deployment; exit status 0 only when nothing failed and nothing was skipped.
//! - `dlock acquire NAME [--hold 5s]`: takes a lock, prints its fencing token, holds, releases.
//! - `dlock run --name NAME [--ttl 30s] [--wait 0s|10s|forever] [--holder ID] -- CMD ARGS…`: runs a command under
//!   a lock (exit codes in `cli/exit.rs`).
//! - `dlock status NAME`, `dlock list [--prefix P]`, `dlock watch NAME`, `dlock release --force
//!   NAME` (each with `--json`): who holds what, holder changes, an operator's forced release.
//! - `dlock config [--json]`: shows the effective configuration as TOML or JSON (secrets redacted).
//! - `dlock doctor --url URL [--json]`: checks the deployment and says what to fix.
//! - `dlock bench --url URL [--duration 5s] [--clients 8] [--json]`: measures the deployment next to
//!   a baseline taken in the same run with the same client library.

use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use dlock::{Config, DistributedLock, LockError, LockName};
use lock_conformance::memory::MemoryFixture;
use lock_conformance::runner::{run_suite, CaseReport, Outcome, Report, RunOptions};
use lock_conformance::Fixture;

mod cli {
    pub(crate) mod bench;
    pub(crate) mod cleanup;
    pub(crate) mod config;
    pub(crate) mod doctor;
    pub(crate) mod exit;
    pub(crate) mod fixture;
    pub(crate) mod list;
    pub(crate) mod progress;
    pub(crate) mod raw;
    pub(crate) mod redactor;
    pub(crate) mod release;
    pub(crate) mod run;
    pub(crate) mod status;
    pub(crate) mod watch;
}

use cli::exit;
use cli::redactor::Redactor;

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
    /// Print the effective configuration as TOML (or --json), secrets redacted.
    Config(cli::config::ConfigArgs),
    /// Check the deployment (durability, eviction, privileges, connections, clock, version) and
    /// say what to fix; exit status 1 when a check failed.
    Doctor(cli::doctor::DoctorArgs),
    /// Measure the deployment next to a baseline taken in the same run (see BENCHMARKS.md).
    Bench(cli::bench::BenchArgs),
    /// Run a command while holding a lock (exit codes: 1 busy, 2 usage, 3 lease lost,
    /// 69 backend unavailable, 78 configuration error; otherwise the command's own status).
    Run(cli::run::RunArgs),
    /// Who holds a lock: holder, fencing token, kind, time left, metadata, or "free" (exit 0
    /// either way).
    Status(cli::status::StatusArgs),
    /// The held locks, as a table or --json.
    List(cli::list::ListArgs),
    /// Print a line each time a lock's holder changes (polls every --interval), until Ctrl-C.
    Watch(cli::watch::WatchArgs),
    /// Free a lock whoever holds it (--force), take it over and release it, so the old holder's
    /// writes are fenced out; prints both tokens.
    Release(cli::release::ReleaseArgs),
}

#[derive(Args)]
struct Target {
    /// Backend URL (overrides the config file).
    #[arg(long, env = "DLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// Config file (default: dlock.toml in the working directory, or DLOCK_CONFIG).
    #[arg(long)]
    config: Option<PathBuf>,
}

impl Target {
    /// The configuration, its URL handed to the redactor before anything may print it.
    fn load(&self, redactor: &Redactor) -> Result<Config, LockError> {
        redactor.add(self.url.clone());
        let mut config = match (&self.config, &self.url) {
            (Some(path), _) => Config::load_file(path)?,
            // --url given: nothing falls back, so Config::load's warning would be wrong.
            (None, Some(url)) => {
                let fig = Config::figment(Some(&Config::default_file()))?.merge(("url", url.as_str()));
                Config::extract(fig)?
            }
            (None, None) => Config::load()?,
        };
        if let Some(url) = &self.url {
            config.url = url.clone();
            config.validate()?;
        }
        redactor.add(Some(config.url.clone()));
        Ok(config)
    }
}

/// A backend and one lock name on it (`status`, `watch`, `release`).
#[derive(Args)]
struct NamedLock {
    #[command(flatten)]
    target: Target,
    /// The lock name.
    name: String,
}

impl NamedLock {
    /// The configuration (see [`Target::load`]) and the checked lock name.
    fn load(&self, redactor: &Redactor) -> Result<(Config, LockName), LockError> {
        Ok((self.target.load(redactor)?, LockName::new(&self.name)?))
    }

    /// [`NamedLock::load`], then a client of the backend.
    async fn open(&self, redactor: &Redactor) -> Result<(Config, LockName, Arc<dyn DistributedLock>), LockError> {
        let (config, name) = self.load(redactor)?;
        let lock = dlock::connect_with(&config).await?;
        Ok((config, name, lock))
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
    // Every line this tool writes, its own and the backends' logs, passes the redactor: a client
    // library may log or echo the URL with its password.
    let redactor = Redactor::default();
    let filter = ["DLOCK_LOG", "RUST_LOG"]
        .iter()
        .find_map(|var| tracing_subscriber::EnvFilter::try_from_env(var).ok())
        .unwrap_or_else(|| "error".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(redactor.clone())
        .init();
    let cli = Cli::parse();
    redactor.add(std::env::var("DLOCK_URL").ok());
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dlock: cannot start the async runtime: {e}");
            return exit::code(exit::UNAVAILABLE);
        }
    };
    let out = redactor.clone();
    let code = runtime.block_on(async move {
        let result = match cli.command {
            Command::Run(args) => return cli::run::run(args, &out).await,
            Command::Conformance(args) => conformance(args, &out).await,
            Command::Acquire(args) => acquire(args, &out).await,
            Command::Bench(args) => cli::bench::run(args, &out).await,
            Command::Config(args) => cli::config::run(args, &out),
            Command::Doctor(args) => cli::doctor::run(args, &out).await,
            Command::Status(args) => cli::status::run(args, &out).await,
            Command::List(args) => cli::list::run(args, &out).await,
            Command::Watch(args) => cli::watch::run(args, &out).await,
            Command::Release(args) => cli::release::run(args, &out).await,
        };
        match result {
            Ok(true) => exit::SUCCESS,
            // A conformance run with failures, a bench case that broke exclusion.
            Ok(false) => exit::BUSY,
            Err(e) => {
                out.eprintln(&format!("dlock: {e}"));
                exit::of_error(&e)
            }
        }
    });
    exit::code(code)
}

async fn acquire(args: AcquireArgs, out: &Redactor) -> Result<bool, LockError> {
    let config = args.target.load(out)?;
    let lock = dlock::connect_with(&config).await?;
    let name = LockName::new(&args.name)?;
    let lease = lock.acquire(&name, &config.acquire_options()).await?;
    out.println(&format!("acquired {:?} on {} with fencing token {}", name.as_str(), lock.backend(), lease.token()));
    tokio::select! {
        _ = tokio::time::sleep(args.hold) => {}
        _ = lease.lost().fired() => {
            out.eprintln(&format!("lease lost: {}", lease.lost().reason().unwrap_or("unknown")));
            return Err(LockError::Lost { name: name.as_str().to_owned() });
        }
    }
    lease.release().await?;
    out.println("released");
    Ok(true)
}

async fn conformance(args: ConformanceArgs, out: &Redactor) -> Result<bool, LockError> {
    let config = args.target.load(out)?;
    out.eprintln(&format!("dlock conformance against {}", config.redacted_url()));
    // Names under this prefix are deleted after the run (`None`: an in-process server).
    let mut cleanup = None;
    let fixture: Arc<dyn Fixture> = match dlock::Scheme::of(&config.url)? {
        // The in-process server offers every fault hook; keep it alive for the whole run.
        dlock::Scheme::Memory => {
            let name = config.url.split_once("://").map(|(_, n)| n).unwrap_or("");
            Arc::new(MemoryFixture::with_server(dlock::MemoryLock::named(name)))
        }
        _ => {
            let fixture = cli::fixture::UrlFixture::new(config.clone()).await?;
            cleanup = Some(fixture.name_prefix());
            Arc::new(fixture)
        }
    };
    let filter = args.filter.as_deref();
    let total = lock_conformance::all_cases()
        .iter()
        .filter(|c| filter.is_none_or(|f| c.name.contains(f) || f.contains(c.name)))
        .count();
    let bar = Arc::new(cli::progress::Progress::new(total, out));
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
        Some(prefix) => match cli::cleanup::purge(&config, &prefix).await {
            Ok(n) => {
                out.eprintln(&format!("cleaned up {n} rows/keys/nodes under the run's prefix {prefix:?}"));
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
