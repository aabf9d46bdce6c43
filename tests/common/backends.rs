//! The bundled backends the whole-report tests run against, one test each: the tool's
//! (`dlock-cli/tests/cli_bench.rs`, `cli_conformance.rs`) and `tests/blocking.rs`.

use std::any::Any;

use dlock_testkit::servers::redis::RedisServer;
use dlock_testkit::servers::zookeeper::ZkServer;
use serde_json::Value;

/// A backend's URL, and what keeps its servers (or its file) alive meanwhile.
pub struct Served {
    pub url: String,
    _keep: Vec<Box<dyn Any + Send>>,
}

/// Starts what `backend` needs: a SQLite file `TAG.db` in a temp dir, the shared PostgreSQL and
/// MySQL servers, a Redis server, `masters` local Redis servers for Redlock, a ZooKeeper server
/// (root `/dlock-TAG`), with the `etcd` feature an etcd server (prefix `/dlock-TAG`).
pub async fn serve(backend: &str, tag: &str, masters: usize) -> Served {
    let mut keep: Vec<Box<dyn Any + Send>> = Vec::new();
    let url = match backend {
        "sqlite" => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}", dir.path().join(format!("{tag}.db")).display());
            keep.push(Box::new(dir));
            url
        }
        "postgres" => super::postgres_url(),
        "mysql" => super::mysql_url(),
        "redis" => {
            let server = RedisServer::start().await.expect("a Redis server for the test");
            eprintln!("redis from {}", server.provenance());
            let url = server.url().to_owned();
            keep.push(Box::new(server));
            url
        }
        "redlock" => {
            let mut hosts = Vec::new();
            for _ in 0..masters {
                let server = RedisServer::start_local().await.expect("a local redis-server");
                hosts.push(server.addr().expect("local servers have an address").to_string());
                keep.push(Box::new(server));
            }
            format!("redlock://{}", hosts.join(","))
        }
        "zookeeper" => {
            let server = ZkServer::start().await.expect("a ZooKeeper server for the test");
            eprintln!("zookeeper from {}", server.provenance());
            let url = server.url_with_root(&format!("/dlock-{tag}"));
            keep.push(Box::new(server));
            url
        }
        #[cfg(feature = "etcd")]
        "etcd" => {
            let server = dlock_testkit::servers::etcd::EtcdServer::start().await.expect("an etcd server for the test");
            let url = server.url_with_prefix(&format!("/dlock-{tag}"));
            keep.push(Box::new(server));
            url
        }
        other => panic!("no test backend named {other}"),
    };
    Served { url, _keep: keep }
}

/// Runs the blocking `report` against `backend` (see [`serve`]) off the runtime, and checks
/// that the report names the backend.
pub async fn check_report(backend: &str, tag: &str, masters: usize, report: fn(&str) -> Value) {
    let served = serve(backend, tag, masters).await;
    let url = served.url.clone();
    let report = tokio::task::spawn_blocking(move || report(&url)).await.expect("joined");
    assert_eq!(report["backend"], backend);
    drop(served);
}

/// `backend_report_tests!(TAG, MASTERS, REPORT; backend…)`: for each backend a test of that
/// name that runs `REPORT(url) -> Value` against it ([`check_report`]).
#[allow(unused_macros, reason = "only the CLI report tests use it")]
macro_rules! backend_report_tests {
    ($tag:literal, $masters:literal, $report:path; $($backend:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $backend() {
            common::backends::check_report(stringify!($backend), $tag, $masters, $report).await;
        }
    )*};
}
#[allow(unused_imports, reason = "only the CLI report tests use it")]
pub(crate) use backend_report_tests;
