//! `rediss+sentinel://`: TLS to the Sentinels and to the data nodes they name, the Sentinels'
//! own ACL credentials (`?sentinel_username=…&sentinel_password=…`), and Sentinels that lie
//! about the primary. Real servers: one TLS data node with a password, one TLS Sentinel with
//! its own users, a plaintext recorder and a server whose certificate another CA signed, all
//! started here (certificates made with `openssl`).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::tls::{admin, make_certs, start_server, tls_lines};
use dlock_testkit::process::{free_port, ChildServer};
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName};
use lock_redis::RedisOptions;

const DATA_PASSWORD: &str = "data-secret-5e2c";
const SENTINEL_USER: &str = "dlock-sentinel";
const SENTINEL_USER_PASSWORD: &str = "sentinel-user-secret-91af";
const SENTINEL_DEFAULT_PASSWORD: &str = "sentinel-default-secret-77d0";
const IMPOSTOR_PASSWORD: &str = "impostor-secret-0b13";

/// The servers of one test, stopped when dropped.
struct Deployment {
    dir: tempfile::TempDir,
    sentinel: SocketAddr,
    impostor: SocketAddr,
    /// Every byte each connection sent the plaintext recorder (the "liar" master).
    recorded: Arc<Mutex<Vec<Vec<u8>>>>,
    _servers: Vec<ChildServer>,
}

impl Deployment {
    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn options(&self) -> RedisOptions {
        RedisOptions {
            tls_ca_file: Some(self.ca()),
            restart_quiet_period: Some(Duration::ZERO),
            ..common::test_options()
        }
    }

    fn url(&self, master: &str, query: &str) -> String {
        format!("rediss+sentinel://:{DATA_PASSWORD}@{}/{master}{query}", self.sentinel)
    }

    fn recorded(&self) -> String {
        let all = self.recorded.lock().unwrap().concat();
        String::from_utf8_lossy(&all).into_owned()
    }
}

/// A plaintext listener that records what every connection sends and answers nothing.
async fn start_recorder() -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&recorded);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
                    if n == 0 {
                        break;
                    }
                    log.lock().unwrap().push(buf[..n].to_vec());
                }
            });
        }
    });
    (addr, recorded)
}

/// The data node (`real`), the impostor, the recorder (`liar`) and one Sentinel that monitors
/// all three with quorum 1. The liar and the impostor are never reachable for the Sentinel, so
/// they are only marked down after ten minutes: until then the Sentinel names them as primaries.
async fn start() -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_certs(d);
    let (data_port, impostor_port, sentinel_port) = (free_port().unwrap(), free_port().unwrap(), free_port().unwrap());
    let data_conf = format!("{}requirepass {DATA_PASSWORD}\n", tls_lines(d, data_port, "server", "ca"));
    let data = start_server(d, "data", data_conf, data_port, false).await;
    let impostor_conf = format!("{}requirepass {IMPOSTOR_PASSWORD}\n", tls_lines(d, impostor_port, "impostor", "ca2"));
    let impostor = start_server(d, "impostor", impostor_conf, impostor_port, false).await;
    let (liar, recorded) = start_recorder().await;
    let sentinel_conf = format!(
        "{}tls-replication yes\nrequirepass {SENTINEL_DEFAULT_PASSWORD}\n\
         user {SENTINEL_USER} on >{SENTINEL_USER_PASSWORD} -@all +role +sentinel|masters\n\
         sentinel monitor real 127.0.0.1 {data_port} 1\nsentinel auth-pass real {DATA_PASSWORD}\n\
         sentinel monitor liar 127.0.0.1 {} 1\nsentinel down-after-milliseconds liar 600000\n\
         sentinel monitor impostor 127.0.0.1 {impostor_port} 1\nsentinel down-after-milliseconds impostor 600000\n",
        tls_lines(d, sentinel_port, "server", "ca"),
        liar.port()
    );
    let sentinel = start_server(d, "sentinel", sentinel_conf, sentinel_port, true).await;
    Deployment {
        sentinel: SocketAddr::from(([127, 0, 0, 1], sentinel_port)),
        impostor: SocketAddr::from(([127, 0, 0, 1], impostor_port)),
        dir,
        recorded,
        _servers: vec![data, impostor, sentinel],
    }
}

/// The `ACL LOG` of the server `url` names: one line per entry, `username reason`.
async fn acl_log(url: &str, ca: &Path) -> Vec<String> {
    let mut c = admin(url, ca).await;
    let entries: Vec<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("ACL").arg("LOG").query_async(&mut c).await.unwrap();
    let text = |v: Option<&redis::Value>| match v {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    };
    entries.iter().map(|e| format!("{} {}", text(e.get("username")), text(e.get("reason")))).collect()
}

async fn acl_log_reset(url: &str, ca: &Path) {
    let mut c = admin(url, ca).await;
    let _: () = redis::cmd("ACL").arg("LOG").arg("RESET").query_async(&mut c).await.unwrap();
}

/// Waits until the Sentinel names `real` as a primary it has reached (its INFO came in).
async fn wait_ready(d: &Deployment) {
    let url = format!("rediss://:{SENTINEL_DEFAULT_PASSWORD}@{}", d.sentinel);
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = admin(&url, &d.ca()).await;
        let reply: Vec<std::collections::HashMap<String, String>> =
            redis::cmd("SENTINEL").arg("MASTERS").query_async(&mut c).await.unwrap();
        let real = reply.iter().find(|m| m.get("name").map(String::as_str) == Some("real"));
        if real.is_some_and(|m| m.get("flags").map(String::as_str) == Some("master")) {
            return;
        }
        assert!(Instant::now() < end, "the Sentinel never reached the data node: {reply:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn opts() -> AcquireOptions {
    AcquireOptions::new(Duration::from_secs(2)).wait(Duration::from_secs(1)).request_timeout(Duration::from_secs(1))
}

/// TLS Sentinel with its own least-privileged ACL user (`-@all +role +sentinel|masters`), TLS data node with another password: the lock works
/// through `rediss+sentinel://` and a private CA, the Sentinel's ACL LOG shows no refused
/// login (the data password was never tried on it), a wrong or missing Sentinel password is a
/// `Config` error that says which credentials to fix and shows no password, and the clean-up's
/// primary lookup (`sentinel_primary`) names the data node without sending it the data password.
#[tokio::test]
async fn tls_sentinel_with_its_own_credentials() {
    let d = start().await;
    wait_ready(&d).await;
    let sentinel_admin = format!("rediss://:{SENTINEL_DEFAULT_PASSWORD}@{}", d.sentinel);
    acl_log_reset(&sentinel_admin, &d.ca()).await;

    let query = format!("?sentinel_username={SENTINEL_USER}&sentinel_password={SENTINEL_USER_PASSWORD}");
    let client = lock_redis::connect(&d.url("real", &query), d.options()).await.expect("connects through TLS");
    let lease = client.acquire(&LockName::new("tls-sentinel").unwrap(), &opts()).await.unwrap();
    lease.release().await.unwrap();
    // The Sentinel's default user, by password only.
    let query = format!("?sentinel_password={SENTINEL_DEFAULT_PASSWORD}");
    lock_redis::connect(&d.url("real", &query), d.options()).await.expect("the default user works too");
    let primary = lock_redis::sentinel_primary(&d.url("real", &query), &d.options()).await.unwrap();
    assert!(primary.starts_with(&format!("rediss://:{DATA_PASSWORD}@127.0.0.1:")), "{primary}");
    let log = acl_log(&sentinel_admin, &d.ca()).await;
    let refused: Vec<&String> = log.iter().filter(|l| l.ends_with(" auth")).collect();
    assert!(refused.is_empty(), "the Sentinel refused a login, so it was sent other credentials than its own: {log:?}");

    for query in [format!("?sentinel_username={SENTINEL_USER}&sentinel_password=wrong-password"), String::new()] {
        let url = d.url("real", &query);
        let e = lock_redis::connect(&url, d.options()).await.map(|_| ()).expect_err("the Sentinel refuses");
        let text = e.to_string();
        assert!(matches!(e, LockError::Config { .. }), "{query:?}: {e}");
        assert!(text.contains("Sentinels") && text.contains("sentinel_password"), "{query:?}: {text}");
        assert!(!text.contains(DATA_PASSWORD) && !text.contains("wrong-password"), "{text}");
        let e = lock_redis::sentinel_primary(&url, &d.options()).await.expect_err("the Sentinel refuses");
        assert!(matches!(e, LockError::Config { .. }) && e.to_string().contains("sentinel_password"), "{e}");
    }
    let log = acl_log(&sentinel_admin, &d.ca()).await;
    assert!(log.iter().any(|l| l == &format!("{SENTINEL_USER} auth")), "the wrong password was refused: {log:?}");
}

/// A Sentinel that names a plaintext server (the recorder) or a server whose certificate
/// another CA signed (the impostor): the client refuses it with a typed error, and neither
/// server ever received the data password (the recorder saw only TLS handshakes; the
/// impostor's ACL LOG shows no login attempt at all).
#[tokio::test]
async fn a_lying_sentinel_gets_no_credentials() {
    let d = start().await;
    wait_ready(&d).await;
    let impostor_admin = format!("rediss://:{IMPOSTOR_PASSWORD}@{}", d.impostor);
    acl_log_reset(&impostor_admin, &d.dir.path().join("ca2.pem")).await;
    let query = format!("?sentinel_password={SENTINEL_DEFAULT_PASSWORD}");
    for master in ["liar", "impostor"] {
        let t = Instant::now();
        let e = lock_redis::connect(&d.url(master, &query), d.options()).await.map(|_| ()).expect_err(master);
        assert!(matches!(e, LockError::Unavailable { .. }), "{master}: {e}");
        assert!(!e.to_string().contains(DATA_PASSWORD), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{master}: refused within the connect timeout");
        eprintln!("{master}: {e}");
    }
    // Give the recorder a moment to log what reached it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = d.recorded();
    assert!(!seen.is_empty(), "the client (and the Sentinel) did dial the recorder");
    assert!(
        !seen.contains(DATA_PASSWORD) && !seen.contains("AUTH"),
        "plaintext credentials reached the liar: {seen:?}"
    );
    let log = acl_log(&impostor_admin, &d.dir.path().join("ca2.pem")).await;
    assert!(log.is_empty(), "the impostor was sent a login: {log:?}");
}
