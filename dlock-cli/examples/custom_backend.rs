//! A backend written outside the dlock crates: registered under its own URL scheme, chosen by
//! configuration like the shipped ones, and certified by the conformance suite.
//!
//! 1. **The backend.** `ToyStore` is a tiny lease table in a shared map (stand-in for your
//!    server). Implementing `LeaseStore` (one atomic try / renew / release each) and wrapping it
//!    in `StoreLock` gives a full `DistributedLock`: waiting, timeouts, cancel-safety and the
//!    `Lease` watchdog come from lock-core.
//! 2. **Its provider and scheme.** `ToyProvider` (a `LockProvider`) hands out its locks over one
//!    server; `connect` builds one from a `Config` — the URL `toy://<server name>` and the
//!    `[toy]` section of `dlock.toml` (`capacity = 1000`, or `DLOCK_TOY__CAPACITY`) — and
//!    `register` adds the row to dlock's backend table. From then on `DLOCK_URL=toy://demo`,
//!    `dlock.toml`, `dlock::Client` and every `dlock` command reach it.
//! 3. **Certification**, two ways: `ToyFixture` hands the suite fresh clients and every fault
//!    hook (a partition switch per client, a server that can go down and lose its memory) and
//!    `certify` runs every case; and `dlock conformance`, run by this binary after registering,
//!    certifies whatever `DLOCK_URL` names, as it does for the shipped backends.
//!
//! Run it:
//!
//! ```text
//! cargo run --example custom_backend                                         # the suite, every hook
//! DLOCK_URL=toy://demo cargo run --example custom_backend -- conformance     # the dlock tool on toy://
//! DLOCK_URL=toy://demo cargo run --example custom_backend -- status orders   # any dlock command
//! ```
//!
//! `tests/custom_backend.rs` runs all three, so the example cannot rot. In your own crate, the
//! fixture gets one named test per case from a single line in `tests/conformance.rs`:
//!
//! ```ignore
//! lock_conformance::conformance_tests!(toy, || async { Ok::<_, dlock::LockError>(ToyFixture::new()) });
//! ```

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::backend::{async_trait, Claim, LeaseStore, ReleaseOutcome, RenewOutcome, StoreLock, TryLock};
use dlock::{
    Capabilities, Config, Connecting, DistributedLock, Driver, FencingToken, HolderInfo, LockError, LockKind, LockName,
    LockProvider, OwnerId,
};
use lock_conformance::runner::{run_suite, Outcome, Report, RunOptions};
use lock_conformance::{ClientLink, DownSwitch, Fixture, LinkedClient, ServerControl};
use serde::Deserialize;
use tokio::time::Instant;

/// The "server": one row per name (a [`Row`]), lost when it restarts, and "on disk" per name
/// a fence counter that is never reset, so tokens stay monotonic, and the end of the last lease
/// granted: a restarted server that forgot a lease grants nothing on that name before the lease
/// could have ended, because its holder still believes it (the suite's restart quiet period case).
#[derive(Default)]
struct ToyServer {
    rows: Mutex<HashMap<LockName, Row>>,
    fences: Mutex<HashMap<LockName, u64>>,
    ends: Mutex<HashMap<LockName, Instant>>,
    down: Arc<AtomicBool>,
}

/// One lease: who holds it until when with which token, and who the acquirer said it is (for
/// `inspect`, `list` and `dlock status`).
struct Row {
    owner: OwnerId,
    expires: Instant,
    token: u64,
    holder: Option<String>,
    metadata: Option<String>,
}

impl Row {
    fn info(&self, name: &LockName, now: Instant) -> HolderInfo {
        let mut info = HolderInfo::new(name.as_str(), FencingToken(self.token), LockKind::Exclusive)
            .with_holder(self.holder.clone(), self.metadata.clone());
        info.remaining = Some(self.expires.saturating_duration_since(now));
        info
    }
}

/// One client's connection to the server.
struct ToyStore {
    server: Arc<ToyServer>,
    partitioned: Arc<AtomicBool>,
    options: ToyOptions,
}

/// The `[toy]` section of the configuration.
#[derive(Clone, Copy, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ToyOptions {
    /// The most names the server holds leases on at once (`None`: no limit); a lock on one
    /// more is `Unavailable`, as a server out of memory would answer.
    capacity: Option<usize>,
}

impl ToyStore {
    fn reachable(&self) -> Result<(), LockError> {
        if self.server.down.load(Ordering::SeqCst) || self.partitioned.load(Ordering::SeqCst) {
            return Err(LockError::unavailable("toy", "the toy server cannot be reached"));
        }
        Ok(())
    }

    /// One atomic attempt: the name is free (or ours), so it is granted with the next token.
    fn grant(&self, claim: &Claim<'_>) -> Result<TryLock, LockError> {
        self.reachable()?;
        let (name, now) = (claim.name, Instant::now());
        let mut rows = self.server.rows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(row) = rows.get(name) {
            if row.owner != claim.owner && row.expires > now {
                return Ok(TryLock::Held { remaining: Some(row.expires - now) });
            }
        }
        if self.options.capacity.is_some_and(|cap| rows.len() >= cap && !rows.contains_key(name)) {
            return Err(LockError::unavailable("toy", "the toy server holds as many leases as its capacity"));
        }
        let mut ends = self.server.ends.lock().unwrap_or_else(|e| e.into_inner());
        match ends.get(name) {
            Some(end) if !rows.contains_key(name) && *end > now => {
                return Ok(TryLock::Held { remaining: Some(*end - now) });
            }
            _ => {}
        }
        let mut fences = self.server.fences.lock().unwrap_or_else(|e| e.into_inner());
        let fence = fences.entry(name.clone()).or_insert(0);
        *fence += 1;
        let (holder, metadata) = (claim.holder_id().map(str::to_owned), claim.metadata().map(str::to_owned));
        let row = Row { owner: claim.owner, expires: now + claim.ttl, token: *fence, holder, metadata };
        rows.insert(name.clone(), row);
        ends.insert(name.clone(), now + claim.ttl);
        Ok(TryLock::Acquired { token: FencingToken(*fence) })
    }
}

#[async_trait]
impl LeaseStore for ToyStore {
    fn backend(&self) -> &str {
        "toy"
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new();
        caps.durable_fencing = true; // the fence map survives `ServerControl::stop`
        caps.inspect = true; // each row keeps the acquirer's identity
        caps.list = true;
        caps
    }

    // A single try and a waiting attempt are the same here (no queue); the holder's identity
    // is stored with the lease.
    async fn try_lock(&self, claim: &Claim<'_>, _waiting: bool) -> Result<TryLock, LockError> {
        self.grant(claim)
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.reachable()?;
        let now = Instant::now();
        let mut rows = self.server.rows.lock().unwrap_or_else(|e| e.into_inner());
        match rows.get_mut(name) {
            Some(row) if row.owner == owner && row.expires > now => {
                row.expires = now + ttl;
                self.server.ends.lock().unwrap_or_else(|e| e.into_inner()).insert(name.clone(), now + ttl);
                Ok(RenewOutcome::Renewed)
            }
            _ => Ok(RenewOutcome::NotOwner),
        }
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.reachable()?;
        let mut rows = self.server.rows.lock().unwrap_or_else(|e| e.into_inner());
        match rows.get(name) {
            Some(row) if row.owner == owner && row.expires > Instant::now() => {
                rows.remove(name);
                self.server.ends.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
                Ok(ReleaseOutcome::Released)
            }
            _ => Ok(ReleaseOutcome::NotOwner),
        }
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        self.reachable()?;
        let now = Instant::now();
        let rows = self.server.rows.lock().unwrap_or_else(|e| e.into_inner());
        Ok(rows.get(name).filter(|row| row.expires > now).map(|row| row.info(name, now)))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        self.reachable()?;
        let now = Instant::now();
        let rows = self.server.rows.lock().unwrap_or_else(|e| e.into_inner());
        let mut held: Vec<HolderInfo> = rows
            .iter()
            .filter(|(name, row)| row.expires > now && name.as_str().starts_with(prefix))
            .map(|(name, row)| row.info(name, now))
            .collect();
        held.sort_by(|a, b| a.name.cmp(&b.name));
        held.truncate(limit);
        Ok(held)
    }
}

/// What the suite needs: fresh clients, and fault hooks where the fixture can offer them.
struct ToyFixture {
    server: Arc<ToyServer>,
}

impl ToyFixture {
    fn new() -> Self {
        ToyFixture { server: Arc::default() }
    }

    fn store(&self) -> (ToyStore, Arc<AtomicBool>) {
        let partitioned = Arc::new(AtomicBool::new(false));
        let store =
            ToyStore { server: self.server.clone(), partitioned: partitioned.clone(), options: ToyOptions::default() };
        (store, partitioned)
    }
}

#[async_trait]
impl Fixture for ToyFixture {
    fn backend(&self) -> &str {
        "toy"
    }

    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        Ok(Arc::new(StoreLock::new(self.store().0)))
    }

    // Network fault hook. A networked backend would start a `lock_conformance::proxy::FaultProxy`
    // in front of its server here and connect this client through `proxy.local_addr()`.
    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let (store, partitioned) = self.store();
        Ok(Some(LinkedClient { client: Arc::new(StoreLock::new(store)), link: Arc::new(ToyLink(partitioned)) }))
    }

    // Server fault hook. A real backend would return its server's control here (the
    // dlock workspace uses `dlock_testkit::servers::local::LocalServer`).
    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        let server = self.server.clone();
        // Leases are lost with the process; the fence counters are "on disk".
        let forget = move || server.rows.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Some(Arc::new(DownSwitch::new(self.server.down.clone(), forget)))
    }

    fn base_ttl(&self) -> Duration {
        // Room for the renewals of a loaded machine (the suite runs beside other tests).
        Duration::from_millis(1500)
    }

    // Deletes a lock's lease behind its holder's back (the fence counter stays).
    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        self.server.rows.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
        self.server.ends.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
        Ok(true)
    }
}

struct ToyLink(Arc<AtomicBool>);

#[async_trait]
impl ClientLink for ToyLink {
    async fn set_partitioned(&self, on: bool) {
        self.0.store(on, Ordering::SeqCst);
    }
    async fn set_latency(&self, _latency: Duration) {}
    async fn reset_connections(&self) {}
}

/// The toy servers of this process, by the name in `toy://<name>` (a real backend's servers
/// are elsewhere; its URL names their addresses).
static SERVERS: Mutex<BTreeMap<String, Arc<ToyServer>>> = Mutex::new(BTreeMap::new());

/// One connection set to a toy server: every lock of it shares the server.
struct ToyProvider {
    server: Arc<ToyServer>,
    options: ToyOptions,
}

#[async_trait]
impl LockProvider for ToyProvider {
    fn backend(&self) -> &str {
        "toy"
    }

    fn lock(&self) -> Arc<dyn DistributedLock> {
        let partitioned = Arc::new(AtomicBool::new(false));
        Arc::new(StoreLock::new(ToyStore { server: self.server.clone(), partitioned, options: self.options }))
    }

    // No read-write lock or semaphore: the defaults answer `Unsupported`, and the suite's cases
    // of those kinds say "not applicable".

    // What `dlock conformance` calls afterwards to delete the names its run used.
    async fn purge(&self, prefix: &LockName) -> Result<u64, LockError> {
        let under = |name: &LockName| name.as_str().starts_with(prefix.as_str());
        let mut removed = 0;
        let mut rows = self.server.rows.lock().unwrap_or_else(|e| e.into_inner());
        removed += rows.keys().filter(|name| under(name)).count() as u64;
        rows.retain(|name, _| !under(name));
        self.server.ends.lock().unwrap_or_else(|e| e.into_inner()).retain(|name, _| !under(name));
        let mut fences = self.server.fences.lock().unwrap_or_else(|e| e.into_inner());
        removed += fences.keys().filter(|name| under(name)).count() as u64;
        fences.retain(|name, _| !under(name));
        Ok(removed)
    }
}

/// The connect function of the `toy` row: the URL picks the server, the `[toy]` section tunes
/// it. A networked backend would connect here, within `config.request_timeout`.
fn connect(config: &Config) -> Connecting<'_> {
    Box::pin(async move {
        let options: ToyOptions = config.section("toy")?;
        let name = config.url.split_once("://").map_or("", |(_, name)| name).to_owned();
        let server = SERVERS.lock().unwrap_or_else(|e| e.into_inner()).entry(name).or_default().clone();
        Ok(Arc::new(ToyProvider { server, options }) as Arc<dyn LockProvider>)
    })
}

/// Adds `toy://` to dlock's backend table (once per process; again is a no-op).
pub(crate) fn register() -> Result<(), LockError> {
    dlock::register_backend(Driver::new("toy", &["toy"], connect).form("toy://[server name]").exclusive_only())
}

/// Runs the whole suite on the toy backend (also what `tests/custom_backend.rs` checks).
pub(crate) async fn certify() -> Report {
    let options = RunOptions {
        parallelism: 4,
        on_case: Some(Arc::new(|case| eprintln!("{:<16} {}", format!("{:?}", case.outcome), case.name))),
        ..RunOptions::default()
    };
    run_suite(Arc::new(ToyFixture::new()), &options).await
}

fn main() -> ExitCode {
    if let Err(e) = register() {
        eprintln!("custom_backend: {e}");
        return ExitCode::FAILURE;
    }
    // With arguments this binary is the `dlock` tool, which now knows `toy://` too.
    if std::env::args_os().len() > 1 {
        return dlock_cli::main();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    match runtime {
        Ok(runtime) => print_report(&runtime.block_on(certify())),
        Err(e) => {
            eprintln!("custom_backend: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The report as a table; success when every case passed or did not apply.
fn print_report(report: &Report) -> ExitCode {
    println!("\n{:<44} {:<15} {:>7}  detail", "case", "outcome", "ms");
    for case in &report.cases {
        let outcome = match case.outcome {
            Outcome::Passed => "passed",
            Outcome::Failed => "FAILED",
            Outcome::Skipped => "SKIPPED",
            Outcome::NotApplicable => "not applicable",
        };
        let detail: String = case.detail.chars().take(90).collect();
        println!("{:<44} {:<15} {:>7}  {}", case.name, outcome, case.ms, detail);
    }
    println!(
        "\n{}: {} passed, {} failed, {} skipped, {} not applicable",
        report.backend, report.passed, report.failed, report.skipped, report.not_applicable
    );
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
