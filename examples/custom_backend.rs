//! A backend written outside the dlock crates, certified by the conformance suite.
//!
//! `ToyStore` is a tiny lease table in a shared map (stand-in for your server). Implementing
//! `LeaseStore` (one atomic try / renew / release each) and wrapping it in `StoreLock` gives a
//! full `DistributedLock`: waiting, timeouts, cancel-safety and the `Lease` watchdog come from
//! lock-core. `ToyFixture` hands the suite fresh clients and fault hooks (a partition switch per
//! client, and a server that can go down and lose its memory). Then one call runs every case.
//!
//! Run it: `cargo run --example custom_backend` (exit code 1 if any case fails).
//!
//! In your own crate, the same fixture gets one named test per case from a single line in
//! `tests/conformance.rs`:
//!
//! ```ignore
//! lock_conformance::conformance_tests!(toy, || async { Ok::<_, lock_core::LockError>(ToyFixture::new()) });
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_conformance::runner::{run_suite, Outcome, Report, RunOptions};
use lock_conformance::{async_trait, ClientLink, DownSwitch, Fixture, LinkedClient, ServerControl};
use lock_core::{
    backend::{LeaseStore, ReleaseOutcome, RenewOutcome, StoreLock, TryLock},
    Capabilities, DistributedLock, FencingToken, LockError, LockName, OwnerId,
};
use tokio::time::Instant;

/// The "server": one row per name (owner, expiry), lost when it restarts, and "on disk" per name
/// a fence counter that is never reset, so tokens stay monotonic, and the end of the last lease
/// granted: a restarted server that forgot a lease grants nothing on that name before the lease
/// could have ended, because its holder still believes it (the suite's restart quiet period case).
#[derive(Default)]
struct ToyServer {
    rows: Mutex<HashMap<LockName, (OwnerId, Instant)>>,
    fences: Mutex<HashMap<LockName, u64>>,
    ends: Mutex<HashMap<LockName, Instant>>,
    down: Arc<AtomicBool>,
}

/// One client's connection to the server.
struct ToyStore {
    server: Arc<ToyServer>,
    partitioned: Arc<AtomicBool>,
}

impl ToyStore {
    fn reachable(&self) -> Result<(), LockError> {
        if self.server.down.load(Ordering::SeqCst) || self.partitioned.load(Ordering::SeqCst) {
            return Err(LockError::unavailable("toy", "the toy server cannot be reached"));
        }
        Ok(())
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
        caps
    }

    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.reachable()?;
        let now = Instant::now();
        let mut rows = self.server.rows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((holder, expires)) = rows.get(name) {
            if *holder != owner && *expires > now {
                return Ok(TryLock::Held { remaining: Some(*expires - now) });
            }
        }
        let mut ends = self.server.ends.lock().unwrap_or_else(|e| e.into_inner());
        match ends.get(name) {
            Some(end) if !rows.contains_key(name) && *end > now => {
                return Ok(TryLock::Held { remaining: Some(*end - now) });
            }
            _ => {}
        }
        rows.insert(name.clone(), (owner, now + ttl));
        ends.insert(name.clone(), now + ttl);
        let mut fences = self.server.fences.lock().unwrap_or_else(|e| e.into_inner());
        let fence = fences.entry(name.clone()).or_insert(0);
        *fence += 1;
        Ok(TryLock::Acquired { token: FencingToken(*fence) })
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.reachable()?;
        let now = Instant::now();
        let mut rows = self.server.rows.lock().unwrap_or_else(|e| e.into_inner());
        match rows.get_mut(name) {
            Some((holder, expires)) if *holder == owner && *expires > now => {
                *expires = now + ttl;
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
            Some((holder, expires)) if *holder == owner && *expires > Instant::now() => {
                rows.remove(name);
                self.server.ends.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
                Ok(ReleaseOutcome::Released)
            }
            _ => Ok(ReleaseOutcome::NotOwner),
        }
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
        (ToyStore { server: self.server.clone(), partitioned: partitioned.clone() }, partitioned)
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
        Duration::from_millis(600)
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

/// Runs the whole suite on the toy backend (also what `tests/custom_backend.rs` checks).
pub(crate) async fn certify() -> Report {
    let options = RunOptions {
        parallelism: 4,
        on_case: Some(Arc::new(|case| eprintln!("{:<16} {}", format!("{:?}", case.outcome), case.name))),
        ..RunOptions::default()
    };
    run_suite(Arc::new(ToyFixture::new()), &options).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let report = certify().await;
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
    if !report.ok() {
        std::process::exit(1);
    }
}
