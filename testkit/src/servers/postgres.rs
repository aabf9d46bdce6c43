//! Local postgres servers for tests (see servers/mod.rs for the provisioning order).
//!
//! [`PostgresServer::start`] uses `DLOCK_TEST_POSTGRES_URL` when it is set (then there is no
//! server control), else a `postgres:16` container (feature `containers` with a Docker engine),
//! and otherwise runs a private PostgreSQL (`initdb` + `postgres` from
//! `/usr/lib/postgresql/*/bin` or `PATH`) on a free port of 127.0.0.1 with its data directory in
//! a temp dir. PostgreSQL refuses to run as root, so under root both run as the `postgres` user
//! through `setpriv` (which execs, so the PID we signal is the postmaster's own).
//!
//! The server keeps `fsync=off` (fast) but `synchronous_commit=on`: a commit is in the kernel
//! before it is acknowledged, so what a client saw committed survives `stop` (SIGKILL) and
//! `start` — a process crash, which is what the restart cases play. `stop` and `pause` act on
//! the postmaster **and its backends**: a SIGSTOP of the postmaster alone would leave open
//! connections answering.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_core::LockError;

use super::local::LocalServer;
use crate::process::{find_binary, free_addr, is_root, server_dir, ChildServer};
use crate::servers::{provision, ContainerSpec, TestServer};

/// The environment variable naming an existing PostgreSQL database to test against.
pub const ENV_URL: &str = "DLOCK_TEST_POSTGRES_URL";

/// How long a (re)started server may take to accept queries, crash recovery included.
const START_TIMEOUT: Duration = Duration::from_secs(30);

server_newtype!(
    /// A PostgreSQL server for one test: a local process or container the test owns, or an
    /// external URL. It is a [`TestServer`] (`url()`, `addr()`, `control()`, `provenance()`).
    PostgresServer,
    postgres
);

impl PostgresServer {
    /// `DLOCK_TEST_POSTGRES_URL` if set, else the official `postgres` image where the
    /// `containers` feature is on and Docker answers, else a fresh private local server (about
    /// a second to start).
    pub async fn start() -> Result<PostgresServer, LockError> {
        // The image's init phase runs a socket-only server first; only the final one listens on TCP.
        let spec = ContainerSpec::new("postgres", "16", 5432)
            .env("POSTGRES_HOST_AUTH_METHOD", "trust")
            .ready_on("listening on IPv4 address")
            .persistent(true);
        let local = || async { Self::start_local().await.map(Self::into_test_server) };
        let server = provision("postgres", Some(spec), |addr| format!("postgres://postgres@{addr}/postgres"), local);
        Ok(PostgresServer(server.await?))
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

        let dir = server_dir("postgres")?;
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

        let addr = free_addr()?;
        let port_s = addr.port().to_string();
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
        let child = ChildServer::new(prog, args, dir.path());
        let mut local = LocalServer::persistent("postgres", child, addr, START_TIMEOUT).process_tree();
        // Ready = `pg_isready` says so (TCP accepts earlier, during crash recovery).
        if let Some(isready) = pg_isready {
            local = local.ready_when(move |addr| {
                let status = tokio::process::Command::new(&isready)
                    .args(["-q", "-h", "127.0.0.1", "-p", &addr.port().to_string(), "-t", "1"])
                    .kill_on_drop(true)
                    .status();
                async move { status.await.is_ok_and(|s| s.success()) }
            });
        }
        let url = format!("postgres://postgres@{addr}/postgres");
        Ok(PostgresServer(local.serve(&postgres, url, dir).await?))
    }
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
