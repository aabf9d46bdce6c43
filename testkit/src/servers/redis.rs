//! Redis servers for tests (see servers/mod.rs for the provisioning order).
//!
//! [`RedisServer::start`] uses `DLOCK_TEST_REDIS_URL` when it is set (then there is no server
//! control), else a `redis:7` container (feature `containers` with a Docker engine), else runs
//! `redis-server` on a free port of 127.0.0.1 in a temp dir. Both owned kinds run without
//! persistence (`--save "" --appendonly no`): a restart comes back empty, the worst case for
//! fencing tokens. [`RedisServer::start_local`] always starts a local process (Redlock tests
//! need several independent masters they can stop one by one).
//!
//! A server that lost its state grants nothing for a quiet period (lock-redis, "Restarts"), and
//! a server it never saw counts as one that lost its state. A server started here is fresh, so
//! it is marked as such for the default key prefix `dlock` ([`RedisServer::mark_fresh`]); a
//! restart through [`ServerControl`](crate::ServerControl) is not, so restarts keep their quiet period.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_core::LockError;

use super::local::LocalServer;
use super::{provision, ContainerSpec, TestServer};
use crate::process::{find_binary, free_addr, server_dir, ChildServer};

/// The environment variable naming an existing Redis server to test against.
pub const ENV_URL: &str = "DLOCK_TEST_REDIS_URL";

/// The key prefix lock-redis uses unless configured otherwise.
pub const DEFAULT_PREFIX: &str = "dlock";

/// Arguments that make a restart come back empty.
const NO_PERSISTENCE: [&str; 4] = ["--save", "", "--appendonly", "no"];

/// A Redis server for one test: a local process or container the test owns, or an external URL.
#[derive(Debug)]
pub struct RedisServer {
    server: TestServer,
}

impl RedisServer {
    /// `DLOCK_TEST_REDIS_URL` if set, else a container (feature `containers` and Docker), else a
    /// fresh local `redis-server` on a free port.
    pub async fn start() -> Result<RedisServer, LockError> {
        let mut cmd = vec!["redis-server"];
        cmd.extend(NO_PERSISTENCE);
        let spec =
            ContainerSpec::new("redis", "7", 6379).cmd(&cmd).ready_on("Ready to accept connections").persistent(false);
        let server = provision("redis", Some(spec), |addr| format!("redis://{addr}"), start_local_server).await?;
        RedisServer { server }.fresh().await
    }

    /// A fresh local `redis-server` with extra arguments (e.g. `--cluster-enabled yes`).
    pub async fn start_local_with(extra: &[&str]) -> Result<RedisServer, LockError> {
        RedisServer { server: start_local_server_with(extra).await? }.fresh().await
    }

    /// Always a fresh local `redis-server` (ignores `DLOCK_TEST_REDIS_URL` and containers).
    pub async fn start_local() -> Result<RedisServer, LockError> {
        RedisServer { server: start_local_server().await? }.fresh().await
    }

    /// Marks a server this process started (not one given by URL) as fresh for the default
    /// prefix. A cluster-mode node refuses the key unless it owns its slot yet: then nothing
    /// is marked (its markers are per lock name anyway).
    async fn fresh(self) -> Result<RedisServer, LockError> {
        if self.control().is_some() {
            if let Err(e) = self.mark_fresh(DEFAULT_PREFIX).await {
                if !e.to_string().contains("CLUSTERDOWN") {
                    return Err(e);
                }
            }
        }
        Ok(self)
    }

    /// Tells the server that no lease under `prefix` can have been forgotten (what an operator
    /// does for a new deployment: `SET <prefix>:boot 0`), so lock-redis skips its restart
    /// quiet period there. Needs the server's address and no password.
    pub async fn mark_fresh(&self, prefix: &str) -> Result<(), LockError> {
        let addr = self.addr().ok_or_else(|| {
            LockError::config("the Redis server's address is not known; mark it fresh with SET <prefix>:boot 0")
        })?;
        let key = format!("{prefix}:boot");
        let reply = command(addr, &["SET", &key, "0"]).await?;
        if reply.starts_with("+OK") {
            Ok(())
        } else {
            Err(LockError::unavailable("test", format!("redis at {addr} refused SET {key}: {}", reply.trim())))
        }
    }
}

/// A Redis server is a [`TestServer`] (`url()`, `addr()`, `control()`, `provenance()`).
impl std::ops::Deref for RedisServer {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.server
    }
}

async fn start_local_server() -> Result<TestServer, LockError> {
    start_local_server_with(&[]).await
}

async fn start_local_server_with(extra: &[&str]) -> Result<TestServer, LockError> {
    let program = redis_binary()?;
    let dir = server_dir("redis")?;
    let addr = free_addr()?;
    let mut args = node_args(addr.port(), dir.path());
    args.extend(extra.iter().map(|s| s.to_string()));
    let child = ChildServer::new(&program, args, dir.path());
    LocalServer::new("redis-server", child, addr).serve(&program, format!("redis://{addr}"), dir).await
}

/// The local `redis-server` binary.
pub(crate) fn redis_binary() -> Result<PathBuf, LockError> {
    find_binary("redis-server", &["/usr/local/bin", "/usr/bin", "/opt/homebrew/bin"]).ok_or_else(|| {
        LockError::unavailable(
            "test",
            format!(
                "redis-server not found on PATH; install it (apt-get install redis-server, brew install redis) or \
                 set {ENV_URL}=redis://host:port to test against a running server"
            ),
        )
    })
}

/// What every local node runs with: `port` on 127.0.0.1, `noeviction`, no persistence (a
/// restart comes back empty), its files in `dir`.
pub(crate) fn node_args(port: u16, dir: &Path) -> Vec<String> {
    let port = port.to_string();
    let mut args: Vec<String> =
        ["--port", &port, "--bind", "127.0.0.1", "--protected-mode", "no", "--maxmemory-policy", "noeviction"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    args.extend(NO_PERSISTENCE.iter().map(|s| s.to_string()));
    args.extend(["--dir".to_owned(), dir.to_string_lossy().into_owned()]);
    args
}

/// Sends one command in RESP and returns the raw reply (read until it stops arriving): what
/// the provisioning needs of Redis without depending on a client library.
pub async fn command(addr: SocketAddr, args: &[&str]) -> Result<String, LockError> {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    tokio::time::timeout(Duration::from_secs(2), async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(req.as_bytes()).await?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 16384];
        loop {
            // A reply is complete when no more bytes follow shortly after the last ones.
            match tokio::time::timeout(Duration::from_millis(30), stream.read(&mut buf)).await {
                Ok(Ok(0)) => break,
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                Ok(Err(e)) => return Err(e),
                Err(_) if !out.is_empty() => break,
                Err(_) => continue,
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    })
    .await
    .map_err(|_| LockError::unavailable("test", format!("{addr} did not answer {args:?} in 2 s")))?
    .map_err(|e| LockError::unavailable_from("test", format!("cannot send {args:?} to {addr}"), e))
}
