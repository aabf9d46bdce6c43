//! Local etcd servers for tests (see servers/mod.rs for the provisioning order).
//!
//! [`EtcdServer::start`] uses `DLOCK_TEST_ETCD_URL` when it is set (then there is no server
//! control), and otherwise runs a single-member etcd (Debian `etcd-server`, or `etcd` on `PATH`)
//! on free ports of 127.0.0.1, with its data directory in a temp dir kept across `stop`/`start`
//! (keys, leases and revisions survive a restart as in production). The heartbeat is 25 ms and
//! the election timeout 250 ms, so the server's shortest lease is 1 s (etcd's minimum TTL is
//! 1.5 election timeouts, rounded up to a second) and a restarted member leads again quickly.
//! There is no container path (etcd's images live outside Docker Hub's official library).

use std::net::SocketAddr;
use std::time::Duration;

use lock_core::LockError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{provision, TestServer};
use crate::local::LocalServer;
use crate::process::{find_binary, free_addr, server_dir, ChildServer};

/// The environment variable naming an existing etcd cluster to test against
/// (`etcd://host:2379[,host:2379]/prefix`).
pub const ENV_URL: &str = "DLOCK_TEST_ETCD_URL";

/// How long a fresh etcd may take to serve requests.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The member's heartbeat interval, in ms.
pub const HEARTBEAT_MS: u64 = 25;

/// The member's election timeout, in ms.
pub const ELECTION_MS: u64 = 250;

server_newtype!(
    /// An etcd server for one test: a local single-member cluster the test owns, or an external
    /// URL. Derefs to its [`TestServer`] (`url()` is `etcd://127.0.0.1:<port>`).
    EtcdServer,
    etcd
);

impl EtcdServer {
    /// `DLOCK_TEST_ETCD_URL` if set, else a fresh local etcd on free ports.
    pub async fn start() -> Result<EtcdServer, LockError> {
        let server = provision(
            "etcd",
            None,
            |addr| format!("etcd://{addr}"),
            || async { Self::start_local().await.map(EtcdServer::into_test_server) },
        )
        .await?;
        Ok(EtcdServer(server))
    }

    /// Always a fresh local etcd (ignores `DLOCK_TEST_ETCD_URL`).
    pub async fn start_local() -> Result<EtcdServer, LockError> {
        let program = find_binary("etcd", &["/usr/bin", "/usr/local/bin"]).ok_or_else(|| {
            LockError::unavailable(
                "test",
                format!(
                    "etcd not found; install it (apt-get install etcd-server, or scripts/setup-test-env.sh), or set \
                     {ENV_URL}=etcd://host:2379/prefix to test against a running cluster"
                ),
            )
        })?;
        let dir = server_dir("etcd")?;
        let (client, peer) = (free_addr()?, free_addr()?);
        let args = member_args("dlock", &dir.path().join("data"), client, peer, &format!("dlock=http://{peer}"));
        let child = ChildServer::new(&program, args, dir.path());
        let local = LocalServer::new("etcd", child, client)
            .persistent(true)
            .ready_within(START_TIMEOUT)
            .ready_when(healthy)
            .start()
            .await?;
        Ok(EtcdServer(local.into_test_server(&program, format!("etcd://{client}"), vec![Box::new(dir)])))
    }

    /// `url()` with the key prefix `prefix` (replacing the path of an external URL).
    pub fn url_with_prefix(&self, prefix: &str) -> String {
        let prefix = prefix.trim_matches('/');
        match self.url().strip_prefix("etcd://") {
            Some(rest) => format!("etcd://{}/{prefix}", rest.split('/').next().unwrap_or(rest)),
            None => format!("{}/{prefix}", self.url().trim_end_matches('/')),
        }
    }
}

/// The command line of one member named `name`: data in `data`, clients on `client`, peers on
/// `peer`, in the cluster `initial` (`name=http://addr,…`).
pub fn member_args(
    name: &str,
    data: &std::path::Path,
    client: SocketAddr,
    peer: SocketAddr,
    initial: &str,
) -> Vec<String> {
    let data = data.display().to_string();
    let client = format!("http://{client}");
    let peer = format!("http://{peer}");
    [
        "--name",
        name,
        "--data-dir",
        &data,
        "--listen-client-urls",
        &client,
        "--advertise-client-urls",
        &client,
        "--listen-peer-urls",
        &peer,
        "--initial-advertise-peer-urls",
        &peer,
        "--initial-cluster",
        initial,
        "--initial-cluster-state",
        "new",
        "--heartbeat-interval",
        &HEARTBEAT_MS.to_string(),
        "--election-timeout",
        &ELECTION_MS.to_string(),
        "--logger",
        "zap",
        "--log-level",
        "warn",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Whether the member at `addr` serves requests: `/health` answers `"health":"true"` only once
/// the cluster has a leader and the member can read through it.
pub async fn healthy(addr: SocketAddr) -> bool {
    let talk = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    match tokio::time::timeout(Duration::from_secs(2), talk).await {
        Ok(Ok(out)) => out.contains("\"health\":\"true\""),
        _ => false,
    }
}
