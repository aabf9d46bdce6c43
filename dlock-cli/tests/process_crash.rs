//! A holder process killed with SIGKILL (no release, no goodbye): its lock frees by itself once
//! the lease ends (the session, for ZooKeeper), and the next token is higher than the dead
//! holder's — on every bundled backend. The holder is the real `dlock acquire` command.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock::{AcquireOptions, Config, LockName};
use dlock_testkit::servers::redis::RedisServer;
use dlock_testkit::servers::zookeeper::ZkServer;

// The workspace tests' shared helpers (test servers, URLs), not a copy of them.
#[path = "../../tests/common/mod.rs"]
mod common;
use common::{mysql_url, postgres_url};

const TTL: Duration = Duration::from_secs(2);

/// Starts `dlock acquire` holding `name` for a minute; returns the child and the token it printed.
fn spawn_holder(url: &str, name: &str, envs: &[(&str, &str)]) -> (Child, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["acquire", "--url", url, "--hold", "60s", name])
        .env_remove("DLOCK_URL")
        .env("DLOCK_TTL", "2s")
        .env("DLOCK_WAIT", "10s")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the dlock binary starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("holder prints its grant");
    let token = line
        .rsplit("fencing token ")
        .next()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no token in {line:?}"));
    (child, token)
}

async fn crash_frees_lock(url: &str, expiry: Duration, envs: &[(&str, &str)]) {
    let name = format!("crash/{}", std::process::id());
    let (u, n, e) =
        (url.to_owned(), name.clone(), envs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>());
    let (mut child, dead_token) = tokio::task::spawn_blocking(move || {
        let e: Vec<(&str, &str)> = e.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        spawn_holder(&u, &n, &e)
    })
    .await
    .expect("joined");

    let mut config = Config::from_url(url);
    config.ttl = TTL;
    let lock = dlock::connect_with(&config).await.expect("connect");
    let lock_name = LockName::new(&name).expect("valid name");
    let opts = AcquireOptions::new(TTL);
    assert!(lock.try_acquire(&lock_name, &opts).await.expect("try").is_none(), "the live holder must hold the lock");

    child.kill().expect("SIGKILL the holder");
    let killed = Instant::now();
    let _ = child.wait();

    let lease = lock
        .acquire(&lock_name, &opts.clone().wait(expiry * 3))
        .await
        .unwrap_or_else(|e| panic!("{url}: the lock of a killed holder never freed: {e}"));
    let freed_after = killed.elapsed();
    assert!(lease.token().get() > dead_token, "token {} after the crash must exceed {dead_token}", lease.token());
    assert!(freed_after <= expiry * 2, "{url}: freed only {freed_after:?} after the kill (bound {expiry:?})");
    eprintln!("{url}: freed {freed_after:?} after SIGKILL; token {dead_token} -> {}", lease.token());
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("crash.db").display());
    crash_frees_lock(&url, TTL, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    crash_frees_lock(&postgres_url(), TTL, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    crash_frees_lock(&mysql_url(), TTL, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    let server = RedisServer::start().await.expect("a Redis server");
    crash_frees_lock(server.url(), TTL, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock() {
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(RedisServer::start_local().await.expect("a local redis-server"));
    }
    let hosts: Vec<String> = servers.iter().map(|s| s.addr().expect("address").to_string()).collect();
    crash_frees_lock(&format!("redlock://{}", hosts.join(",")), TTL, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper() {
    let server = ZkServer::start().await.expect("a ZooKeeper server");
    // The lease of a ZooKeeper lock is the session: the crash frees it when the session expires.
    let session = Duration::from_secs(2);
    crash_frees_lock(&server.url_with_root("/dlock-crash"), session, &[("DLOCK_ZK__SESSION_TIMEOUT", "2s")]).await;
}
