//! Local server processes for tests: started on free ports in temp dirs, stopped by PID, and
//! never left behind — each runs under a tiny shell supervisor that kills it when the test
//! process goes away (its stdin pipe closes), even after a panic or SIGKILL of the test.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lock_core::LockError;

/// Asks the OS for a free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16, LockError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| LockError::unavailable_from("test", "no free port", e))?;
    l.local_addr().map(|a| a.port()).map_err(|e| LockError::unavailable_from("test", "no free port", e))
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
    let all_stopped = || -> Option<bool> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let mut any = false;
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // The state follows the parenthesised command name, which may contain spaces.
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next())?;
            if state != "T" && state != "t" {
                return Some(false);
            }
            any = true;
        }
        Some(any)
    };
    while Instant::now() < end {
        match all_stopped() {
            Some(true) | None => return,
            Some(false) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status();
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.stop();
    }
}
