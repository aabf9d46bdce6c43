//! Local mysql servers for tests (see servers/mod.rs for the provisioning order).
//!
//! [`MysqlServer::start`] uses `DLOCK_TEST_MYSQL_URL` when it is set (then there is no server
//! control), and otherwise runs a private MariaDB (`mariadb-install-db` + `mariadbd`) on a free
//! port of 127.0.0.1 with its data directory in a temp dir, `root` without a password and a
//! `test` database. Only MariaDB is provisioned locally; for Oracle MySQL set the URL.
//!
//! InnoDB writes its log at every commit (`innodb_flush_log_at_trx_commit=1`, which lock-sql
//! checks before it declares durable fencing) but skips the fsync (`innodb_flush_method=nosync`:
//! fast), so what a client saw committed survives `stop` (SIGKILL) and `start` — a process
//! crash, which is what the restart cases play.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;

use crate::process::{find_binary, free_port, wait_for_port, ChildServer};
use crate::servers::{provision, ContainerSpec, Source, TestServer};
use crate::ServerControl;

/// The environment variable naming an existing MySQL/MariaDB database to test against.
pub const ENV_URL: &str = "DLOCK_TEST_MYSQL_URL";

/// How long a (re)started server may take to accept connections, crash recovery included.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Where MariaDB's binaries live besides `PATH`.
const BIN_DIRS: &[&str] = &["/usr/sbin", "/usr/bin", "/usr/local/mysql/bin", "/usr/local/bin", "/opt/homebrew/bin"];

/// A MySQL/MariaDB server for one test: a local process the test owns, or an external URL.
pub struct MysqlServer {
    url: String,
    provenance: String,
    addr: Option<SocketAddr>,
    program: Option<PathBuf>,
    control: Option<Arc<LocalMysql>>,
}

impl std::fmt::Debug for MysqlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlServer").field("addr", &self.addr).field("local", &self.control.is_some()).finish()
    }
}

/// A local `mariadbd` and its temp dir (removed when dropped, after the server is killed).
struct LocalMysql {
    child: Arc<ChildServer>,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

/// A server through [`provision`]: `DLOCK_TEST_MYSQL_URL` if set, else the official `mariadb`
/// image where the `containers` feature is on and Docker answers, else a fresh private local
/// server (about a second to start).
pub async fn mysql() -> Result<TestServer, LockError> {
    // The image's init phase runs a server on port 0 first; only the final one reports port 3306.
    let spec = ContainerSpec::new("mariadb", "10.11", 3306)
        .env("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1")
        .env("MARIADB_DATABASE", "test")
        .ready_on("port: 3306")
        .persistent(true);
    provision(
        "mysql",
        Some(spec),
        |addr| format!("mysql://root@{addr}/test"),
        || async { MysqlServer::start_local().await.map(MysqlServer::into_test_server) },
    )
    .await
}

impl MysqlServer {
    /// `DLOCK_TEST_MYSQL_URL` if set, else a fresh private MariaDB.
    pub async fn start() -> Result<MysqlServer, LockError> {
        if let Ok(url) = std::env::var(ENV_URL) {
            if !url.trim().is_empty() {
                let provenance = format!("env {ENV_URL}");
                return Ok(MysqlServer { url, provenance, addr: None, program: None, control: None });
            }
        }
        Self::start_local().await
    }

    /// Always a fresh private MariaDB (ignores `DLOCK_TEST_MYSQL_URL`).
    pub async fn start_local() -> Result<MysqlServer, LockError> {
        let not_found = || {
            LockError::unavailable(
                "test",
                format!(
                    "MariaDB server binaries (mariadbd, mariadb-install-db) not found on PATH or in /usr/sbin; \
                     install them (apt-get install mariadb-server) or set {ENV_URL}=mysql://user@host/db"
                ),
            )
        };
        let server = find_binary("mariadbd", BIN_DIRS).ok_or_else(not_found)?;
        let install = find_binary("mariadb-install-db", BIN_DIRS)
            .or_else(|| find_binary("mysql_install_db", BIN_DIRS))
            .ok_or_else(not_found)?;
        let dir = tempfile::Builder::new()
            .prefix("dlock-mariadb-")
            .tempdir()
            .map_err(|e| LockError::unavailable_from("test", "cannot create a temp dir for mariadb", e))?;
        let data = dir.path().join("data");
        let data_s = data.to_string_lossy().into_owned();
        // mariadbd refuses to run as root unless told to; as anyone else it runs as itself.
        let user: Vec<String> = if is_root() { vec!["--user=root".into()] } else { Vec::new() };
        let tuning = ["--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M"];

        // Seen once on a loaded machine: the bootstrap failed without a clear reason. A second
        // try in a clean data dir is cheap; the error keeps both outputs.
        let mut failures = Vec::new();
        for _ in 0..2 {
            let _ = std::fs::remove_dir_all(&data);
            let mut init = tokio::process::Command::new(&install);
            init.arg("--no-defaults")
                .arg(format!("--datadir={data_s}"))
                .arg("--auth-root-authentication-method=normal")
                .arg("--skip-test-db")
                .args(&user)
                .args(tuning)
                .current_dir(dir.path());
            let out = init
                .output()
                .await
                .map_err(|e| LockError::unavailable_from("test", format!("cannot run {}", install.display()), e))?;
            if out.status.success() {
                failures.clear();
                break;
            }
            failures.push(format!(
                "{} failed ({}): {}{}",
                install.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if !failures.is_empty() {
            return Err(LockError::unavailable("test", failures.join("\n---\n")));
        }
        // A directory in the data dir is a database to MariaDB: `test`, as on the shared server.
        std::fs::create_dir_all(data.join("test"))
            .map_err(|e| LockError::unavailable_from("test", "cannot create the test database", e))?;

        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut args: Vec<String> = vec![
            "--no-defaults".into(),
            format!("--datadir={data_s}"),
            format!("--port={port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--socket={}", dir.path().join("mysqld.sock").display()),
            format!("--pid-file={}", dir.path().join("mysqld.pid").display()),
            "--innodb-flush-log-at-trx-commit=1".into(),
            "--innodb-flush-method=nosync".into(),
            "--skip-log-bin".into(),
            "--skip-name-resolve".into(),
            "--max-connections=200".into(),
        ];
        args.extend(user);
        args.extend(tuning.map(String::from));
        let provenance = format!("local binary {}", server.display());
        let program = Some(server.clone());
        let child = Arc::new(ChildServer::new(server, args, dir.path()));
        let local = Arc::new(LocalMysql { child, addr, _dir: dir });
        local.start_and_wait().await?;
        Ok(MysqlServer {
            url: format!("mysql://root@{addr}/test"),
            provenance,
            addr: Some(addr),
            program,
            control: Some(local),
        })
    }

    /// `mysql://root@127.0.0.1:<port>/test` (or the external URL).
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

impl LocalMysql {
    /// Starts `mariadbd` and waits until it listens (it opens the port only once InnoDB
    /// recovery is done).
    async fn start_and_wait(&self) -> Result<(), LockError> {
        let child = Arc::clone(&self.child);
        // Spawning reads the supervisor's first line: keep that off the async workers.
        tokio::task::spawn_blocking(move || child.start())
            .await
            .map_err(|e| LockError::unavailable("test", format!("mariadbd start task failed: {e}")))??;
        wait_for_port(self.addr, START_TIMEOUT).await.map_err(|e| {
            let log = std::fs::read_to_string(self.child.log_path()).unwrap_or_default();
            LockError::unavailable("test", format!("mariadbd did not start: {e}; its log:\n{log}"))
        })
    }
}

#[async_trait]
impl ServerControl for LocalMysql {
    async fn stop(&self) -> Result<(), LockError> {
        let child = Arc::clone(&self.child);
        // SIGKILL, then the supervisor reaps it: the data files are free for the next start.
        let _ = tokio::task::spawn_blocking(move || child.stop()).await;
        Ok(())
    }

    async fn start(&self) -> Result<(), LockError> {
        self.start_and_wait().await
    }

    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        let child = Arc::clone(&self.child);
        // `ChildServer::pause` runs `kill` and waits for it: off the async workers.
        let _ = tokio::task::spawn_blocking(move || child.pause(paused)).await;
        if paused {
            if let Some(pid) = self.child.pid() {
                wait_all_threads_stopped(pid).await?;
            }
        }
        Ok(())
    }

    fn persistent(&self) -> bool {
        true
    }
}

/// `kill -STOP` returns once the signal is queued; the kernel then stops the threads one by
/// one as they get a CPU. Until the last one stops, a connection thread can still answer a
/// query (seen on a busy 2-core machine): wait until every thread is stopped.
async fn wait_all_threads_stopped(pid: u32) -> Result<(), LockError> {
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let all_stopped = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks.filter_map(|t| t.ok()).all(|t| {
                    std::fs::read_to_string(t.path().join("stat")).ok().is_some_and(|stat| {
                        stat.rsplit_once(')')
                            .and_then(|(_, rest)| rest.split_whitespace().next())
                            .is_some_and(|state| state == "T" || state == "t")
                    })
                })
            })
            // Without /proc there is nothing to wait on.
            .unwrap_or(true);
        if all_stopped {
            return Ok(());
        }
        if tokio::time::Instant::now() >= end {
            return Err(LockError::unavailable("test", format!("mariadbd {pid} did not stop within 5 s of SIGSTOP")));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}
