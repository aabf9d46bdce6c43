//! `dlock doctor` flags what breaks dlock's promises: a Redis that evicts keys (`allkeys-lru`), a
//! PostgreSQL session with `synchronous_commit=off`; and passes the same servers configured well.

use std::process::Command;

use dlock_testkit::servers::redis::{command, RedisServer};
use serde_json::Value;

// The workspace tests' shared helpers (test servers, URLs), not a copy of them.
#[path = "../../tests/common/mod.rs"]
mod common;
use common::postgres_url;

/// Runs `dlock doctor --json`; the report and whether the exit status was 0.
fn doctor(url: &str) -> (Value, Option<i32>) {
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["doctor", "--json", "--url", url])
        .env_remove("DLOCK_URL")
        .env_remove("DLOCK_CONFIG")
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .output()
        .expect("the dlock binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("no JSON report: {e}\nstdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr))
    });
    (report, out.status.code())
}

/// The finding of `check` (its status and the whole finding, for messages).
fn finding<'a>(report: &'a Value, check: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {report:#}"))
}

#[tokio::test]
async fn flags_a_redis_that_evicts_keys() {
    // A private server: the shared one's configuration is not ours to change.
    let server = RedisServer::start_local().await.expect("a local redis-server");
    let url = server.url().to_owned();
    let u = url.clone();
    let (good, code) = tokio::task::spawn_blocking(move || doctor(&u)).await.expect("joined");
    assert_eq!(finding(&good, "maxmemory-policy")["status"], "ok", "{good:#}");
    assert_eq!(finding(&good, "scripts")["status"], "ok", "{good:#}");
    assert_eq!(finding(&good, "client")["status"], "ok", "{good:#}");
    assert_eq!(good["ok"], true, "{good:#}");
    assert_eq!(code, Some(0), "{good:#}");

    let addr = server.addr().expect("a local server's address");
    let reply = command(addr, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]).await.expect("CONFIG SET");
    assert!(reply.starts_with("+OK"), "CONFIG SET answered {reply}");
    let (bad, code) = tokio::task::spawn_blocking(move || doctor(&url)).await.expect("joined");
    let f = finding(&bad, "maxmemory-policy");
    assert_eq!(f["status"], "fail", "{bad:#}");
    assert!(f["detail"].as_str().unwrap_or("").contains("allkeys-lru"), "{f}");
    assert!(f["fix"].as_str().unwrap_or("").contains("noeviction"), "{f}");
    assert_eq!(bad["ok"], false, "{bad:#}");
    assert_eq!(code, Some(1), "a failed check exits 1: {bad:#}");
}

#[tokio::test]
async fn flags_a_postgres_session_with_synchronous_commit_off() {
    let url = postgres_url();
    let u = url.clone();
    let (good, _) = tokio::task::spawn_blocking(move || doctor(&u)).await.expect("joined");
    assert_eq!(finding(&good, "synchronous_commit")["status"], "ok", "{good:#}");
    assert_eq!(finding(&good, "table privileges")["status"], "ok", "{good:#}");
    assert!(finding(&good, "connection budget")["detail"].as_str().unwrap_or("").contains("max_connections"));

    // What the session sees is what counts: here the URL turns it off for this session only.
    let sep = if url.contains('?') { '&' } else { '?' };
    let off = format!("{url}{sep}options=-c%20synchronous_commit%3Doff");
    let (bad, code) = tokio::task::spawn_blocking(move || doctor(&off)).await.expect("joined");
    let f = finding(&bad, "synchronous_commit");
    assert_eq!(f["status"], "fail", "{bad:#}");
    assert!(f["fix"].as_str().unwrap_or("").contains("synchronous_commit"), "{f}");
    assert_eq!(code, Some(1), "a failed check exits 1: {bad:#}");
}

#[test]
fn an_unreachable_server_is_exit_69() {
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["doctor", "--url", "redis://127.0.0.1:1"])
        .env_remove("DLOCK_URL")
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(69), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn checks_a_mysql_deployment() {
    let url = std::env::var("DLOCK_TEST_MYSQL_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "mysql://root@127.0.0.1:3306/test".to_owned());
    let (report, _) = doctor(&url);
    let durability = finding(&report, "innodb_flush_log_at_trx_commit");
    assert!(durability["status"] == "ok" || durability["status"] == "fail", "{durability}");
    assert_eq!(finding(&report, "table privileges")["status"], "ok", "{report:#}");
    assert_eq!(finding(&report, "client")["status"], "ok", "{report:#}");
    for check in ["connection budget", "clock skew"] {
        assert!(
            !finding(&report, check)["detail"].as_str().unwrap_or("").starts_with("could not check"),
            "{check}: {report:#}"
        );
    }
}

#[tokio::test]
async fn checks_a_zookeeper_server_version_and_container_nodes() {
    let server = dlock_testkit::servers::zookeeper::ZkServer::start().await.expect("a ZooKeeper server");
    let url = server.url_with_root("/dlock-doctor");
    let (report, code) = tokio::task::spawn_blocking(move || doctor(&url)).await.expect("joined");
    let findings = report["findings"].as_array().expect("findings");
    let version = findings
        .iter()
        .find(|f| f["check"].as_str().is_some_and(|c| c.ends_with(": version")))
        .unwrap_or_else(|| panic!("no version finding: {report:#}"));
    // A standalone test server: a warning, with the version read from srvr.
    assert_eq!(version["status"], "warn", "{version}");
    assert!(version["detail"].as_str().unwrap_or("").contains("ZooKeeper 3."), "{version}");
    assert_eq!(finding(&report, "container nodes")["status"], "ok", "{report:#}");
    assert_eq!(finding(&report, "clock skew")["status"], "ok", "{report:#}");
    assert_eq!(code, Some(0), "warnings alone exit 0: {report:#}");
    // With digest credentials the probe node is the creator's alone (as the lock client's are),
    // and the probe still works.
    let url = server.url_with_root("/dlock-doctor-auth").replacen("zk://", "zk://doctor:pw@", 1);
    let (report, _) = tokio::task::spawn_blocking(move || doctor(&url)).await.expect("joined");
    assert_eq!(finding(&report, "container nodes")["status"], "ok", "{report:#}");
}

/// With `[zk] tls_ca_file` the deployment speaks TLS: doctor's ZooKeeper checks, which speak
/// plaintext, send nothing (not even the srvr word, nor the credentials) and say why.
#[test]
fn zookeeper_with_tls_gets_no_plaintext() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
    let port = listener.local_addr().expect("its address").port();
    listener.set_nonblocking(true).expect("nonblocking");
    let accepted = Arc::new(AtomicUsize::new(0));
    let (seen, stop) = (Arc::clone(&accepted), Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let stopped = Arc::clone(&stop);
    let watcher = std::thread::spawn(move || {
        while !stopped.load(Ordering::SeqCst) {
            if let Ok((mut stream, _)) = listener.accept() {
                // A TLS ClientHello (a lock client with TLS) is not plaintext; anything else is.
                use std::io::Read;
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                let mut first = [0u8; 1];
                if matches!(stream.read(&mut first), Ok(1) if first[0] != 0x16) {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    let ca = tempfile::NamedTempFile::new().expect("a CA file");
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["doctor", "--json", "--url", &format!("zk://u:Hunter2word@127.0.0.1:{port}/dlock-doctor-tls")])
        .env_remove("DLOCK_URL")
        .env_remove("DLOCK_CONFIG")
        .env("DLOCK_ZK__TLS_CA_FILE", ca.path())
        .env("DLOCK_REQUEST_TIMEOUT", "1s")
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .output()
        .expect("the dlock binary runs");
    stop.store(true, Ordering::SeqCst);
    watcher.join().expect("the watcher ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "doctor spoke plaintext to a TLS deployment\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("no JSON report: {e}\n{stdout}\n{stderr}"));
    let tls = finding(&report, "tls");
    assert_eq!(tls["status"], "fail", "{report:#}");
    assert!(tls["detail"].as_str().unwrap_or("").contains("plaintext"), "{tls}");
    assert_eq!(report["ok"], false, "{report:#}");
}

/// The `clock offset: <role> <addr>` findings of a report, by address.
fn clock_offsets(report: &Value) -> Vec<(String, Value)> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| {
            let check = f["check"].as_str()?.strip_prefix("clock offset: ")?;
            Some((check.rsplit(' ').next()?.to_owned(), f.clone()))
        })
        .collect()
}

/// A clock finding that was measured, not "could not check". Every node runs on this machine, so
/// the offsets are about 0; whether a reading is over the allowance is the unit tests' business
/// (a round trip stretched by a loaded machine may make one look off), so both ok and warn pass.
fn assert_measured(f: &Value) {
    let detail = f["detail"].as_str().unwrap_or("");
    assert!(f["status"] == "ok" || f["status"] == "warn", "{f}");
    assert!(detail.contains(" ms ") && detail.contains("allowance 50 ms"), "{f}");
    assert!(!detail.starts_with("could not check"), "{f}");
}

/// Doctor's report on `url` and its clock offset lines: exactly one, measured, for each of
/// `nodes` (a `what` each).
async fn offset_of_every_node(url: String, nodes: Vec<String>, what: &str) -> (Value, Vec<(String, Value)>) {
    let (report, _) = tokio::task::spawn_blocking(move || doctor(&url)).await.expect("joined");
    let offsets = clock_offsets(&report);
    assert_eq!(offsets.len(), nodes.len(), "one line per {what}: {report:#}");
    for addr in &nodes {
        let (_, f) = offsets.iter().find(|(a, _)| a == addr).unwrap_or_else(|| panic!("no {addr}: {report:#}"));
        assert_measured(f);
    }
    (report, offsets)
}

/// After a failover the promoted replica judges the leases by its own clock, so doctor measures
/// every node of a Sentinel deployment: one offset line per data node (all local here, so within
/// the allowance) and their spread; the other checks run on the primary.
#[tokio::test]
async fn reports_the_clock_offset_of_every_sentinel_node() {
    use dlock_testkit::servers::redis_sentinel::RedisSentinelDeployment;
    let d = RedisSentinelDeployment::start().await.expect("a local Sentinel deployment");
    let nodes = (0..3).map(|i| d.data_addr(i).to_string()).collect();
    let (report, offsets) = offset_of_every_node(d.url(), nodes, "data node").await;
    let primary = d.primary().await.expect("the primary").to_string();
    assert!(offsets.iter().any(|(a, f)| *a == primary && f["check"].as_str().unwrap_or("").contains("primary")));
    assert_measured(finding(&report, "clock spread"));
    assert_eq!(finding(&report, "scripts")["status"], "ok", "{report:#}");
}

/// Every master and replica of a Cluster gets its offset line.
#[tokio::test]
async fn reports_the_clock_offset_of_every_cluster_node() {
    use dlock_testkit::servers::redis_cluster::RedisCluster;
    let cluster = RedisCluster::start().await.expect("a local Redis Cluster");
    let nodes = (0..cluster.len()).map(|i| cluster.addr(i).to_string()).collect();
    let (report, offsets) = offset_of_every_node(cluster.url(), nodes, "node").await;
    let masters = offsets.iter().filter(|(_, f)| f["check"].as_str().unwrap_or("").contains(" master ")).count();
    assert_eq!(masters, 3, "{report:#}");
    assert_measured(finding(&report, "clock spread"));
}
