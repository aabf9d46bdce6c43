//! Local server processes for tests: started on free ports in temp dirs, stopped by PID, and
//! never left behind — each runs under a tiny shell supervisor that kills it when the test
//! process goes away (its stdin pipe closes), even after a panic or SIGKILL of the test.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lock_core::LockError;

/// Ports handed to servers come from below Linux's ephemeral range (32768–60999).
///
/// A port the OS picks for `bind(0)` is free only until it is closed: the next outgoing
/// connection of any process may take it as its source port before the server binds it. CI
/// lost a Redis Cluster node so ("nothing listens on 127.0.0.1:42989"): under load the tests'
/// own connections took the port. Ports below the range are never chosen for outgoing
/// connections; a random pick among them, checked free and never handed out twice by this
/// process, leaves only two test processes picking the same port in the same instant.
const SERVER_PORTS: std::ops::Range<u16> = 20_000..32_768;

/// A free TCP port on 127.0.0.1 for a server to bind (see `SERVER_PORTS`).
pub fn free_port() -> Result<u16, LockError> {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let span = u64::from(SERVER_PORTS.end - SERVER_PORTS.start);
    for _ in 0..1000 {
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = SERVER_PORTS.start + (mix(seq) % span) as u16;
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return Ok(port);
        }
    }
    // Every pick was taken: fall back to the OS's choice rather than fail the test.
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| LockError::unavailable_from("test", "no free port", e))?;
    l.local_addr().map(|a| a.port()).map_err(|e| LockError::unavailable_from("test", "no free port", e))
}

/// A pseudo-random number from this process, the time and `seq` (splitmix64): test processes
/// started together must not walk the same ports.
fn mix(seq: u64) -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut z = nanos ^ (u64::from(std::process::id()) << 32) ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A free TCP port of 127.0.0.1, as an address.
pub fn free_addr() -> Result<SocketAddr, LockError> {
    Ok(SocketAddr::from(([127, 0, 0, 1], free_port()?)))
}

/// A fresh temp dir (`dlock-<server>-…`) for a local server's data and configuration, removed
/// when dropped.
pub fn server_dir(server: &str) -> Result<tempfile::TempDir, LockError> {
    tempfile::Builder::new()
        .prefix(&format!("dlock-{server}-"))
        .tempdir()
        .map_err(|e| LockError::unavailable_from("test", format!("cannot create a temp dir for {server}"), e))
}

/// Finds an executable on `PATH` or in one of `extra` directories.
pub fn find_binary(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(extra.iter().map(PathBuf::from)).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Waits until something accepts TCP connections on `addr`.
pub async fn wait_for_port(addr: SocketAddr, within: Duration) -> Result<(), LockError> {
    let end = Instant::now() + within;
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(LockError::unavailable("test", format!("nothing listens on {addr} after {within:?}")));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A server process (one program with fixed arguments) that can be stopped, paused and
/// started again with the same arguments.
pub struct ChildServer {
    program: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    dir: PathBuf,
    log: PathBuf,
    child: Mutex<Option<(Child, u32)>>,
}

impl ChildServer {
    /// Describes a server; call [`ChildServer::start`] to run it. `dir` is its working
    /// directory; its output goes to `dir/server.log`.
    pub fn new(program: impl Into<PathBuf>, args: Vec<String>, dir: &Path) -> Self {
        ChildServer {
            program: program.into(),
            args,
            envs: Vec::new(),
            dir: dir.to_path_buf(),
            log: dir.join("server.log"),
            child: Mutex::new(None),
        }
    }

    /// Adds an environment variable for the server.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Starts the process (no-op if running).
    pub fn start(&self) -> Result<(), LockError> {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| LockError::unavailable_from("test", "cannot open server log", e))?;
        let log2 = log.try_clone().map_err(|e| LockError::unavailable_from("test", "cannot open server log", e))?;
        // The supervisor starts the server, prints its PID, and kills it once stdin closes.
        let script = r#"prog="$1"; shift; "$prog" "$@" </dev/null & pid=$!; echo "$pid" >&2; cat >/dev/null; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null"#;
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script).arg("dlock-supervisor").arg(&self.program).args(&self.args);
        cmd.current_dir(&self.dir).stdin(Stdio::piped()).stdout(log).stderr(Stdio::piped());
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| LockError::unavailable_from("test", format!("cannot start {}", self.program.display()), e))?;
        let pid = {
            use std::io::BufRead;
            let stderr = child.stderr.take().ok_or_else(|| LockError::unavailable("test", "no supervisor stderr"))?;
            let mut reader = std::io::BufReader::new(stderr);
            let mut line = String::new();
            reader.read_line(&mut line).map_err(|e| LockError::unavailable_from("test", "supervisor failed", e))?;
            // Keep forwarding the server's stderr to the log.
            std::thread::spawn(move || {
                let mut out = log2;
                let _ = std::io::copy(&mut reader, &mut out);
            });
            line.trim().parse::<u32>().map_err(|_| LockError::unavailable("test", "supervisor printed no PID"))?
        };
        *guard = Some((child, pid));
        Ok(())
    }

    /// The server's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(_, p)| *p)
    }

    /// Kills the server (SIGKILL by PID) and waits for it to go.
    pub fn stop(&self) {
        let taken = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((mut child, pid)) = taken {
            signal(pid, "KILL");
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }

    /// Pauses (SIGSTOP) or resumes (SIGCONT) the server.
    pub fn pause(&self, paused: bool) {
        if let Some(pid) = self.pid() {
            signal(pid, if paused { "STOP" } else { "CONT" });
            if paused {
                wait_all_threads_stopped(pid, Duration::from_secs(2));
            }
        }
    }
}

/// `kill -STOP` returns before every thread of a multi-threaded server has stopped (MariaDB
/// answered queries "while paused" under load): wait until each task in `/proc/<pid>/task`
/// shows the stopped state, so a pause is a pause when this returns.
fn wait_all_threads_stopped(pid: u32, within: Duration) {
    let end = Instant::now() + within;
    while Instant::now() < end && !threads_stopped(pid) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether every thread of `pid` is stopped (`T`/`t` in `/proc/<pid>/task/*/stat`). A process
/// that is gone, or a system without `/proc`, counts as stopped: there is nothing to wait on.
pub(crate) fn threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name, which may contain spaces.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state == "T" || state == "t")
    })
}

/// Sends `sig` (`KILL`, `STOP`, `CONT`) to `pid` with `kill`; blocks until `kill` returns.
pub(crate) fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status();
}

/// Whether this process runs as root (effective uid 0): PostgreSQL refuses to, MariaDB must
/// be told to.
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// The `stat` fields after the command name: state, ppid, … (`None` when the process is gone).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().map(str::to_owned).collect())
}

/// A live, non-zombie process. Without `/proc` (not Linux) every process counts as alive.
pub(crate) fn pid_alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    stat_fields(pid).and_then(|f| f.into_iter().next()).is_some_and(|state| state != "Z")
}

/// Direct children of `pid` (e.g. the postmaster's backends and workers), from `/proc`.
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let parent = pid.to_string();
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| stat_fields(*p).and_then(|f| f.into_iter().nth(1)).is_some_and(|ppid| ppid == parent))
        .collect()
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.stop();
    }
}
