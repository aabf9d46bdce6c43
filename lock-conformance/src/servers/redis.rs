//! Local redis servers for tests (see servers/mod.rs for the provisioning order).
//!
//! [`RedisServer::start`] uses `DLOCK_TEST_REDIS_URL` when it is set (then there is no server
//! control), and otherwise runs `redis-server` on a free port of 127.0.0.1 in a temp dir,
//! without persistence (`--save "" --appendonly no`): a restart comes back empty, the worst
//! case for fencing tokens.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;

use crate::process::{find_binary, free_port, wait_for_port, ChildServer};
use crate::ServerControl;

/// The environment variable naming an existing Redis server to test against.
pub const ENV_URL: &str = "DLOCK_TEST_REDIS_URL";

/// How long a fresh `redis-server` may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A Redis server for one test: a local process the test owns, or an external URL.
pub struct RedisServer {
    url: String,
    provenance: String,
    addr: Option<SocketAddr>,
    control: Option<Arc<LocalRedis>>,
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer").field("addr", &self.addr).field("local", &self.control.is_some()).finish()
    }
}

/// A local `redis-server` process and its temp dir (removed when dropped).
struct LocalRedis {
    child: ChildServer,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// `DLOCK_TEST_REDIS_URL` if set, else a fresh local `redis-server` on a free port.
    pub async fn start() -> Result<RedisServer, LockError> {
        if let Ok(url) = std::env::var(ENV_URL) {
            if !url.trim().is_empty() {
                let provenance = format!("env {ENV_URL}");
                return Ok(RedisServer { url, provenance, addr: None, control: None });
            }
        }
        Self::start_local().await
    }

    /// Always a fresh local `redis-server` (ignores `DLOCK_TEST_REDIS_URL`).
    pub async fn start_local() -> Result<RedisServer, LockError> {
        let program =
            find_binary("redis-server", &["/usr/local/bin", "/usr/bin", "/opt/homebrew/bin"]).ok_or_else(|| {
                LockError::unavailable(
                    "test",
                    format!(
                        "redis-server not found on PATH; install it (apt-get install redis-server, brew install \
                         redis) or set {ENV_URL}=redis://host:port to test against a running server"
                    ),
                )
            })?;
        let dir = tempfile::Builder::new()
            .prefix("dlock-redis-")
            .tempdir()
            .map_err(|e| LockError::unavailable_from("test", "cannot create a temp dir for redis-server", e))?;
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--maxmemory-policy",
            "noeviction",
            "--dir",
            &dir.path().to_string_lossy(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let provenance = format!("local binary {}", program.display());
        let child = ChildServer::new(program, args, dir.path());
        let local = Arc::new(LocalRedis { child, addr, _dir: dir });
        local.start().await?;
        Ok(RedisServer { url: format!("redis://{addr}"), provenance, addr: Some(addr), control: Some(local) })
    }

    /// `redis://127.0.0.1:<port>` (or the external URL).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where the server came from, for reports.
    pub fn provenance(&self) -> &str {
        &self.provenance
    }

    /// The local server's address; `None` for an external URL.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Stop/start/pause of the local process; `None` for an external URL.
    pub fn control(&self) -> Option<Arc<dyn ServerControl>> {
        self.control.clone().map(|c| c as Arc<dyn ServerControl>)
    }
}

impl LocalRedis {
    async fn start(self: &Arc<Self>) -> Result<(), LockError> {
        let me = Arc::clone(self);
        // Spawning reads the supervisor's first line: keep that off the async workers.
        tokio::task::spawn_blocking(move || me.child.start())
            .await
            .map_err(|e| LockError::unavailable("test", format!("redis-server start task failed: {e}")))??;
        wait_for_port(self.addr, START_TIMEOUT).await.map_err(|e| {
            let log = std::fs::read_to_string(self.child.log_path()).unwrap_or_default();
            LockError::unavailable("test", format!("redis-server did not start: {e}; its log:\n{log}"))
        })
    }
}

#[async_trait]
impl ServerControl for LocalRedis {
    async fn stop(&self) -> Result<(), LockError> {
        // `ChildServer::stop` waits for the process: fine, SIGKILL makes that immediate.
        self.child.stop();
        Ok(())
    }

    async fn start(&self) -> Result<(), LockError> {
        self.child.start()?;
        wait_for_port(self.addr, START_TIMEOUT).await
    }

    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        self.child.pause(paused);
        Ok(())
    }

    fn persistent(&self) -> bool {
        false
    }
}
