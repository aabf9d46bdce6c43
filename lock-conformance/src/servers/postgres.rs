//! Local postgres servers for tests (see servers/mod.rs for the provisioning order).
//!
//! [`PostgresServer::start`] uses `DLOCK_TEST_POSTGRES_URL` when it is set (then there is no
//! server control), and otherwise runs a private PostgreSQL (`initdb` + `postgres` from
//! `/usr/lib/postgresql/*/bin` or `PATH`) on a free port of 127.0.0.1 with its data directory in
//! a temp dir. PostgreSQL refuses to run as root, so under root both run as the `postgres` user
//! through `setpriv` (which execs, so the PID we signal is the postmaster's own).
//!
//! The server keeps `fsync=off` (fast) but `synchronous_commit=on`: a commit is in the kernel
//! before it is acknowledged, so what a client saw committed survives `stop` (SIGKILL) and
//! `start` — a process crash, which is what the restart cases play. `stop` and `pause` act on
//! the postmaster **and its backends**: a SIGSTOP of the postmaster alone would leave open
//! connections answering.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;

use crate::process::{find_binary, free_port, wait_for_port, ChildServer};
use crate::servers::{provision, ContainerSpec, Source, TestServer};
use crate::ServerControl;

/// The environment variable naming an existing PostgreSQL database to test against.
pub const ENV_URL: &str = "DLOCK_TEST_POSTGRES_URL";

/// How long a (re)started server may take to accept queries, crash recovery included.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A PostgreSQL server for one test: a local process the test owns, or an external URL.
pub struct PostgresServer {
    url: String,
    provenance: String,
    addr: Option<SocketAddr>,
    program: Option<PathBuf>,
    control: Option<Arc<LocalPostgres>>,
}

impl std::fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresServer").field("addr", &self.addr).field("local", &self.control.is_some()).finish()
    }
}

/// A local postmaster and its temp dir (removed when dropped, after the server is killed).
struct LocalPostgres {
    child: Arc<ChildServer>,
    addr: SocketAddr,
    pg_isready: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

/// A server through [`provision`]: `DLOCK_TEST_POSTGRES_URL` if set, else the official
/// `postgres` image where the `containers` feature is on and Docker answers, else a fresh
/// private local server (about a second to start).
pub async fn postgres() -> Result<TestServer, LockError> {
    // The image's init phase runs a socket-only server first; only the final one listens on TCP.
    let spec = ContainerSpec::new("postgres", "16", 5432)
        .env("POSTGRES_HOST_AUTH_METHOD", "trust")
        .ready_on("listening on IPv4 address")
        .persistent(true);
    provision(
        "postgres",
        Some(spec),
        |addr| format!("postgres://postgres@{addr}/postgres"),
        || async { PostgresServer::start_local().await.map(PostgresServer::into_test_server) },
    )
    .await
}

impl PostgresServer {
    /// `DLOCK_TEST_POSTGRES_URL` if set, else a fresh private server.
    pub async fn start() -> Result<PostgresServer, LockError> {
        if let Ok(url) = std::env::var(ENV_URL) {
            if !url.trim().is_empty() {
                let provenance = format!("env {ENV_URL}");
                return Ok(PostgresServer { url, provenance, addr: None, program: None, control: None });
            }
        }
        Self::start_local().await
    }

    /// Always a fresh private server (ignores `DLOCK_TEST_POSTGRES_URL`).
    pub async fn start_local() -> Result<PostgresServer, LockError> {
        Self::start_local_with(&[]).await
    }

    /// A fresh private server with extra settings (`name=value`, as `postgres -c` takes them),
    /// applied after the defaults above, so they win: e.g. `synchronous_commit=off` to check
    /// that a client makes its own commits durable.
    pub async fn start_local_with(settings: &[&str]) -> Result<PostgresServer, LockError> {
        let bin_dirs = postgres_bin_dirs();
        let extra: Vec<&str> = bin_dirs.iter().map(String::as_str).collect();
        let not_found = || {
            LockError::unavailable(
                "test",
                format!(
                    "PostgreSQL server binaries (postgres, initdb) not found in /usr/lib/postgresql/*/bin or on \
                     PATH; install them (apt-get install postgresql) or set {ENV_URL}=postgres://user@host/db"
                ),
            )
        };
        let postgres = find_binary("postgres", &extra).ok_or_else(not_found)?;
        // `/usr/local/bin/postgres` may be a symlink into the real bin dir, where the tools are.
        let postgres = std::fs::canonicalize(&postgres).unwrap_or(postgres);
        let bin = postgres.parent().map(Path::to_path_buf).unwrap_or_default();
        let initdb = Some(bin.join("initdb")).filter(|p| p.is_file()).ok_or_else(not_found)?;
        let pg_isready = Some(bin.join("pg_isready")).filter(|p| p.is_file());

        let dir = tempfile::Builder::new()
            .prefix("dlock-postgres-")
            .tempdir()
            .map_err(|e| LockError::unavailable_from("test", "cannot create a temp dir for postgres", e))?;
        let data = dir.path().join("data");
        let runas = if is_root() { Some(postgres_user()?) } else { None };
        if let Some((uid, gid)) = runas {
            chown(dir.path(), uid, gid)?;
        }
        let (init_prog, init_args) = as_user(
            runas,
            &initdb,
            &["-D", &data.to_string_lossy(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"],
        );
        let out = tokio::process::Command::new(&init_prog)
            .args(&init_args)
            .current_dir(dir.path())
            .output()
            .await
            .map_err(|e| LockError::unavailable_from("test", format!("cannot run {}", initdb.display()), e))?;
        if !out.status.success() {
            return Err(LockError::unavailable(
                "test",
                format!(
                    "initdb failed ({}): {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            ));
        }

        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let port_s = port.to_string();
        let (prog, args) = as_user(
            runas,
            &postgres,
            &[
                "-D",
                &data.to_string_lossy(),
                "-p",
                &port_s,
                "-h",
                "127.0.0.1",
                "-k",
                &dir.path().to_string_lossy(),
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=on",
                "-c",
                "full_page_writes=off",
                "-c",
                "shared_buffers=16MB",
                "-c",
                "max_connections=80",
                "-c",
                "log_min_messages=warning",
            ]
            .into_iter()
            .chain(settings.iter().flat_map(|kv| ["-c", kv]))
            .collect::<Vec<&str>>(),
        );
        let provenance = format!("local binary {}", postgres.display());
        let program = Some(postgres.clone());
        let child = Arc::new(ChildServer::new(prog, args, dir.path()));
        let local = Arc::new(LocalPostgres { child, addr, pg_isready, _dir: dir });
        local.start_and_wait().await?;
        Ok(PostgresServer {
            url: format!("postgres://postgres@{addr}/postgres"),
            provenance,
            addr: Some(addr),
            program,
            control: Some(local),
        })
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres` (or the external URL).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where the server came from, for reports.
    pub fn provenance(&self) -> &str {
        &self.provenance
    }

    /// The same server as a [`TestServer`] (which keeps it alive).
    pub fn into_test_server(self) -> TestServer {
        let url = self.url.clone();
        match (self.addr, self.control(), self.program.clone()) {
            (Some(addr), Some(control), Some(program)) => {
                TestServer::owned(Source::Local { program }, url, addr, control, vec![Box::new(self)])
            }
            _ => {
                let var = ENV_URL.to_owned();
                TestServer::external(Source::Env { var }, url, self.addr)
            }
        }
    }

    /// The local server's address; `None` for an external URL.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Stop/start/pause of the local server; `None` for an external URL.
    pub fn control(&self) -> Option<Arc<dyn ServerControl>> {
        self.control.clone().map(|c| c as Arc<dyn ServerControl>)
    }
}

impl LocalPostgres {
    /// Starts the postmaster and waits until it accepts queries. A restart right after a
    /// SIGKILL can find the old shared memory still attached for a moment; then it retries.
    async fn start_and_wait(&self) -> Result<(), LockError> {
        let end = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            let child = Arc::clone(&self.child);
            // Spawning reads the supervisor's first line: keep that off the async workers.
            tokio::task::spawn_blocking(move || child.start())
                .await
                .map_err(|e| LockError::unavailable("test", format!("postgres start task failed: {e}")))??;
            match self.wait_ready(end).await {
                Ok(()) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= end => {
                    let log = std::fs::read_to_string(self.child.log_path()).unwrap_or_default();
                    return Err(LockError::unavailable(
                        "test",
                        format!("postgres did not start: {e}; its log:\n{log}"),
                    ));
                }
                Err(_) => {
                    kill_tree(&self.child).await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Ready = `pg_isready` says so (TCP accepts earlier, during crash recovery). Gives up
    /// early when the postmaster died.
    async fn wait_ready(&self, end: tokio::time::Instant) -> Result<(), LockError> {
        let Some(isready) = &self.pg_isready else {
            return wait_for_port(self.addr, end.saturating_duration_since(tokio::time::Instant::now())).await;
        };
        loop {
            let alive = self.child.pid().is_some_and(pid_alive);
            if !alive {
                return Err(LockError::unavailable("test", "the postmaster exited"));
            }
            let ok = tokio::process::Command::new(isready)
                .args(["-q", "-h", "127.0.0.1", "-p", &self.addr.port().to_string(), "-t", "1"])
                .status()
                .await
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(());
            }
            if tokio::time::Instant::now() >= end {
                return Err(LockError::unavailable("test", format!("postgres on {} is not ready", self.addr)));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[async_trait]
impl ServerControl for LocalPostgres {
    async fn stop(&self) -> Result<(), LockError> {
        kill_tree(&self.child).await;
        Ok(())
    }

    async fn start(&self) -> Result<(), LockError> {
        self.start_and_wait().await
    }

    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        if let Some(pid) = self.child.pid() {
            let mut pids = vec![pid];
            pids.extend(children_of(pid));
            for p in &pids {
                signal(*p, if paused { "STOP" } else { "CONT" }).await;
            }
            // `kill -STOP` returns once the signal is queued; a process stops when it next gets
            // a CPU. Until then it can still answer: wait until all have stopped.
            if paused {
                let end = tokio::time::Instant::now() + Duration::from_secs(5);
                while !pids.iter().all(|p| proc_state(*p).is_none_or(|s| s == "T" || s == "t")) {
                    if tokio::time::Instant::now() >= end {
                        return Err(LockError::unavailable("test", "postgres did not stop within 5 s of SIGSTOP"));
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }
        Ok(())
    }

    fn persistent(&self) -> bool {
        true
    }
}

/// SIGKILLs the postmaster and every backend, and waits until all are gone (a new postmaster
/// refuses to start while old backends hold the shared memory).
async fn kill_tree(child: &Arc<ChildServer>) {
    let Some(pid) = child.pid() else { return };
    let kids = children_of(pid);
    for k in &kids {
        signal(*k, "KILL").await;
    }
    let c = Arc::clone(child);
    let _ = tokio::task::spawn_blocking(move || c.stop()).await;
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while kids.iter().any(|k| pid_alive(*k)) && tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn signal(pid: u32, sig: &str) {
    let _ = tokio::process::Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().await;
}

/// The state letter of a process (`R`, `S`, `T`, `Z`, …), `None` when it is gone.
fn proc_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned))
}

/// A live, non-zombie process.
fn pid_alive(pid: u32) -> bool {
    proc_state(pid).is_some_and(|s| s != "Z")
}

/// Direct children of `pid` (the postmaster's backends and workers), from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_owned)))
                .flatten()
                .is_some_and(|ppid| ppid == pid.to_string())
        })
        .collect()
}

/// `/usr/lib/postgresql/<version>/bin`, newest version first, plus the usual prefixes.
fn postgres_bin_dirs() -> Vec<String> {
    let mut versions: Vec<(u32, String)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.filter_map(|e| {
                let e = e.ok()?;
                let v = e.file_name().to_str()?.parse::<u32>().ok()?;
                Some((v, e.path().join("bin").to_string_lossy().into_owned()))
            })
            .collect()
        })
        .unwrap_or_default();
    versions.sort_by_key(|v| std::cmp::Reverse(v.0));
    let mut dirs: Vec<String> = versions.into_iter().map(|(_, d)| d).collect();
    dirs.extend(["/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin"].map(String::from));
    dirs
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// The uid and gid of the `postgres` account, from /etc/passwd.
fn postgres_user() -> Result<(u32, u32), LockError> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == "postgres").then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?))).flatten()
        })
        .ok_or_else(|| {
            LockError::unavailable(
                "test",
                "running as root, and PostgreSQL refuses root: create a `postgres` user (the postgresql package \
                 does) or run the tests as another user",
            )
        })
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), LockError> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| LockError::unavailable_from("test", format!("cannot chown {} to postgres", path.display()), e))
}

/// `program args…`, or `setpriv --reuid … -- program args…` when it must run as `postgres`.
fn as_user(runas: Option<(u32, u32)>, program: &Path, args: &[&str]) -> (PathBuf, Vec<String>) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    match runas {
        None => (program.to_path_buf(), args),
        Some((uid, gid)) => {
            let mut all = vec![
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--init-groups".to_owned(),
                "--".to_owned(),
                program.to_string_lossy().into_owned(),
            ];
            all.extend(args);
            (find_binary("setpriv", &["/usr/bin", "/bin"]).unwrap_or_else(|| PathBuf::from("setpriv")), all)
        }
    }
}
