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
//!    `postgres.rs`, …) as a [`LocalServer`](crate::servers::local::LocalServer): free port, temp dir,
//!    stopped by PID.
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
//!         || async { /* LocalServer::new(…).serve(…) */ },
//!     )
//!     .await
//! }
//! ```

/// `server_newtype!(/// docs… Name, starter)`: a server type `Name` over a [`TestServer`]
/// that derefs to it and gives it back, and `starter()`, `Name::start` as a plain
/// [`TestServer`]. Written once for the servers whose handle is only the [`TestServer`].
macro_rules! server_newtype {
    ($(#[$doc:meta])* $name:ident, $starter:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(TestServer);

        impl std::ops::Deref for $name {
            type Target = TestServer;
            fn deref(&self) -> &TestServer {
                &self.0
            }
        }

        #[doc = concat!("[`", stringify!($name), "::start`] as a plain [`TestServer`].")]
        pub async fn $starter() -> Result<TestServer, LockError> {
            $name::start().await.map($name::into_test_server)
        }

        impl $name {
            /// The same server as a [`TestServer`] (which keeps it alive).
            pub fn into_test_server(self) -> TestServer {
                self.0
            }
        }
    };
}

pub mod deployment;
pub mod etcd;
pub mod fake_sentinel;
pub mod local;
pub mod mysql;
mod peer_links;
pub mod postgres;
pub mod redis;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod zk_ensemble;
pub mod zookeeper;

use std::any::Any;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockError;

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
    /// Its TCP address, when known: put a [`FaultProxy`](lock_conformance::proxy::FaultProxy) in front of it.
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
    /// [`Fixture::server`](lock_conformance::Fixture::server).
    pub fn control(&self) -> Option<Arc<dyn ServerControl>> {
        self.control.clone()
    }

    /// Where the server came from, for reports.
    pub fn provenance(&self) -> String {
        self.source.to_string()
    }

    /// How clients reach it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its TCP address, when known (always for servers the test owns).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// `url()` with its path replaced by `path` (given without the leading `/`) when it starts
    /// with `scheme` (`"zk://"`: an external URL may name a path of its own), else with `/path`
    /// appended.
    pub(crate) fn url_with_path(&self, scheme: &str, path: &str) -> String {
        match self.url.strip_prefix(scheme) {
            Some(rest) => format!("{scheme}{}/{path}", rest.split('/').next().unwrap_or(rest)),
            None => format!("{}/{path}", self.url.trim_end_matches('/')),
        }
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

/// Best effort: the TCP address of the (first) host in a URL (`scheme://host:port/…`) or
/// `host:port[,…]`; a host without a port is reached on `default_port`.
pub fn addr_of(url: &str, default_port: Option<u16>) -> Option<SocketAddr> {
    let authority = match url.split_once("://") {
        Some((_, rest)) => rest,
        None => url,
    };
    let authority = authority.split(['/', '?']).next()?;
    let host = authority.rsplit('@').next()?.split(',').next()?;
    let has_port = host.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok());
    match (has_port, default_port) {
        (true, _) => host.to_socket_addrs().ok()?.next(),
        (false, Some(port)) => (host, port).to_socket_addrs().ok()?.next(),
        (false, None) => None,
    }
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
            let addr = addr_of(&url, container.as_ref().map(|spec| spec.port));
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
        "{backend}: containers are off (build dlock-testkit with --features containers to use Docker); \
         trying a local binary"
    );
    Ok(None)
}

#[cfg(feature = "containers")]
mod containers;

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

/// Sends `request` to the server at `addr` on a fresh TCP connection and reads the answer to
/// the end (these requests — HTTP/1.0, ZooKeeper's four-letter words — close the connection
/// after it); `None` when the server does not answer within 2 s.
pub(crate) async fn ask(addr: SocketAddr, request: &[u8]) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let talk = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(request).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    tokio::time::timeout(Duration::from_secs(2), talk).await.ok()?.ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_and_addresses() {
        for (backend, var) in [("redis", "DLOCK_TEST_REDIS_URL"), ("redlock-3", "DLOCK_TEST_REDLOCK_3_URL")] {
            assert_eq!(env_var(backend), var);
        }
        let local = |port| Some(SocketAddr::from(([127, 0, 0, 1], port)));
        for (url, default_port, addr) in [
            ("redis://:pw@127.0.0.1:6380/0", None, local(6380)),
            ("127.0.0.1:2181,127.0.0.1:2182", None, local(2181)),
            ("zk://127.0.0.1,127.0.0.2/root", Some(2181), local(2181)),
            ("postgres://u@127.0.0.1:5433/db?sslmode=disable", None, local(5433)),
            ("sqlite::memory:", None, None),
        ] {
            assert_eq!(addr_of(url, default_port), addr, "{url}");
        }
    }

    #[test]
    fn paths_replace_an_external_urls_own() {
        let server = |url: &str| TestServer::external(Source::Env { var: "X".into() }, url.into(), None);
        for (url, with_path) in [
            ("zk://127.0.0.1:2181", "zk://127.0.0.1:2181/dlock"),
            ("zk://h1:2181,h2:2181/theirs/deep", "zk://h1:2181,h2:2181/dlock"),
            ("etcds://h:2379/theirs/", "etcds://h:2379/theirs/dlock"),
        ] {
            assert_eq!(server(url).url_with_path("zk://", "dlock"), with_path, "{url}");
        }
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
