//! The CLI's operator conveniences: `dlock conformance` cleans up after itself on a real
//! deployment, `dlock config` prints TOML or JSON with secrets redacted, `--url` names
//! `DLOCK_URL` in `--help` on every command, and progress goes to stderr as plain lines when
//! stderr is not a terminal.

use std::process::{Command, Output};

use dlock_testkit::servers::redis::RedisServer;
use dlock_testkit::servers::zookeeper::ZkServer;
use serde_json::Value;

// The workspace tests' shared helpers (test servers, URLs), not a copy of them.
#[path = "../../tests/common/mod.rs"]
mod common;
use common::{mysql_url, postgres_url, sql_tables, Sql};

/// Runs the tool in an empty directory (no `dlock.toml` to pick up) without `DLOCK_*` settings.
fn dlock(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlock"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("DLOCK_") && !k.starts_with("DLOCK_TEST_")) {
        cmd.env_remove(key);
    }
    cmd.args(args).envs(envs.iter().copied()).current_dir(dir.path()).output().expect("the dlock binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs a filtered conformance run and checks it passed and said it cleaned up something.
fn conformance(url: &str, filter: &str, envs: &[(&str, &str)]) {
    let out = dlock(&["conformance", "--json", "--url", url, "--filter", filter], envs);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{filter}: status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let report: Value = serde_json::from_str(&stdout).expect("a JSON report");
    assert!(report["passed"].as_u64().unwrap_or(0) >= 1, "{filter}: nothing passed: {report}");
    let cleaned = stderr
        .lines()
        .find_map(|l| l.strip_prefix("cleaned up "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{filter}: no clean-up line on stderr:\n{stderr}"));
    assert!(cleaned > 0, "{filter}: the run created nothing to clean up?\n{stderr}");
    // Not a terminal: one plain progress line per case.
    assert!(stderr.contains("[  1/"), "{filter}: no plain progress lines:\n{stderr}");
}

/// Runs filtered conformance runs against a SQL URL with a private table (`filters`), so the
/// table and its `_counters` / `_holders` hold only what the runs created.
async fn sql_runs(url: &str, table: &str, filters: &[&'static str]) {
    let envs = [("DLOCK_SQL__TABLE", table)];
    for &filter in filters {
        let (url, envs) = (url.to_owned(), envs.map(|(k, v)| (k.to_owned(), v.to_owned())));
        tokio::task::spawn_blocking(move || {
            let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            conformance(&url, filter, &envs)
        })
        .await
        .expect("joined");
    }
}

/// Runs `filters` against a SQL URL with a private table, then checks that the table and its
/// `_counters` / `_holders` are empty, and drops them.
async fn sql_runs_leave_no_rows(url: &str, table: &str, filters: &[&'static str]) {
    sql_runs(url, table, filters).await;
    let mut c = Sql::connect(url).await;
    for t in sql_tables(table) {
        let n = c.rows(&t).await;
        assert_eq!(n, 0, "{t} still has {n} rows after dlock conformance");
    }
    c.drop_tables(table).await;
}

#[tokio::test]
async fn conformance_leaves_no_rows_in_postgres() {
    let table = format!("ops_cleanup_{}", std::process::id());
    sql_runs_leave_no_rows(&postgres_url(), &table, &["hostile_names", "semaphore", "rw_lock"]).await;
}

#[tokio::test]
async fn conformance_leaves_no_rows_in_mysql() {
    let table = format!("ops_cleanup_my_{}", std::process::id());
    sql_runs_leave_no_rows(&mysql_url(), &table, &["hostile_names", "semaphore"]).await;
}

#[tokio::test]
async fn conformance_leaves_no_nodes_in_zookeeper() {
    let server = ZkServer::start().await.expect("a ZooKeeper server for the test");
    let url = server.url_with_root("/dlock-cleanup");
    for filter in ["hostile_names", "semaphore"] {
        let url = url.clone();
        // A short session keeps the vanished-holder parts short.
        tokio::task::spawn_blocking(move || conformance(&url, filter, &[("DLOCK_ZK__SESSION_TIMEOUT", "2s")]))
            .await
            .expect("joined");
    }
    let hosts = url.trim_start_matches("zk://").split('/').next().expect("hosts").to_owned();
    let client = zookeeper_client::Client::connect(&hosts).await.expect("zookeeper");
    let left = client.list_children("/dlock-cleanup").await.expect("the root exists");
    assert!(left.iter().all(|n| !n.contains("dlock-conformance")), "znodes left behind: {left:?}");
}

#[tokio::test]
async fn conformance_leaves_no_keys_in_redis() {
    // A private server: the shared one's keyspace holds other helpers' keys.
    let server = RedisServer::start_local().await.expect("a local redis-server");
    let url = server.url().to_owned();
    for filter in ["hostile_names", "semaphore", "rw_lock"] {
        let url = url.clone();
        tokio::task::spawn_blocking(move || conformance(&url, filter, &[])).await.expect("joined");
    }
    let client = redis::Client::open(url.as_str()).expect("url");
    let mut c = client.get_multiplexed_async_connection().await.expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut c).await.expect("KEYS");
    let left: Vec<&String> = keys.iter().filter(|k| k.contains("dlock-conformance")).collect();
    assert!(left.is_empty(), "keys left behind: {left:?}");
}

#[test]
fn config_prints_toml_and_json_with_the_password_hidden() {
    let url = "redis://app:s3cr3t-pw@127.0.0.1:6379/2";
    let out = dlock(&["config", "--url", url], &[("DLOCK_TTL", "12s")]);
    let toml = text(&out.stdout);
    assert!(out.status.success(), "{toml}{}", text(&out.stderr));
    assert!(!toml.contains("s3cr3t"), "{toml}");
    assert!(toml.contains("url = \"redis://app:***@127.0.0.1:6379/2\""), "{toml}");
    assert!(toml.contains("ttl = \"12s\""), "{toml}");
    assert!(toml.contains("[redis]") && toml.contains("key_prefix = \"dlock\""), "{toml}");
    // The TOML is a valid config file: load it back.
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("config-{}.toml", std::process::id()));
    std::fs::write(&file, toml.replace("***", "pw")).expect("write");
    let again = dlock(&["config", "--json", "--config", file.to_str().expect("utf-8")], &[]);
    let json: Value = serde_json::from_slice(&again.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&again.stdout), text(&again.stderr)));
    assert_eq!(json["ttl"], "12s", "{json}");
    assert_eq!(json["url"], "redis://app:***@127.0.0.1:6379/2", "{json}");
    assert_eq!(json["sql"]["table"], "dlock_leases", "{json}");
    assert!(json.get("wait").is_none(), "an unset wait is left out: {json}");
    let _ = std::fs::remove_file(file);
}

#[test]
fn url_names_dlock_url_in_every_help_without_its_value() {
    let secret = "redis://u:help-secret@127.0.0.1:1";
    for command in ["conformance", "acquire", "config", "bench", "run", "doctor"] {
        let out = dlock(&[command, "--help"], &[("DLOCK_URL", secret)]);
        let help = text(&out.stdout);
        assert!(out.status.success(), "{command}: {help}{}", text(&out.stderr));
        assert!(help.contains("[env: DLOCK_URL"), "{command} --help does not name DLOCK_URL:\n{help}");
        assert!(!help.contains("help-secret"), "{command} --help shows the URL's value:\n{help}");
    }
}

#[test]
fn dlock_url_is_used_when_no_url_is_given() {
    let out = dlock(&["config", "--json"], &[("DLOCK_URL", "memory://from-env")]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["url"], "memory://from-env");
}

/// `dlock init` marks a new deployment fresh: a key prefix never used waits the restart quiet
/// period for its first lock (60 s by default) unless the operator says it is new. After `init`
/// the first `try_acquire` is granted; a second `init` leaves the marker alone, `--force`
/// overwrites it; another prefix of the same server still waits (the check that the wait is
/// real, so the first assertion means something).
#[tokio::test]
async fn init_marks_a_new_redis_prefix_fresh() {
    use std::time::Duration;

    use dlock::{AcquireOptions, DistributedLock, LockName};

    let server = RedisServer::start().await.expect("a Redis server for the test");
    let url = server.url().to_owned();
    let prefix = format!("init{:x}", std::process::id());
    let prefix_env = [("DLOCK_REDIS__KEY_PREFIX", prefix.as_str())];
    let out = dlock(&["init", "--url", &url], &prefix_env);
    assert!(out.status.success(), "init: {}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("marked fresh"), "{}", text(&out.stdout));
    let again = dlock(&["init", "--url", &url], &prefix_env);
    assert!(again.status.success() && text(&again.stdout).contains("already marked"), "{}", text(&again.stdout));
    let forced = dlock(&["init", "--url", &url, "--force"], &prefix_env);
    assert!(forced.status.success() && text(&forced.stdout).contains("--force"), "{}", text(&forced.stdout));

    let client = |prefix: String| {
        let url = url.clone();
        async move {
            let options = dlock::redis::RedisOptions { key_prefix: prefix, ..Default::default() };
            dlock::redis::connect(&url, options).await.expect("connects")
        }
    };
    let opts = AcquireOptions::new(Duration::from_secs(5));
    let name = LockName::new("first").expect("valid");
    let marked = client(prefix.clone()).await;
    let lease = marked.try_acquire(&name, &opts).await.expect("answers");
    assert!(lease.is_some(), "a prefix marked by dlock init waited for its first lock");
    let unmarked = client(format!("{prefix}-other")).await;
    assert!(
        unmarked.try_acquire(&name, &opts).await.expect("answers").is_none(),
        "an unmarked new prefix was not quiet"
    );
}

/// A wait is never silent: `dlock acquire` on a new key prefix (a 4 s quiet period here) says on
/// stderr, after two seconds, that nobody holds the lock and the server grants nothing for some
/// seconds more, naming `dlock init`; behind a live holder it names the holder instead.
#[tokio::test]
async fn acquire_says_why_it_waits() {
    use std::time::{Duration, Instant};

    use dlock::{AcquireOptions, DistributedLock, Holder, LockName};

    let server = RedisServer::start().await.expect("a Redis server for the test");
    let url = server.url().to_owned();
    let prefix = format!("waitsay{:x}", std::process::id());
    let envs = [("DLOCK_REDIS__KEY_PREFIX", prefix.as_str()), ("DLOCK_REDIS__RESTART_QUIET_PERIOD", "4s")];
    let started = Instant::now();
    let out = {
        let (url, envs) = (url.clone(), envs.map(|(k, v)| (k, v.to_owned())));
        tokio::task::spawn_blocking(move || {
            let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            dlock(&["acquire", "--url", &url, "--hold", "0s", "quiet"], &envs)
        })
        .await
        .expect("joined")
    };
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(started.elapsed() >= Duration::from_secs(3), "the quiet period was real: {:?}", started.elapsed());
    assert!(
        stderr.contains("waiting for \"quiet\"")
            && stderr.contains("restart quiet period")
            && stderr.contains("dlock init"),
        "{stderr}"
    );

    // Behind a holder: the line names it.
    let options = dlock::redis::RedisOptions { key_prefix: prefix.clone(), ..Default::default() };
    let lock = dlock::redis::connect(&url, options).await.expect("connects");
    let name = LockName::new("held").expect("valid");
    let holder = AcquireOptions::new(Duration::from_secs(4)).holder(Holder::new("the-other-job").expect("id"));
    let lease = lock.acquire(&name, &holder.wait(Duration::from_secs(10))).await.expect("granted");
    let out = {
        let (url, envs) = (url.clone(), envs.map(|(k, v)| (k, v.to_owned())));
        tokio::task::spawn_blocking(move || {
            let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            dlock(&["acquire", "--url", &url, "--hold", "0s", "held"], &envs)
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    lease.release().await.expect("released");
    let out = out.await.expect("joined");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("held by the-other-job"), "{stderr}");
}
