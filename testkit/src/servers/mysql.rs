//! Local mysql servers for tests (see servers/mod.rs for the provisioning order).
//!
//! [`MysqlServer::start`] uses `DLOCK_TEST_MYSQL_URL` when it is set (then there is no server
//! control), else a `mariadb:10.11` container (feature `containers` with a Docker engine), and
//! otherwise runs a private MariaDB (`mariadb-install-db` + `mariadbd`) on a free
//! port of 127.0.0.1 with its data directory in a temp dir, `root` without a password and a
//! `test` database. Only MariaDB is provisioned locally; for Oracle MySQL set the URL.
//!
//! InnoDB writes its log at every commit (`innodb_flush_log_at_trx_commit=1`, which lock-sql
//! checks before it declares durable fencing) but skips the fsync (`innodb_flush_method=nosync`:
//! fast), so what a client saw committed survives `stop` (SIGKILL) and `start` — a process
//! crash, which is what the restart cases play.

use std::time::Duration;

use lock_core::LockError;

use super::local::LocalServer;
use crate::process::{find_binary, free_addr, is_root, server_dir, ChildServer};
use crate::servers::{provision, ContainerSpec, TestServer};

/// The environment variable naming an existing MySQL/MariaDB database to test against.
pub const ENV_URL: &str = "DLOCK_TEST_MYSQL_URL";

/// How long a (re)started server may take to accept connections, crash recovery included.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Where MariaDB's binaries live besides `PATH`.
const BIN_DIRS: &[&str] = &["/usr/sbin", "/usr/bin", "/usr/local/mysql/bin", "/usr/local/bin", "/opt/homebrew/bin"];

server_newtype!(
    /// A MySQL/MariaDB server for one test: a local process or container the test owns, or an
    /// external URL. It is a [`TestServer`] (`url()`, `addr()`, `control()`, `provenance()`).
    MysqlServer,
    mysql
);

impl MysqlServer {
    /// `DLOCK_TEST_MYSQL_URL` if set, else the official `mariadb` image where the `containers`
    /// feature is on and Docker answers, else a fresh private local MariaDB (about a second to
    /// start).
    pub async fn start() -> Result<MysqlServer, LockError> {
        // The image's init phase runs a server on port 0 first; only the final one reports port 3306.
        let spec = ContainerSpec::new("mariadb", "10.11", 3306)
            .env("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1")
            .env("MARIADB_DATABASE", "test")
            .ready_on("port: 3306")
            .persistent(true);
        let local = || async { Self::start_local().await.map(Self::into_test_server) };
        Ok(MysqlServer(provision("mysql", Some(spec), |addr| format!("mysql://root@{addr}/test"), local).await?))
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
        let dir = server_dir("mariadb")?;
        let data = dir.path().join("data");
        let data_s = data.to_string_lossy().into_owned();
        // mariadbd refuses to run as root unless told to; as anyone else it runs as itself.
        let user: Vec<String> = if is_root() { vec!["--user=root".into()] } else { Vec::new() };
        let tuning = ["--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M"];
        // Its own temp dir: at start mariadbd deletes every `#sql*` file in its tmpdir, and with
        // the default /tmp those include the internal temp tables of the shared server's queries
        // running meanwhile (seen in CI: "Error on delete of '/tmp/#sql-temptable-….MAI'").
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp)
            .map_err(|e| LockError::unavailable_from("test", "cannot create the server's temp dir", e))?;
        let tmpdir = format!("--tmpdir={}", tmp.display());

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
                .arg(&tmpdir)
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

        let addr = free_addr()?;
        let mut args: Vec<String> = vec![
            "--no-defaults".into(),
            format!("--datadir={data_s}"),
            format!("--port={}", addr.port()),
            "--bind-address=127.0.0.1".into(),
            format!("--socket={}", dir.path().join("mysqld.sock").display()),
            format!("--pid-file={}", dir.path().join("mysqld.pid").display()),
            "--innodb-flush-log-at-trx-commit=1".into(),
            "--innodb-flush-method=nosync".into(),
            "--skip-log-bin".into(),
            tmpdir,
            "--skip-name-resolve".into(),
            "--max-connections=200".into(),
        ];
        args.extend(user);
        args.extend(tuning.map(String::from));
        // mariadbd opens the port only once InnoDB recovery is done.
        let child = ChildServer::new(&server, args, dir.path());
        let local = LocalServer::persistent("mariadbd", child, addr, START_TIMEOUT);
        Ok(MysqlServer(local.serve(&server, format!("mysql://root@{addr}/test"), dir).await?))
    }
}
