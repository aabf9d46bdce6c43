//! The runner as the CLI uses it: the whole suite on one fixture, cases in parallel, a report
//! with the agreed JSON shape, progress callbacks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_conformance::memory::MemoryFixture;
use lock_conformance::runner::{run_suite, Outcome, RunOptions};
use lock_conformance::{all_cases, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_suite_in_parallel_on_memory() {
    let seen = Arc::new(AtomicUsize::new(0));
    let seen2 = seen.clone();
    let options = RunOptions {
        filter: None,
        parallelism: 4,
        on_case: Some(Arc::new(move |_case| {
            seen2.fetch_add(1, Ordering::SeqCst);
        })),
    };
    // Four cases share this test's two runtime threads while the rest of the test run loads
    // both cores: a stall of a third of the default 500 ms base ttl lost a lease in two loaded
    // full runs. What this test checks is the runner and its report, so its leases get room.
    let fixture: Arc<dyn Fixture> = Arc::new(MemoryFixture::new().with_base_ttl(Duration::from_secs(1)));
    let report = run_suite(fixture, &options).await;
    let json = serde_json::to_value(&report).unwrap();
    assert!(report.ok(), "{}", serde_json::to_string_pretty(&json).unwrap());
    assert_eq!(report.cases.len(), all_cases().len());
    assert_eq!(seen.load(Ordering::SeqCst), all_cases().len());
    // Suite order, `<backend>::<case>` names.
    let names: Vec<String> = all_cases().iter().map(|c| format!("memory::{}", c.name)).collect();
    assert_eq!(report.cases.iter().map(|c| c.name.clone()).collect::<Vec<_>>(), names);
    // The agreed shape.
    let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["backend", "cases", "failed", "not_applicable", "passed", "skipped"]);
    let case = json["cases"][0].as_object().unwrap();
    let mut ckeys: Vec<&str> = case.keys().map(String::as_str).collect();
    ckeys.sort_unstable();
    assert_eq!(ckeys, ["detail", "ms", "name", "outcome"]);
    assert_eq!(json["cases"][0]["outcome"], "passed");
    assert_eq!(serde_json::to_value(Outcome::NotApplicable).unwrap(), "not_applicable");
    assert_eq!(report.passed + report.failed + report.skipped + report.not_applicable, report.cases.len());
    // Reports read back (e.g. a CI step comparing runs).
    let back: lock_conformance::runner::Report = serde_json::from_value(json).unwrap();
    assert_eq!(back.cases.len(), report.cases.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_selects_by_substring() {
    let report = run_suite(
        Arc::new(MemoryFixture::new()),
        &RunOptions { filter: Some("fencing".into()), ..RunOptions::default() },
    )
    .await;
    assert!(report.ok());
    assert_eq!(report.cases.len(), 2, "fencing_monotonic and fencing_after_expiry");
    assert!(report.cases.iter().all(|c| c.name.contains("fencing")));
}

/// A memory fixture under another backend name with no fault hooks but, optionally, deployment
/// node faults: fault cases are reported not_applicable, with a reason.
struct Plain {
    inner: MemoryFixture,
    backend: &'static str,
    deployment: Option<Arc<CountingDeployment>>,
}

impl Plain {
    fn new(backend: &'static str, deployment: Option<Arc<CountingDeployment>>) -> Plain {
        Plain { inner: MemoryFixture::new(), backend, deployment }
    }
}

#[lock_conformance::async_trait]
impl Fixture for Plain {
    fn backend(&self) -> &str {
        self.backend
    }
    async fn client(&self) -> Result<Arc<dyn lock_core::DistributedLock>, lock_core::LockError> {
        self.inner.client().await
    }
    fn base_ttl(&self) -> std::time::Duration {
        self.inner.base_ttl()
    }
    fn deployment(&self) -> Option<Arc<dyn lock_conformance::DeploymentControl>> {
        self.deployment.clone().map(|d| d as _)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_hooks_are_not_applicable_with_a_reason() {
    let report = run_suite(
        Arc::new(Plain::new("plain", None)),
        &RunOptions { filter: Some("fault_".into()), ..Default::default() },
    )
    .await;
    assert!(report.ok(), "{report:#?}");
    // fault_pause_past_ttl needs no hook for per-lock leases.
    for c in &report.cases {
        if c.name == "plain::fault_pause_past_ttl" {
            assert_eq!(c.outcome, Outcome::Passed, "{c:?}");
        } else {
            assert_eq!(c.outcome, Outcome::NotApplicable, "{c:?}");
            assert!(c.detail.contains("fixture"), "the reason names the missing hook: {c:?}");
        }
    }
}

/// Deployment node faults that only count what the nemesis asks for.
#[derive(Default)]
struct CountingDeployment {
    injected: AtomicUsize,
}

#[lock_conformance::async_trait]
impl lock_conformance::DeploymentControl for CountingDeployment {
    fn faults(&self) -> Vec<&'static str> {
        vec!["kill-member"]
    }
    async fn inject(&self, fault: &str, span: std::time::Duration) -> Result<String, lock_core::LockError> {
        assert_eq!(fault, "kill-member");
        self.injected.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(span).await;
        Ok("nothing to kill in memory".into())
    }
}

/// The nemesis adds the deployment's node faults when the fixture offers them, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nemesis_injects_deployment_node_faults() {
    let deployment = Arc::new(CountingDeployment::default());
    let report = run_suite(
        Arc::new(Plain::new("deployed", Some(deployment.clone()))),
        &RunOptions { filter: Some("::nemesis".into()), ..Default::default() },
    )
    .await;
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.cases.len(), 1, "{report:#?}");
    assert!(report.cases[0].detail.contains("deployment node faults"), "{:?}", report.cases[0]);
    assert!(report.cases[0].detail.contains("kill-member"), "{:?}", report.cases[0]);
    assert!(deployment.injected.load(Ordering::SeqCst) > 0, "the nemesis never used the deployment hook");
}
