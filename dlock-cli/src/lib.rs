//! The `dlock` command-line tool (`cargo install --path dlock-cli`), and the same tool as a
//! library function, so that an application's own binary can register its backends with the
//! `dlock` library first and then be the tool:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use dlock::{Config, Connecting, LockProvider, MemoryLock};
//! // A toy connect function: the backend's client for this configuration.
//! fn connect(_config: &Config) -> Connecting<'_> {
//!     Box::pin(async { Ok(Arc::new(MemoryLock::new()) as Arc<dyn LockProvider>) })
//! }
//! fn main() -> std::process::ExitCode {
//!     if let Err(e) = dlock::register_backend(dlock::Driver::new("etcd", &["etcd"], connect)) {
//!         eprintln!("{e}");
//!         return std::process::ExitCode::FAILURE;
//!     }
//!     dlock_cli::main()
//! }
//! ```
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
//! - `dlock completions bash|zsh|fish`: the shell completion script.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod acquire;
mod bench;
mod cleanup;
mod completions;
mod config;
mod conformance;
mod doctor;
mod exit;
mod fixture;
mod init;
mod list;
mod progress;
mod raw;
mod redactor;
mod release;
mod run;
mod status;
mod target;
mod waiting;
mod watch;

use self::redactor::Redactor;

#[derive(Parser)]
#[command(name = "dlock", version, about = "One distributed-lock API over Redis, Redlock, SQL and ZooKeeper")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the conformance suite against a deployment.
    Conformance(conformance::ConformanceArgs),
    /// Acquire a lock, print its fencing token, hold it, release it.
    Acquire(acquire::AcquireArgs),
    /// Print the effective configuration as TOML (or --json), secrets redacted.
    Config(config::ConfigArgs),
    /// Check the deployment (durability, eviction, privileges, connections, clock, version) and
    /// say what to fix; exit status 1 when a check failed.
    Doctor(doctor::DoctorArgs),
    /// Measure the deployment next to a baseline taken in the same run (see BENCHMARKS.md).
    Bench(bench::BenchArgs),
    /// Run a command while holding a lock (exit codes: 1 busy, 2 usage, 3 lease lost,
    /// 69 backend unavailable, 78 configuration error; otherwise the command's own status).
    Run(run::RunArgs),
    /// Who holds a lock: holder, fencing token, kind, time left, metadata, or "free" (exit 0
    /// either way).
    Status(status::StatusArgs),
    /// The held locks, as a table or --json.
    List(list::ListArgs),
    /// Print a line each time a lock's holder changes (polls every --interval), until Ctrl-C.
    Watch(watch::WatchArgs),
    /// Mark a new deployment fresh (Redis: its boot marker), so its first lock is granted at once
    /// instead of after the restart quiet period.
    Init(init::InitArgs),
    /// Free a lock whoever holds it (--force), take it over and release it, so the old holder's
    /// writes are fenced out; prints both tokens.
    Release(release::ReleaseArgs),
    /// Print the shell completion script (bash, zsh, fish), e.g. `dlock completions bash >
    /// ~/.local/share/bash-completion/completions/dlock`.
    Completions(completions::CompletionsArgs),
}

/// Runs the `dlock` tool on this process's arguments and returns its exit status (see the exit
/// codes in the `dlock run` help). URLs reach every backend of the table, the registered ones
/// included: call [`dlock::register_backend`] before this.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// [`main`] on the given arguments (the first is the program name).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    // Every line this tool writes, its own and the backends' logs, passes the redactor: a client
    // library may log or echo the URL with its password.
    let redactor = Redactor::default();
    let filter = ["DLOCK_LOG", "RUST_LOG"]
        .iter()
        .find_map(|var| tracing_subscriber::EnvFilter::try_from_env(var).ok())
        // Errors only, but for the warning that a SQL URL's TLS does not verify the server: the
        // one thing a person running the tool must see even when all goes well.
        .unwrap_or_else(|| "error,lock_sql::tls=warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(redactor.clone())
        .try_init()
        // An application that calls this after setting its own subscriber keeps it.
        .ok();
    let cli = Cli::parse_from(args);
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
            Command::Run(args) => return run::run(args, &out).await,
            Command::Conformance(args) => conformance::run(args, &out).await,
            Command::Acquire(args) => acquire::run(args, &out).await,
            Command::Bench(args) => bench::run(args, &out).await,
            Command::Config(args) => config::run(args, &out),
            Command::Doctor(args) => doctor::run(args, &out).await,
            Command::Status(args) => status::run(args, &out).await,
            Command::List(args) => list::run(args, &out).await,
            Command::Watch(args) => watch::run(args, &out).await,
            Command::Release(args) => release::run(args, &out).await,
            Command::Init(args) => init::run(args, &out).await,
            Command::Completions(args) => completions::run(args, &out),
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
