//! `dlock conformance --json` against every bundled backend: the report must list at least 15
//! cases with none failed or skipped, and the exit status must say so.

use serde_json::Value;

// The workspace tests' shared helpers (test servers, URLs), not a copy of them.
#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

/// The report of `url`, with the default configuration (ZooKeeper's default session too: the
/// suite's bounds come from the deployment's own settings, as users configure it).
fn run_conformance(url: &str) -> Value {
    run_conformance_with(url, &[])
}

/// [`run_conformance`] on a blocking thread, so that the test's servers keep running.
async fn conformance_off_runtime(url: String) -> Value {
    tokio::task::spawn_blocking(move || run_conformance(&url)).await.expect("joined")
}

fn run_conformance_with(url: &str, envs: &[(&str, &str)]) -> Value {
    let out = support::dlock(&["conformance", "--json", "--url", url])
        .envs(envs.iter().copied())
        .output()
        .expect("the dlock binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("no JSON report for {url}: {e}\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    let count = |k: &str| report[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {report}"));
    let cases = report["cases"].as_array().expect("cases array");
    for case in cases {
        for key in ["name", "outcome", "ms", "detail"] {
            assert!(case.get(key).is_some(), "case without {key}: {case}");
        }
    }
    let failed: Vec<&Value> = cases.iter().filter(|c| c["outcome"] == "failed" || c["outcome"] == "skipped").collect();
    assert!(failed.is_empty(), "{url}: failed or skipped cases: {failed:#?}\nstderr:\n{stderr}");
    assert_eq!(count("failed"), 0);
    assert_eq!(count("skipped"), 0);
    assert!(count("passed") >= 15, "{url}: only {} cases passed", count("passed"));
    assert_eq!(
        count("passed") + count("not_applicable"),
        cases.len() as u64,
        "the counts must add up to the listed cases"
    );
    assert!(out.status.success(), "{url}: exit status {:?} with a clean report", out.status);
    eprintln!("{url}: {} passed, {} not applicable", count("passed"), count("not_applicable"));
    report
}

#[test]
fn memory() {
    let report = run_conformance("memory://cli-test");
    assert_eq!(report["backend"], "memory");
}

common::backends::backend_report_tests!("cli", 5, run_conformance; sqlite, postgres, mysql, redis, redlock, zookeeper);

#[test]
fn exit_status_is_nonzero_on_a_broken_url() {
    support::assert_refused(&["conformance", "--json", "--url", "nope://x"], "unknown backend scheme");
}

/// `dlock conformance` against a 3-member ZooKeeper ensemble through its multi-host URL (the
/// linked clients name every member through a proxy each; the CLI has no server control, so the
/// server fault cases are not applicable there — lock-zk's ensemble_conformance runs them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_ensemble() {
    use dlock_testkit::servers::zk_ensemble::{EnsembleOptions, ZkEnsemble};
    let ensemble = ZkEnsemble::start(EnsembleOptions::default()).await.expect("a local ZooKeeper ensemble");
    let url = format!("{}/dlock-cli-ensemble", ensemble.url());
    let report = conformance_off_runtime(url).await;
    assert_eq!(report["backend"], "zookeeper");
    drop(ensemble);
}

/// `dlock conformance --url redis+sentinel://…/<master>` against a local primary + 2 replicas + 3
/// Sentinels: the CLI's clients discover the primary through the Sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel() {
    use dlock_testkit::servers::redis_sentinel::RedisSentinelDeployment;
    let deployment = RedisSentinelDeployment::start().await.expect("a local Sentinel deployment");
    let report = conformance_off_runtime(deployment.url()).await;
    assert_eq!(report["backend"], "redis");
    drop(deployment);
}

/// `dlock conformance --url redis+cluster://…` against a local cluster of 3 masters + 3 replicas:
/// every script goes to its slot's master; the linked clients reach every node through a proxy.
/// The cluster is new, so `dlock init` marks it fresh first (every slot's boot marker of the
/// default prefix set to 0 on its master), as an operator does for a new cluster: without it
/// every first lock would wait the 60 s restart quiet period and the run would fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    use dlock_testkit::servers::redis_cluster::RedisCluster;
    let cluster = RedisCluster::start().await.expect("a local Redis Cluster");
    let init = |url: String| tokio::task::spawn_blocking(move || support::output(&["init", "--url", &url]));
    let out = init(cluster.url()).await.expect("joined");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("all 16384 slot markers"), "{said}");
    let again = init(cluster.url()).await.expect("joined");
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("16384 already marked, left alone"), "a second init leaves them: {said}");
    let report = conformance_off_runtime(cluster.url()).await;
    assert_eq!(report["backend"], "redis");
    drop(cluster);
}
