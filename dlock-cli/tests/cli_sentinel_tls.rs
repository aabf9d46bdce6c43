//! `dlock` behind TLS Sentinels with a private CA (`rediss+sentinel://`, `[redis] tls_ca_file`):
//! its own connections to the primary the Sentinels name (`init`, `doctor`, the conformance
//! clean-up) verify it against the same CA the lock client uses. Real servers started here: a
//! TLS data node with a password and a TLS Sentinel with its own password, certificates made
//! with `openssl`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use dlock_testkit::process::{find_binary, free_port, wait_for_port, ChildServer};

const DATA_PASSWORD: &str = "data-secret-tls-41c7";
const SENTINEL_PASSWORD: &str = "sentinel-secret-tls-8d2e";

/// A TLS-only redis-server (or Sentinel) on `port` in its own directory under `d`.
async fn start_server(d: &Path, name: &str, port: u16, extra: &str, sentinel: bool) -> ChildServer {
    let sub = d.join(name);
    std::fs::create_dir_all(&sub).expect("server dir");
    let p = |f: &str| d.join(f).to_string_lossy().into_owned();
    let conf = format!(
        "port 0\ntls-port {port}\nbind 127.0.0.1\nprotected-mode no\ntls-cert-file {}\ntls-key-file {}\n\
         tls-ca-cert-file {}\ntls-auth-clients no\nsave \"\"\nappendonly no\ndir {}\n{extra}",
        p("server.pem"),
        p("server.key"),
        p("ca.pem"),
        sub.display()
    );
    let path = sub.join(format!("{name}.conf"));
    std::fs::write(&path, conf).expect("config written");
    let mut args = vec![path.to_string_lossy().into_owned()];
    if sentinel {
        args.push("--sentinel".to_owned());
    }
    let program = find_binary("redis-server", &["/usr/local/bin", "/usr/bin"]).expect("redis-server on PATH");
    let child = ChildServer::new(program, args, &sub);
    child.start().expect("server starts");
    wait_for_port(SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(10)).await.expect("listening");
    child
}

/// Runs `dlock` in `dir` with the CA as `tls_ca_file` (from the environment, as a deployment
/// would set it) and none of the caller's `DLOCK_*` settings.
fn dlock(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlock"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("DLOCK_") && !k.starts_with("DLOCK_TEST_")) {
        cmd.env_remove(key);
    }
    cmd.env("DLOCK_REDIS__TLS_CA_FILE", dir.join("ca.pem"));
    cmd.args(args).current_dir(dir).output().expect("the dlock binary runs")
}

/// Waits until `dlock init` gets past the Sentinel: it names the primary once it has reached it
/// (the first seconds after start it may answer that it knows none).
async fn init_when_ready(dir: &Path, url: &str) -> Output {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let (d, u) = (dir.to_owned(), url.to_owned());
        let out = tokio::task::spawn_blocking(move || dlock(&d, &["init", "--url", &u])).await.expect("joined");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !stderr.contains("no primary from the Sentinels") || Instant::now() > end {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `init` and `doctor` through a TLS Sentinel whose data node only a private CA vouches for:
/// both verify the primary with `tls_ca_file` (without it, webpki roots refuse the certificate)
/// and print no password.
#[tokio::test]
async fn init_and_doctor_verify_the_primary_with_the_configured_ca() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    // `ca.pem` signs `server.pem` (127.0.0.1), for the data node and the Sentinel alike.
    dlock_testkit::certs::server_certs(d).unwrap();
    let (data_port, sentinel_port) = (free_port().expect("port"), free_port().expect("port"));
    let _data = start_server(d, "data", data_port, &format!("requirepass {DATA_PASSWORD}\n"), false).await;
    let sentinel_conf = format!(
        "tls-replication yes\nrequirepass {SENTINEL_PASSWORD}\nsentinel monitor real 127.0.0.1 {data_port} 1\n\
         sentinel auth-pass real {DATA_PASSWORD}\n"
    );
    let _sentinel = start_server(d, "sentinel", sentinel_port, &sentinel_conf, true).await;
    let url = format!(
        "rediss+sentinel://:{DATA_PASSWORD}@127.0.0.1:{sentinel_port}/real?sentinel_password={SENTINEL_PASSWORD}"
    );

    let out = init_when_ready(d, &url).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "init: {stdout}\n{stderr}");
    assert!(stdout.contains("marked fresh") && stdout.contains(&format!("127.0.0.1:{data_port}")), "{stdout}");
    assert!(!format!("{stdout}{stderr}").contains(DATA_PASSWORD), "{stdout}\n{stderr}");

    let (d2, u2) = (d.to_owned(), url.clone());
    let out =
        tokio::task::spawn_blocking(move || dlock(&d2, &["doctor", "--json", "--url", &u2])).await.expect("joined");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("no JSON report: {e}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let unreachable: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["check"].as_str().is_some_and(|c| c.ends_with("reachable")) && f["status"] != "ok")
        .collect();
    assert!(unreachable.is_empty(), "doctor could not reach the primary over TLS: {unreachable:?}");
    let persistence = report["findings"].as_array().expect("findings").iter().find(|f| f["check"] == "persistence");
    assert!(persistence.is_some(), "doctor checked the primary itself: {report:#}");
}
