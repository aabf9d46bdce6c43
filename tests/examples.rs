//! Every example of the issue-13 set (`leader_election`, `cron_once`, `fenced_update`,
//! `swap_backends`) on SQLite and on each server backend: each example's body is a `run`
//! function, compiled here from the example's own source, so no `cargo run` is needed.

use dlock::Config;

#[path = "../examples/cron_once.rs"]
#[allow(dead_code)]
mod cron_once;
#[path = "../examples/fenced_update.rs"]
#[allow(dead_code)]
mod fenced_update;
#[path = "../examples/leader_election.rs"]
#[allow(dead_code)]
mod leader_election;
#[path = "../examples/swap_backends.rs"]
#[allow(dead_code)]
mod swap_backends;

use dlock_testkit::servers::redis::RedisServer;
use dlock_testkit::servers::zookeeper::ZkServer;

mod common;
use common::{mysql_url, postgres_url};

/// Runs the four examples on one backend and checks what each promises.
async fn all_examples(config: Config) {
    let url = config.redacted_url();
    let out = leader_election::run(&config).await.expect("leader_election runs");
    assert_eq!(out.terms.len(), 2, "{url}");
    assert_ne!(out.terms[0].0, out.terms[1].0, "{url}: the killed leader led again");
    assert!(out.terms[1].1 > out.terms[0].1, "{url}: epochs must rise: {:?}", out.terms);

    let out = cron_once::run(&config).await.expect("cron_once runs");
    for p in 0..3 {
        assert_eq!(out.runs_in(p), 1, "{url}: period {p}: {:?}", out.runs);
    }

    let out = fenced_update::run(&config).await.expect("fenced_update runs");
    assert!(out.successor.token > out.stalled.token, "{url}: {out:?}");
    assert!(out.successor.applied, "{url}: {out:?}");
    assert!(!out.stalled.applied, "{url}: the stalled holder's late write was applied: {out:?}");
    assert_eq!(out.balance, 70, "{url}");

    let out = swap_backends::run(&[config, Config::from_url("memory://swap-test")]).await.expect("swap_backends runs");
    assert_eq!(out.len(), 2, "{url}");
    assert_eq!(out[1].0, "memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    all_examples(Config::from_url(&format!("sqlite://{}", dir.path().join("examples.db").display()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    all_examples(Config::from_url(&postgres_url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    all_examples(Config::from_url(&mysql_url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    let server = RedisServer::start().await.expect("a Redis server");
    all_examples(Config::from_url(server.url())).await;
}

/// Redlock over three masters: `leader()` answers `Unsupported` there (no `inspect`), which
/// `leader_election` reports and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock() {
    let mut masters = Vec::new();
    for _ in 0..3 {
        masters.push(RedisServer::start_local().await.expect("a Redis master"));
    }
    let hosts: Vec<&str> = masters.iter().map(|m| m.url().trim_start_matches("redis://")).collect();
    all_examples(Config::from_url(&format!("redlock://{}", hosts.join(",")))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper() {
    let server = ZkServer::start().await.expect("a ZooKeeper server");
    all_examples(Config::from_url(&server.url_with_root("/dlock-examples"))).await;
}
