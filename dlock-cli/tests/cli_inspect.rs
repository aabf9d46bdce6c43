//! `dlock status`, `list`, `watch` and `release --force` against every backend: a lock held by
//! this process through the library (with a holder id) shows its holder and token; a forced
//! release makes the holder's lease lost and every later token higher than both printed ones;
//! `watch --count 2` sees an acquire and a release; the exit codes are the documented ones.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dlock::{AcquireOptions, Config, Holder, LockName};
use dlock_testkit::servers::redis::RedisServer;
use dlock_testkit::servers::zookeeper::ZkServer;
use serde_json::Value;

// The workspace tests' shared helpers (test servers, URLs), not a copy of them.
#[path = "../../tests/common/mod.rs"]
mod common;
use common::{mysql_url, postgres_url, Sql};

fn dlock(args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dlock"));
    c.args(args).env_remove("DLOCK_URL").env_remove("DLOCK_CONFIG").env_remove("DLOCK_SQL__TABLE");
    c.envs(envs.iter().copied());
    c
}

fn output(args: &[&str], envs: &[(&str, &str)]) -> Output {
    dlock(args, envs).output().expect("the dlock binary runs")
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    assert_eq!(code(out), 0, "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("cli-inspect-{tag}-{}-{nanos}", std::process::id())
}

/// The whole story on one backend: `config` is what the library uses, `envs` what the tool gets.
async fn scenario(config: Config, envs: &[(&str, &str)], tag: &str) {
    let url = config.url.clone();
    let lock = dlock::connect_with(&config).await.expect("the library connects");
    let prefix = unique(tag);
    let name = LockName::new(format!("{prefix}/job")).expect("a valid name");
    let n = name.as_str();

    // Free: exit 0 and "free".
    let out = output(&["status", "--url", &url, n], envs);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("free"), "{}", stdout(&out));
    assert_eq!(json(&output(&["status", "--url", &url, "--json", n], envs))["held"], false);

    // Held by this process with a holder id: status and list show it.
    let who = Holder::new("test-holder-7").unwrap().with_metadata("pid 42").unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(3)).holder(who);
    let lease = lock.acquire(&name, &opts).await.expect("the test takes the lock");
    let held = lease.token().get();
    let status = json(&output(&["status", "--url", &url, "--json", n], envs));
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["holder"], "test-holder-7", "{status}");
    assert_eq!(status["metadata"], "pid 42", "{status}");
    assert_eq!(status["token"].as_u64(), Some(held), "{status}");
    assert_eq!(status["kind"], "exclusive", "{status}");
    let human = stdout(&output(&["status", "--url", &url, n], envs));
    assert!(human.contains("test-holder-7") && human.contains(&held.to_string()), "{human}");
    let list = json(&output(&["list", "--url", &url, "--prefix", &prefix, "--json"], envs));
    let list = list.as_array().expect("a JSON array");
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["name"], n);
    assert_eq!(list[0]["holder"], "test-holder-7");
    let table = stdout(&output(&["list", "--url", &url, "--prefix", &prefix], envs));
    assert!(table.contains("HOLDER") && table.contains("test-holder-7") && table.contains(n), "{table}");

    // Forced release: both tokens printed, the old one the test's, the takeover's higher.
    // Without --yes and without a terminal a live holder is not evicted.
    let refused = output(&["release", "--force", "--url", &url, "--json", n], envs);
    assert_eq!(code(&refused), 2, "{}", String::from_utf8_lossy(&refused.stderr));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--yes") && said.contains("test-holder-7"), "{said}");
    let forced = json(&output(&["release", "--force", "--yes", "--url", &url, "--json", n], envs));
    assert_eq!(forced["old_token"].as_u64(), Some(held), "{forced}");
    let takeover = forced["takeover_token"].as_u64().expect("the takeover got a token");
    assert!(takeover > held, "{forced}");
    // The test's lease is lost: its renewal fails (or its node watch fires on ZooKeeper).
    let lost = lease.lost();
    tokio::time::timeout(Duration::from_secs(15), lost.fired())
        .await
        .expect("the forcibly released lease reports itself lost");
    assert!(lost.reason().is_some(), "a lost lease says why");
    let next = lock.acquire(&name, &AcquireOptions::new(Duration::from_secs(5))).await.expect("free again");
    assert!(next.token().get() > takeover && next.token().get() > held);
    // A forced release of a held lock the tool did not take prints it as the old token.
    let again = json(&output(&["release", "--force", "-y", "--url", &url, "--json", n], envs));
    assert_eq!(again["old_token"].as_u64(), Some(next.token().get()), "{again}");
    drop(next);
    let free = json(&output(&["release", "--force", "--url", &url, "--json", n], envs));
    assert_eq!(free["old_token"], Value::Null, "nobody held it: {free}");

    // watch --count 2 sees an acquire and a release.
    let watched = LockName::new(format!("{prefix}/watched")).unwrap();
    let mut child =
        dlock(&["watch", "--url", &url, "--interval", "50ms", "--count", "2", "--json", watched.as_str()], envs)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dlock watch");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let first = tokio::task::block_in_place(|| lines.next()).expect("a first line").expect("read");
    assert_eq!(serde_json::from_str::<Value>(&first).unwrap()["held"], false, "{first}");
    let lease = lock.acquire(&watched, &opts).await.expect("acquire the watched lock");
    let token = lease.token().get();
    tokio::time::sleep(Duration::from_millis(600)).await;
    lease.release().await.expect("release the watched lock");
    let started = Instant::now();
    let status = tokio::task::block_in_place(|| loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "dlock watch --count 2 did not stop");
        std::thread::sleep(Duration::from_millis(50));
    });
    assert!(status.success(), "dlock watch exit status {status}");
    let rest: Vec<Value> = lines.map(|l| serde_json::from_str(&l.expect("read")).expect("JSON line")).collect();
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert_eq!(rest[0]["held"], true);
    assert_eq!(rest[0]["token"].as_u64(), Some(token));
    assert_eq!(rest[0]["holder"], "test-holder-7");
    assert_eq!(rest[1]["held"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("inspect.db").display());
    scenario(Config::from_url(&url), &[], "sqlite").await;
}

/// The scenario on a SQL server, in a private table dropped afterwards.
async fn sql_scenario(url: &str, tag: &str) {
    let table = format!("dlock_cli_inspect_{}", std::process::id());
    let mut config = Config::from_url(url);
    config.sql.table = table.clone();
    scenario(config, &[("DLOCK_SQL__TABLE", &table)], tag).await;
    Sql::connect(url).await.drop_tables(&table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    sql_scenario(&postgres_url(), "pg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    sql_scenario(&mysql_url(), "mysql").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    let server = RedisServer::start().await.expect("a Redis server for the test");
    scenario(Config::from_url(server.url()), &[], "redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper() {
    let server = ZkServer::start().await.expect("a ZooKeeper server for the test");
    scenario(Config::from_url(&server.url_with_root("/dlock-cli-inspect")), &[], "zk").await;
}

#[test]
fn memory_is_free_in_a_new_process_and_release_needs_force() {
    // memory:// lives in one process: the tool's own process sees it free.
    let out = output(&["status", "--url", "memory://cli", "--json", "x"], &[]);
    assert_eq!(json(&out)["held"], false);
    let out = output(&["release", "--force", "--url", "memory://cli", "--json", "x"], &[]);
    let v = json(&out);
    assert_eq!(v["old_token"], Value::Null);
    assert!(v["takeover_token"].as_u64().is_some(), "{v}");
    // Exit codes: usage (no --force, a bad name), configuration (unknown scheme).
    let out = output(&["release", "--url", "memory://cli", "x"], &[]);
    assert_eq!(code(&out), 2, "release without --force is a usage error");
    let out = output(&["status", "--url", "memory://cli", ""], &[]);
    assert_eq!(code(&out), 2, "an invalid name: {}", String::from_utf8_lossy(&out.stderr));
    let out = output(&["list", "--url", "nope://x"], &[]);
    assert_eq!(code(&out), 78, "an unknown scheme is a configuration error");
    let out = output(&["watch", "--url", "memory://cli", "--interval", "0s", "x"], &[]);
    assert_eq!(code(&out), 2, "a zero interval is a usage error");
}

#[test]
fn an_unreachable_backend_exits_69() {
    let out = output(&["status", "--url", "redis://127.0.0.1:1", "x"], &[("DLOCK_REQUEST_TIMEOUT", "1s")]);
    assert_eq!(code(&out), 69, "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn run_holder_is_what_status_shows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("holder.db").display());
    let seen = dir.path().join("status.json");
    // The command asks the tool who holds its own lock.
    let script = format!(
        "'{}' status --url '{url}' --json jobs/held > '{}' && echo $DLOCK_FENCING_TOKEN",
        env!("CARGO_BIN_EXE_dlock"),
        seen.display()
    );
    let out = output(
        &["run", "--url", &url, "--name", "jobs/held", "--holder", "cron@host-1", "--", "sh", "-c", &script],
        &[],
    );
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let token: u64 = stdout(&out).trim().parse().expect("the command printed its token");
    let status: Value = serde_json::from_str(&std::fs::read_to_string(&seen).expect("status written")).expect("JSON");
    assert_eq!(status["holder"], "cron@host-1", "{status}");
    assert_eq!(status["token"].as_u64(), Some(token), "{status}");
    let out = output(&["run", "--url", &url, "--name", "jobs/held", "--holder", "bad\nid", "--", "true"], &[]);
    assert_eq!(code(&out), 2, "an invalid holder id is a usage error");
}

/// Holder ids and metadata come from the server, where anyone with write access to the table can
/// store anything: `status`, `list` and `watch` print them with control characters escaped, so
/// a stored `ESC [2J` (clear screen) or a C1 CSI cannot drive the operator's terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_text_is_printed_with_control_characters_escaped() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("escape.db");
    let url = format!("sqlite://{}", path.display());
    let lock = dlock::connect_with(&Config::from_url(&url)).await.expect("the library connects");
    let name = LockName::new("jobs/escape").expect("a valid name");
    let opts = AcquireOptions::new(Duration::from_secs(60)).holder(Holder::new("plain").expect("valid"));
    let lease = lock.acquire(&name, &opts).await.expect("the test takes the lock");
    // What a hostile writer of the table stores (Holder::new refuses it; the server does not).
    let evil_holder = "evil\u{1b}[2J\u{9b}31m\u{7}";
    let evil_meta = "m\u{1b}]0;owned\u{7}\r\n";
    let mut db = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.expect("open the db");
    let updated = sqlx::query("UPDATE dlock_leases SET holder = ?, metadata = ? WHERE name = ?")
        .bind(evil_holder)
        .bind(evil_meta)
        .bind(name.as_str())
        .execute(&mut db)
        .await
        .expect("update the row");
    assert_eq!(updated.rows_affected(), 1, "the lease row exists");
    let runs: [&[&str]; 6] = [
        &["status", "--url", &url, "jobs/escape"],
        &["status", "--url", &url, "--json", "jobs/escape"],
        &["list", "--url", &url],
        &["list", "--url", &url, "--json"],
        &["watch", "--url", &url, "--count", "0", "jobs/escape"],
        &["watch", "--url", &url, "--count", "0", "--json", "jobs/escape"],
    ];
    for args in runs {
        let out = output(args, &[]);
        assert_eq!(code(&out), 0, "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let text = stdout(&out);
        assert!(text.contains("evil"), "{args:?} shows the holder: {text}");
        let raw: Vec<char> = text.chars().filter(|c| c.is_control() && *c != '\n').collect();
        assert!(raw.is_empty(), "{args:?} printed raw control characters {raw:?}: {text:?}");
        if args.contains(&"--json") {
            // Still JSON, and the text reads back as stored.
            let v: Value = serde_json::from_str(&text).expect("JSON");
            let entry = if v.is_array() { v[0].clone() } else { v };
            assert_eq!(entry["holder"], evil_holder, "{text}");
        }
    }
    lease.release().await.expect("release");
}
