//! The one shape of a local test server: a [`ChildServer`] on a known address, a readiness
//! check, and stop (SIGKILL) / start / pause (SIGSTOP) as a [`ServerControl`]. Every local
//! server of this crate is one (Redis, PostgreSQL, MariaDB, ZooKeeper, each ensemble member);
//! what differs is only said by the builder: whether its data survive a restart
//! ([`LocalServer::persistent`]), how readiness shows ([`LocalServer::ready_when`]), and whether
//! the server forks workers that must be stopped and paused with it
//! ([`LocalServer::process_tree`]).

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;
use tokio::time::Instant;

use super::{Source, TestServer};
use crate::process::{children_of, pid_alive, signal, threads_stopped, ChildServer};
use crate::ServerControl;

/// A readiness check beyond "the port accepts connections": `true` once the server serves.
type Probe = Arc<dyn Fn(SocketAddr) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// How long a stopped server's processes may take to go, and a paused one's to stop.
const SIGNAL_WAIT: Duration = Duration::from_secs(10);

/// A local server process: build it with [`LocalServer::new`] or [`LocalServer::persistent`] and
/// the settings below, then [`LocalServer::serve`] it (or start it as a deployment's member).
pub struct LocalServer {
    name: String,
    child: Arc<ChildServer>,
    addr: SocketAddr,
    persistent: bool,
    ready_within: Duration,
    probe: Option<Probe>,
    process_tree: bool,
}

impl std::fmt::Debug for LocalServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalServer").field("name", &self.name).field("addr", &self.addr).finish()
    }
}

impl LocalServer {
    /// `child` (named `name` in messages), reached on `addr`. Defaults: data do not survive a
    /// restart, ready once `addr` accepts connections, within 60 s, one process.
    pub fn new(name: &str, child: ChildServer, addr: SocketAddr) -> LocalServer {
        LocalServer {
            name: name.to_owned(),
            child: Arc::new(child),
            addr,
            persistent: false,
            ready_within: Duration::from_secs(60),
            probe: None,
            process_tree: false,
        }
    }

    /// As [`LocalServer::new`], but its data survive stop/start ([`ServerControl::persistent`]),
    /// and a (re)start, crash recovery included, may take `within`.
    pub fn persistent(name: &str, child: ChildServer, addr: SocketAddr, within: Duration) -> LocalServer {
        LocalServer { persistent: true, ready_within: within, ..LocalServer::new(name, child, addr) }
    }

    /// Ready only once `probe(addr)` says so (PostgreSQL accepts TCP during crash recovery;
    /// ZooKeeper before it serves), instead of once the port accepts connections.
    pub fn ready_when<F, Fut>(mut self, probe: F) -> Self
    where
        F: Fn(SocketAddr) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        self.probe = Some(Arc::new(move |addr| Box::pin(probe(addr))));
        self
    }

    /// Stop and pause act on the process **and its children** (the postmaster's backends: a
    /// SIGSTOP of the postmaster alone would leave open connections answering, and a new
    /// postmaster refuses to start while old backends hold the shared memory).
    pub fn process_tree(mut self) -> Self {
        self.process_tree = true;
        self
    }

    /// Starts the server, waits until it is ready, and wraps it as a [`TestServer`] reached at
    /// `url`, whose source is `program`; `dir` (its data) lives as long as it.
    pub async fn serve(self, program: &Path, url: String, dir: tempfile::TempDir) -> Result<TestServer, LockError> {
        let server = Arc::new(self);
        server.start_and_wait().await?;
        let (source, addr) = (Source::Local { program: program.to_path_buf() }, server.addr);
        Ok(TestServer::owned(source, url, addr, server, vec![Box::new(dir)]))
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The process supervisor.
    pub fn child(&self) -> &Arc<ChildServer> {
        &self.child
    }

    /// The server's output so far (its log file), for failure reports.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.child.log_path()).unwrap_or_default()
    }

    /// A member fault of a deployment: SIGKILLs the server, keeps it down for `span`, and starts
    /// it again (returning once it is ready).
    pub(crate) async fn kill_for(&self, span: Duration) -> Result<(), LockError> {
        self.kill().await;
        tokio::time::sleep(span).await;
        self.start_and_wait().await
    }

    /// Starts the process and waits until it is ready. A process that exits early (a restart
    /// right after a SIGKILL can find the old shared memory still attached for a moment) is
    /// started again until the time is up.
    async fn start_and_wait(&self) -> Result<(), LockError> {
        let end = Instant::now() + self.ready_within;
        loop {
            let child = Arc::clone(&self.child);
            blocking(move || child.start()).await?;
            match self.wait_ready(end).await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= end => {
                    let log = self.log();
                    let tail: Vec<&str> = log.lines().rev().take(40).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    return Err(LockError::unavailable(
                        "test",
                        format!("{} did not start: {e}; the end of its log:\n{}", self.name, tail.join("\n")),
                    ));
                }
                Err(_) => {
                    self.kill().await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Ready = the probe says so, or else the port accepts connections. Gives up early when
    /// the process died.
    async fn wait_ready(&self, end: Instant) -> Result<(), LockError> {
        loop {
            if !self.child.pid().is_some_and(pid_alive) {
                return Err(LockError::unavailable("test", "the process exited"));
            }
            let ready = match &self.probe {
                Some(probe) => probe(self.addr).await,
                None => tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(self.addr))
                    .await
                    .is_ok_and(|r| r.is_ok()),
            };
            if ready {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(LockError::unavailable(
                    "test",
                    format!("{} is not ready after {:?}", self.addr, self.ready_within),
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The server's PID and, for a process tree, its children's.
    fn pids(&self) -> Vec<u32> {
        let Some(pid) = self.child.pid() else { return Vec::new() };
        let mut pids = vec![pid];
        if self.process_tree {
            pids.extend(children_of(pid));
        }
        pids
    }

    /// SIGKILLs the server (and its children) and waits until all are gone. A process tree's
    /// root is stopped first, so that it forks no child between the list and the kill: a
    /// PostgreSQL backend forked in that moment outlived the postmaster, held its shared memory,
    /// and the restart then failed for 30 s ("pre-existing shared memory block is still in use").
    async fn kill(&self) {
        if let (true, Some(root)) = (self.process_tree, self.child.pid()) {
            let _ = blocking(move || {
                signal(root, "STOP");
                Ok(())
            })
            .await;
            let end = Instant::now() + SIGNAL_WAIT;
            while !threads_stopped(root) && Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let pids = self.pids();
        let kids = pids.get(1..).unwrap_or_default().to_vec();
        let child = Arc::clone(&self.child);
        let _ = blocking(move || {
            for k in &kids {
                signal(*k, "KILL");
            }
            // SIGKILL by PID, then the supervisor reaps it.
            child.stop();
            Ok(())
        })
        .await;
        let end = Instant::now() + SIGNAL_WAIT;
        while pids.iter().any(|p| pid_alive(*p)) && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Runs `control` on each of `children` in order, off the runtime: a child's stop and pause
/// block until the signal is sent.
pub(crate) async fn each_child(
    children: &[Arc<ChildServer>],
    control: impl Fn(&ChildServer) + Clone + Send + 'static,
) -> Result<(), LockError> {
    for child in children {
        let (child, control) = (Arc::clone(child), control.clone());
        blocking(move || {
            control(&child);
            Ok(())
        })
        .await?;
    }
    Ok(())
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
        self.kill().await;
        Ok(())
    }

    async fn start(&self) -> Result<(), LockError> {
        self.start_and_wait().await
    }

    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        let pids = self.pids();
        let sig = if paused { "STOP" } else { "CONT" };
        let signalled = pids.clone();
        blocking(move || {
            for p in &signalled {
                signal(*p, sig);
            }
            Ok(())
        })
        .await?;
        // `kill -STOP` returns once the signal is queued; the kernel stops the threads one by
        // one as they get a CPU, and until the last one stops a connection thread can still
        // answer (seen with MariaDB and PostgreSQL on a busy 2-core machine): a pause is a pause
        // only when every thread has stopped.
        if paused {
            let end = Instant::now() + SIGNAL_WAIT;
            while !pids.iter().all(|p| threads_stopped(*p)) {
                if Instant::now() >= end {
                    return Err(LockError::unavailable(
                        "test",
                        format!("{} did not stop within {SIGNAL_WAIT:?} of SIGSTOP", self.name),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        Ok(())
    }

    fn persistent(&self) -> bool {
        self.persistent
    }
}
