//! Provisioning of test servers: a URL from the environment, a container where a Docker
//! engine answers, or a local server binary on a free port in a temp dir.
//!
//! [`provision`] is the one place that decides, in this order:
//!
//! 1. `DLOCK_TEST_<BACKEND>_URL` (e.g. `DLOCK_TEST_REDIS_URL=redis://127.0.0.1:6379`): use that
//!    server as it is. The suite cannot stop or pause it, so server fault cases are then
//!    `not_applicable`.
//! 2. A container from an official image, when this crate is built with the `containers`
//!    feature and `docker info` answers. The host port is fixed at start, so a stop/start keeps
//!    the address; stop, start, pause and unpause go through Docker.
//! 3. A local server binary, started by the backend's own file in this folder (`redis.rs`,
//!    `postgres.rs`, …) with [`LocalServer`]: free port, temp dir, stopped by PID.
//!
//! It prints which one it used to stderr, and [`TestServer::provenance`] says it again for
//! reports. Backend server files call it like this:
//!
//! ```ignore
//! pub async fn redis() -> Result<TestServer, LockError> {
//!     provision(
//!         "redis",
//!         Some(ContainerSpec::new("redis", "7", 6379).ready_on("Ready to accept connections")),
//!         |addr| format!("redis://{addr}"),
//!         || async { /* LocalServer::start(…) */ },
//!     )
//!     .await
//! }
//! ```

pub mod mysql;
pub mod postgres;
pub mod redis;
pub mod redis_sentinel;
pub mod zk_ensemble;
pub mod zookeeper;

use std::any::Any;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;

use crate::process::{wait_for_port, ChildServer};
use crate::ServerControl;

/// Where a test server came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// An existing server named by an environment variable.
    Env {
        /// The variable's name.
        var: String,
    },
    /// A container started for this test.
    Container {
        /// `image:tag`.
        image: String,
    },
    /// A local binary started for this test.
    Local {
        /// The program.
        program: PathBuf,
    },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Env { var } => write!(f, "env {var}"),
            Source::Container { image } => write!(f, "container {image}"),
            Source::Local { program } => write!(f, "local binary {}", program.display()),
        }
    }
}

/// A server for one test (or one run). Whatever keeps it alive (container, child process,
/// temp dir) lives as long as this value; dropping it stops the server.
pub struct TestServer {
    /// Where it came from.
    pub source: Source,
    /// How clients reach it (a URL or connect string, in the backend's own syntax).
    pub url: String,
    /// Its TCP address, when known: put a [`FaultProxy`](crate::proxy::FaultProxy) in front of it.
    pub addr: Option<SocketAddr>,
    control: Option<Arc<dyn ServerControl>>,
    _keep: Vec<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("source", &self.source)
            .field("addr", &self.addr)
            .field("controlled", &self.control.is_some())
            .finish()
    }
}

impl TestServer {
    /// A server given from outside (no control).
    pub fn external(source: Source, url: String, addr: Option<SocketAddr>) -> TestServer {
        TestServer { source, url, addr, control: None, _keep: Vec::new() }
    }

    /// A server the test owns: `control` stops/starts/pauses it, `keep` holds what must live
    /// as long as the server (temp dirs, handles).
    pub fn owned(
        source: Source,
        url: String,
        addr: SocketAddr,
        control: Arc<dyn ServerControl>,
        keep: Vec<Box<dyn Any + Send + Sync>>,
    ) -> TestServer {
        TestServer { source, url, addr: Some(addr), control: Some(control), _keep: keep }
    }

    /// The server's controls, when the test owns the process: hand it out from
    /// [`Fixture::server`](crate::Fixture::server).
    pub fn control(&self) -> Option<Arc<dyn ServerControl>> {
        self.control.clone()
    }

    /// Where the server came from, for reports.
    pub fn provenance(&self) -> String {
        self.source.to_string()
    }
}

/// What the container path needs: an official image, its port, readiness, settings.
#[derive(Clone, Debug)]
pub struct ContainerSpec {
    /// Image name (`redis`, `postgres`, `mysql`, `zookeeper`).
    pub image: String,
    /// Image tag.
    pub tag: String,
    /// The server's port inside the container.
    pub port: u16,
    /// Environment of the container.
    pub env: Vec<(String, String)>,
    /// Command-line override, if any.
    pub cmd: Vec<String>,
    /// A log line (stdout or stderr) that says the server is ready.
    pub ready_message: Option<String>,
    /// Whether data survive a stop/start (`ServerControl::persistent`).
    pub persistent: bool,
}

impl ContainerSpec {
    /// An image and its server port.
    pub fn new(image: &str, tag: &str, port: u16) -> ContainerSpec {
        ContainerSpec {
            image: image.into(),
            tag: tag.into(),
            port,
            env: Vec::new(),
            cmd: Vec::new(),
            ready_message: None,
            persistent: true,
        }
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Overrides the command.
    pub fn cmd(mut self, cmd: &[&str]) -> Self {
        self.cmd = cmd.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Waits for this log line before the server counts as ready.
    pub fn ready_on(mut self, message: &str) -> Self {
        self.ready_message = Some(message.into());
        self
    }

    /// Declares whether the server keeps its data across stop/start.
    pub fn persistent(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }
}

/// The environment variable that names an existing server for `backend`:
/// `DLOCK_TEST_<BACKEND>_URL` (upper case, `-` as `_`).
pub fn env_var(backend: &str) -> String {
    format!("DLOCK_TEST_{}_URL", backend.to_ascii_uppercase().replace('-', "_"))
}

/// Best effort: the TCP address in a URL (`scheme://host:port/…`) or `host:port[,…]`.
pub fn addr_of(url: &str) -> Option<SocketAddr> {
    let authority = match url.split_once("://") {
        Some((_, rest)) => rest,
        None => url,
    };
    let authority = authority.split(['/', '?', ',']).next()?;
    let authority = authority.rsplit('@').next()?;
    authority.to_socket_addrs().ok()?.next()
}

/// Gets a fresh server for `backend`: env URL, else a container (feature `containers` and a
/// Docker engine that answers), else `local()`. Prints which path it used.
///
/// `url_for` builds the client URL from the container's address.
pub async fn provision<L, LF>(
    backend: &str,
    container: Option<ContainerSpec>,
    url_for: impl Fn(SocketAddr) -> String,
    local: L,
) -> Result<TestServer, LockError>
where
    L: FnOnce() -> LF,
    LF: Future<Output = Result<TestServer, LockError>>,
{
    let var = env_var(backend);
    if let Ok(url) = std::env::var(&var) {
        if !url.trim().is_empty() {
            eprintln!("{backend}: using the server from {var} ({url})");
            let addr = addr_of(&url);
            return Ok(TestServer::external(Source::Env { var }, url, addr));
        }
    }
    if let Some(spec) = container {
        match container_path(backend, &spec, &url_for).await {
            Ok(Some(server)) => {
                eprintln!("{backend}: using {}", server.provenance());
                return Ok(server);
            }
            Ok(None) => {}
            Err(e) => eprintln!("{backend}: container start failed ({e}); falling back to a local binary"),
        }
    }
    let server = local().await?;
    eprintln!("{backend}: using {}", server.provenance());
    Ok(server)
}

#[cfg(not(feature = "containers"))]
async fn container_path(
    backend: &str,
    _spec: &ContainerSpec,
    _url_for: &dyn Fn(SocketAddr) -> String,
) -> Result<Option<TestServer>, LockError> {
    eprintln!(
        "{backend}: containers are off (build lock-conformance with --features containers to use Docker); \
         trying a local binary"
    );
    Ok(None)
}

#[cfg(feature = "containers")]
async fn container_path(
    backend: &str,
    spec: &ContainerSpec,
    url_for: &dyn Fn(SocketAddr) -> String,
) -> Result<Option<TestServer>, LockError> {
    if !docker_answers().await {
        eprintln!("{backend}: no Docker engine answers `docker info`; trying a local binary");
        return Ok(None);
    }
    containers::start(spec, url_for).await.map(Some)
}

/// Whether `docker info` answers within a few seconds.
pub async fn docker_answers() -> bool {
    let probe = tokio::process::Command::new("docker")
        .arg("info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .status();
    matches!(tokio::time::timeout(Duration::from_secs(5), probe).await, Ok(Ok(s)) if s.success())
}

#[cfg(feature = "containers")]
mod containers {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;
    use lock_core::LockError;
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{ContainerAsync, GenericImage, ImageExt};

    use super::{ContainerSpec, Source, TestServer};
    use crate::process::{free_port, wait_for_port};
    use crate::ServerControl;

    fn err(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> LockError {
        LockError::unavailable_from("test", format!("{what}; check that Docker runs (`docker info`)"), e)
    }

    pub(super) async fn start(
        spec: &ContainerSpec,
        url_for: &dyn Fn(SocketAddr) -> String,
    ) -> Result<TestServer, LockError> {
        let mut image = GenericImage::new(spec.image.clone(), spec.tag.clone()).with_exposed_port(spec.port.tcp());
        if let Some(m) = &spec.ready_message {
            image = image.with_wait_for(WaitFor::message_on_either_std(m.as_bytes()));
        }
        // A fixed host port keeps the address across stop/start.
        let host_port = free_port()?;
        let mut req = image.with_mapped_port(host_port, spec.port.tcp()).with_startup_timeout(Duration::from_secs(120));
        for (k, v) in &spec.env {
            req = req.with_env_var(k.clone(), v.clone());
        }
        if !spec.cmd.is_empty() {
            req = req.with_cmd(spec.cmd.clone());
        }
        let container = req.start().await.map_err(|e| err("cannot start the container", e))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], host_port));
        wait_for_port(addr, Duration::from_secs(60)).await?;
        let control = Arc::new(ContainerControl { container, addr, persistent: spec.persistent });
        Ok(TestServer::owned(
            Source::Container { image: format!("{}:{}", spec.image, spec.tag) },
            url_for(addr),
            addr,
            control,
            Vec::new(),
        ))
    }

    struct ContainerControl {
        container: ContainerAsync<GenericImage>,
        addr: SocketAddr,
        persistent: bool,
    }

    #[async_trait]
    impl ServerControl for ContainerControl {
        async fn stop(&self) -> Result<(), LockError> {
            self.container.stop_with_timeout(Some(0)).await.map_err(|e| err("cannot stop the container", e))
        }
        async fn start(&self) -> Result<(), LockError> {
            self.container.start().await.map_err(|e| err("cannot start the container", e))?;
            wait_for_port(self.addr, Duration::from_secs(60)).await
        }
        async fn pause(&self, paused: bool) -> Result<(), LockError> {
            let r = if paused { self.container.pause().await } else { self.container.unpause().await };
            r.map_err(|e| err("cannot pause or unpause the container", e))
        }
        fn persistent(&self) -> bool {
            self.persistent
        }
    }
}

/// A local server process as a [`ServerControl`]: [`ChildServer`] plus readiness waits, with
/// the blocking process calls kept off the async runtime.
pub struct LocalServer {
    child: Arc<ChildServer>,
    addr: SocketAddr,
    persistent: bool,
    ready_within: Duration,
}

impl LocalServer {
    /// Starts `child` and waits until `addr` accepts connections. `persistent`: whether its
    /// data survive stop/start.
    pub async fn start(child: ChildServer, addr: SocketAddr, persistent: bool) -> Result<Arc<LocalServer>, LockError> {
        let server =
            Arc::new(LocalServer { child: Arc::new(child), addr, persistent, ready_within: Duration::from_secs(60) });
        server.start_and_wait().await?;
        Ok(server)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The process supervisor.
    pub fn child(&self) -> &Arc<ChildServer> {
        &self.child
    }

    /// Wraps this server as a [`TestServer`]; `dir` (e.g. a `tempfile::TempDir`) is kept alive
    /// with it.
    pub fn into_test_server(
        self: Arc<Self>,
        program: &Path,
        url: String,
        keep: Vec<Box<dyn Any + Send + Sync>>,
    ) -> TestServer {
        let addr = self.addr;
        TestServer::owned(Source::Local { program: program.to_path_buf() }, url, addr, self, keep)
    }

    async fn start_and_wait(&self) -> Result<(), LockError> {
        let child = Arc::clone(&self.child);
        blocking(move || child.start()).await?;
        match wait_for_port(self.addr, self.ready_within).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let log = std::fs::read_to_string(self.child.log_path()).unwrap_or_default();
                let tail: String =
                    log.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
                Err(LockError::unavailable("test", format!("{e}; server log tail:\n{tail}")))
            }
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LockError> + Send + 'static,
) -> Result<T, LockError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| LockError::unavailable_from("test", "a process-control task failed", e))?
}

#[async_trait]
impl ServerControl for LocalServer {
    async fn stop(&self) -> Result<(), LockError> {
        let child = Arc::clone(&self.child);
        blocking(move || {
            child.stop();
            Ok(())
        })
        .await
    }

    async fn start(&self) -> Result<(), LockError> {
        self.start_and_wait().await
    }

    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        let child = Arc::clone(&self.child);
        blocking(move || {
            child.pause(paused);
            Ok(())
        })
        .await
    }

    fn persistent(&self) -> bool {
        self.persistent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_and_addresses() {
        assert_eq!(env_var("redis"), "DLOCK_TEST_REDIS_URL");
        assert_eq!(env_var("redlock-3"), "DLOCK_TEST_REDLOCK_3_URL");
        assert_eq!(addr_of("redis://:pw@127.0.0.1:6380/0"), Some(SocketAddr::from(([127, 0, 0, 1], 6380))));
        assert_eq!(addr_of("127.0.0.1:2181,127.0.0.1:2182"), Some(SocketAddr::from(([127, 0, 0, 1], 2181))));
        assert_eq!(addr_of("postgres://u@127.0.0.1:5433/db?sslmode=disable").map(|a| a.port()), Some(5433));
        assert_eq!(addr_of("sqlite::memory:"), None);
    }

    #[tokio::test]
    async fn env_url_wins() {
        // A made-up backend name, so no other test's variable is touched.
        let var = env_var("conformance-selftest");
        std::env::set_var(&var, "tcp://127.0.0.1:1");
        let s = provision(
            "conformance-selftest",
            None,
            |a| a.to_string(),
            || async { Err::<TestServer, _>(LockError::config("local must not be called")) },
        )
        .await
        .unwrap();
        std::env::remove_var(&var);
        assert_eq!(s.source, Source::Env { var });
        assert!(s.control().is_none());
    }
}
