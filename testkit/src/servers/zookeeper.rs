//! Local zookeeper servers for tests (see servers/mod.rs for the provisioning order).
//!
//! [`ZkServer::start`] uses `DLOCK_TEST_ZK_URL` when it is set
//! (then there is no server control), else the official `zookeeper:3.8` image where the
//! `containers` feature is on and a Docker engine answers, and otherwise runs a standalone
//! ZooKeeper (`QuorumPeerMain`) from the installed
//! jars with `java`, on a free port of 127.0.0.1, with its data directory in a temp dir (kept
//! across `stop`/`start`, so sessions, nodes and zxids survive a restart as in production).
//! `tickTime` is 200 ms so that sessions as short as 400 ms are allowed; the JVM is kept small.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use lock_core::LockError;

use super::local::LocalServer;
use super::{ask, provision, ContainerSpec, TestServer};
use crate::process::{find_binary, free_addr, server_dir, ChildServer};

/// The environment variable naming an existing ZooKeeper ensemble to test against
/// (`zk://host:port[,host:port]/root`).
pub const ENV_URL: &str = "DLOCK_TEST_ZK_URL";

/// The environment variable pointing at a ZooKeeper installation (a directory with `lib/*.jar`,
/// as in the Apache tarball), when it is not the Debian package.
pub const ENV_HOME: &str = "ZOOKEEPER_HOME";

/// How long a fresh ZooKeeper may take to serve requests (a cold JVM on a busy 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The tick of the test server: sessions may be as short as two ticks.
pub const TICK: Duration = Duration::from_millis(200);

/// A ZooKeeper server for one test: a local process or container the test owns, or an external
/// URL. It is a [`TestServer`] (`url()`, `addr()`, `control()`, `provenance()`).
#[derive(Debug)]
pub struct ZkServer {
    server: TestServer,
    /// With [`ZkServer::start_local_tls`]: the TLS port and the CA file that signed its certificate.
    tls: Option<(SocketAddr, PathBuf)>,
}

impl std::ops::Deref for ZkServer {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.server
    }
}

/// The class path of an installed ZooKeeper: the Debian package's `zookeeper.jar` (its manifest
/// lists the dependencies) or `$ZOOKEEPER_HOME/lib/*`.
pub(super) fn classpath() -> Option<String> {
    if let Some(home) = std::env::var_os(ENV_HOME).map(PathBuf::from) {
        let lib = home.join("lib");
        if lib.is_dir() {
            return Some(format!("{}/*:{}/*", lib.display(), home.display()));
        }
    }
    ["/usr/share/java/zookeeper.jar", "/usr/share/zookeeper/zookeeper.jar"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

pub(super) fn java() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME").map(PathBuf::from) {
        let java = home.join("bin/java");
        if java.is_file() {
            return Some(java);
        }
    }
    find_binary("java", &["/usr/lib/jvm/default-java/bin", "/usr/bin"])
}

impl ZkServer {
    /// `DLOCK_TEST_ZK_URL` if set, else a container (feature `containers` and a Docker engine),
    /// else a fresh local ZooKeeper on a free port.
    pub async fn start() -> Result<ZkServer, LockError> {
        // The official image honours ZOO_TICK_TIME: a short tick allows the tests' short sessions.
        let spec = ContainerSpec::new("zookeeper", "3.8", 2181)
            .env("ZOO_TICK_TIME", &TICK.as_millis().to_string())
            .env("ZOO_4LW_COMMANDS_WHITELIST", "*")
            .env("ZOO_ADMINSERVER_ENABLED", "false")
            .ready_on("binding to port")
            .persistent(true);
        let local = || async { Self::start_local().await.map(|zk| zk.server) };
        let server = provision("zk", Some(spec), |addr| format!("zk://{addr}"), local).await?;
        Ok(ZkServer { server, tls: None })
    }

    /// Always a fresh local ZooKeeper (ignores `DLOCK_TEST_ZK_URL`).
    pub async fn start_local() -> Result<ZkServer, LockError> {
        Self::start_local_with(false).await
    }

    /// A fresh local ZooKeeper that also listens with TLS (`secureClientPort`, Netty) on
    /// [`ZkServer::tls`], with a certificate for `127.0.0.1`/`localhost` signed by a CA made for
    /// this server (`openssl`; the server's PKCS#12 keystore is made from it). The plain port
    /// stays open for the readiness check and for looking at nodes.
    pub async fn start_local_tls() -> Result<ZkServer, LockError> {
        Self::start_local_with(true).await
    }

    /// The TLS address and the PEM file of the CA that signed the server's certificate (for
    /// servers from [`ZkServer::start_local_tls`]).
    pub fn tls(&self) -> Option<(SocketAddr, PathBuf)> {
        self.tls.clone()
    }

    async fn start_local_with(tls: bool) -> Result<ZkServer, LockError> {
        let missing = |what: &str| {
            LockError::unavailable(
                "test",
                format!(
                    "{what} not found; install ZooKeeper (apt-get install zookeeper, which brings Java), set \
                     {ENV_HOME} to an Apache ZooKeeper directory, or set {ENV_URL}=zk://host:port/root to test \
                     against a running ensemble"
                ),
            )
        };
        let mut cp = classpath().ok_or_else(|| missing("the ZooKeeper jars (/usr/share/java/zookeeper.jar)"))?;
        // TLS needs the Netty server, whose codec the Debian jar's manifest does not list.
        if tls && std::path::Path::new(DEBIAN_NETTY_CODEC).is_file() {
            cp = format!("{cp}:{DEBIAN_NETTY_CODEC}");
        }
        let java = java().ok_or_else(|| missing("java"))?;
        let dir = server_dir("zk")?;
        let addr = free_addr()?;
        let data = dir.path().join("data");
        let cfg = dir.path().join("zoo.cfg");
        let config = format!(
            "tickTime={tick}\n\
             initLimit=10\n\
             syncLimit=5\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout=120000\n\
             maxClientCnxns=0\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             autopurge.purgeInterval=0\n",
            tick = TICK.as_millis(),
            min = (TICK * 2).as_millis(),
            data = data.display(),
            port = addr.port(),
        );
        let (config, tls) = if tls {
            let secure = free_addr()?;
            let dir_path = dir.path().to_owned();
            let keystore = tokio::task::spawn_blocking(move || make_certificates(&dir_path))
                .await
                .map_err(|e| LockError::unavailable("test", format!("certificate task failed: {e}")))??;
            let config = format!(
                "{config}secureClientPort={port}\n\
                 secureClientPortAddress=127.0.0.1\n\
                 serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 ssl.keyStore.location={keystore}\n\
                 ssl.keyStore.password={KEYSTORE_PASSWORD}\n\
                 ssl.keyStore.type=PKCS12\n\
                 ssl.clientAuth=none\n",
                port = secure.port(),
                keystore = keystore.display(),
            );
            (config, Some((secure, dir.path().join("ca.pem"))))
        } else {
            (config, None)
        };
        std::fs::create_dir_all(&data)
            .and_then(|_| std::fs::write(&cfg, config))
            .map_err(|e| LockError::unavailable_from("test", "cannot write zoo.cfg", e))?;
        let args = quorum_peer_args(&cp, &cfg);
        let child = ChildServer::new(&java, args, dir.path());
        let local = LocalServer::persistent("ZooKeeper", child, addr, START_TIMEOUT).ready_when(serves);
        Ok(ZkServer { server: local.serve(&java, format!("zk://{addr}"), dir).await?, tls })
    }

    /// `url()` with the root path `root` (replacing the path of an external URL).
    pub fn url_with_root(&self, root: &str) -> String {
        self.url_with_path("zk://", root.trim_start_matches('/'))
    }
}

/// Netty's codec jar where the Debian package installs it.
const DEBIAN_NETTY_CODEC: &str = "/usr/share/java/netty-codec.jar";

/// The password of the test server's keystore (a throwaway, like the keys in it).
const KEYSTORE_PASSWORD: &str = "dlock-test";

/// Makes `ca.pem` (a CA for this server only) and `server.p12` (the server's key and a
/// certificate for `127.0.0.1`/`localhost` signed by it) in `dir`; returns the keystore's path.
fn make_certificates(dir: &std::path::Path) -> Result<PathBuf, LockError> {
    crate::certs::server_certs(dir)?;
    let pass = format!("pass:{KEYSTORE_PASSWORD}");
    crate::certs::openssl(
        dir,
        &format!("pkcs12 -export -in server.pem -inkey server.key -certfile ca.pem -out server.p12 -passout {pass}"),
    )?;
    Ok(dir.join("server.p12"))
}

/// The JVM arguments of a `QuorumPeerMain` with config file `cfg`: a small, quickly started JVM.
pub(super) fn quorum_peer_args(cp: &str, cfg: &std::path::Path) -> Vec<String> {
    [
        "-Xmx256m",
        "-Xss512k",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Xshare:auto",
        "-Djava.awt.headless=true",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.jmx.log4j.disable=true",
        // Empty container parents go away within a second instead of a minute.
        "-Dznode.container.checkIntervalMs=1000",
        "-cp",
        cp,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        &cfg.to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Sends a four-letter command and returns the answer (empty on any failure).
pub(super) async fn four_letters(addr: SocketAddr, cmd: &str) -> String {
    ask(addr, cmd.as_bytes()).await.unwrap_or_default()
}

/// Whether the server at `addr` serves requests (`srvr` reports its mode), not merely listens.
pub(super) async fn serves(addr: SocketAddr) -> bool {
    four_letters(addr, "srvr").await.contains("Mode:")
}
