//! `dlock run --name NAME [--ttl 30s] [--wait 0s|10s|forever] [--holder ID] -- CMD ARGS…`: runs a command while
//! holding a lock, the way `flock`, `consul lock` and `etcdctl lock` do, with the lease kept
//! renewed and the fencing token handed to the command.
//!
//! The command gets `DLOCK_FENCING_TOKEN`, `DLOCK_LOCK_NAME` and (with `--holder`) `DLOCK_HOLDER`
//! in its environment, and none of dlock's own `DLOCK_*` variables (`DLOCK_URL` holds the
//! backend's password): a command that needs the backend is given its URL by the caller. SIGINT and
//! SIGTERM sent to dlock are forwarded to it. When it ends, the lock is released and dlock exits
//! with its status (128 + N when a signal N ended it). When the lease is lost first, the command
//! gets SIGTERM, SIGKILL after `--grace`, and dlock exits 3. See [`crate::exit`] for the codes.

use std::time::Duration;

use clap::Args;
use dlock::{Holder, LockError, LockName, WaitPolicy};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{signal, SignalKind};

use crate::exit::{self, Exit};
use crate::redactor::Redactor;

/// Arguments of `dlock run`.
#[derive(Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    target: crate::target::Target,
    /// The lock name.
    #[arg(long)]
    name: String,
    /// Lease time (default: the configured ttl). The lease renews itself while the command runs.
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Option<Duration>,
    /// How long to wait for a busy lock: `0s` (fail at once with exit 1), a duration, or `forever`
    /// (default: the configured wait).
    #[arg(long, value_parser = parse_wait)]
    wait: Option<WaitPolicy>,
    /// Who is holding, shown by `dlock status`/`list`/`watch` (default: none).
    #[arg(long)]
    holder: Option<String>,
    /// How long the command has between SIGTERM and SIGKILL when the lease is lost.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    grace: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

fn parse_wait(s: &str) -> Result<WaitPolicy, String> {
    if s.eq_ignore_ascii_case("forever") {
        return Ok(WaitPolicy::Forever);
    }
    let d = humantime::parse_duration(s).map_err(|e| format!("{e}; use 0s, a duration like 10s, or forever"))?;
    Ok(if d.is_zero() { WaitPolicy::NoWait } else { WaitPolicy::For(d) })
}

/// Runs the command under the lock; the outcome is the process exit code.
pub(crate) async fn run(args: RunArgs, out: &Redactor) -> Exit {
    match run_inner(args, out).await {
        Ok(code) => code,
        Err(e) => {
            out.eprintln(&format!("dlock run: {e}"));
            exit::of_error(&e)
        }
    }
}

async fn run_inner(args: RunArgs, out: &Redactor) -> Result<Exit, LockError> {
    let config = args.target.load(out)?;
    let name = LockName::new(&args.name)?;
    let mut opts = config.acquire_options();
    if let Some(ttl) = args.ttl {
        opts = opts.ttl(ttl);
    }
    if let Some(wait) = args.wait {
        opts = opts.wait_policy(wait);
    }
    if let Some(holder) = &args.holder {
        opts = opts.holder(Holder::new(holder.as_str())?);
    }
    // Listen before the command exists, so a signal that arrives early is not lost.
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| LockError::backend("dlock", e))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| LockError::backend("dlock", e))?;
    let lock = dlock::connect_with(&config).await?;
    let lease = crate::waiting::acquire_saying(&*lock, &config, &name, &opts, out).await?;
    let (program, rest) = args.command.split_first().ok_or_else(|| LockError::config("no command to run"))?;
    let mut command = Command::new(program);
    command.args(rest);
    // dlock's own configuration stays with dlock: DLOCK_URL carries the backend's password, and
    // any other DLOCK_* variable may be a secret or name one. The command gets what it needs.
    for (key, _) in std::env::vars_os() {
        if key.as_encoded_bytes().starts_with(b"DLOCK_") {
            command.env_remove(key);
        }
    }
    command.env("DLOCK_FENCING_TOKEN", lease.token().get().to_string()).env("DLOCK_LOCK_NAME", name.as_str());
    if let Some(holder) = &args.holder {
        command.env("DLOCK_HOLDER", holder);
    }
    let spawned = command.kill_on_drop(true).spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            out.eprintln(&format!("dlock run: cannot start {program:?}: {e}"));
            let _ = lease.release().await;
            return Ok(if e.kind() == std::io::ErrorKind::NotFound { exit::NOT_FOUND } else { exit::NOT_EXECUTABLE });
        }
    };
    let pid = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw);
    let lost = lease.lost();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|e| LockError::backend("dlock", e))?,
            _ = sigint.recv() => forward(pid, Signal::SIGINT),
            _ = sigterm.recv() => forward(pid, Signal::SIGTERM),
            _ = lost.fired() => {
                out.eprintln(&format!(
                    "dlock run: lease on {:?} lost ({}); stopping the command",
                    name.as_str(),
                    lost.reason().unwrap_or("unknown")
                ));
                forward(pid, Signal::SIGTERM);
                if tokio::time::timeout(args.grace, child.wait()).await.is_err() {
                    out.eprintln(&format!("dlock run: the command outlived its {:?} grace; killing it", args.grace));
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
                return Ok(exit::LOST);
            }
        }
    };
    match lease.release().await {
        Ok(()) => Ok(exit::of_status(status)),
        Err(e @ LockError::Lost { .. }) => {
            out.eprintln(&format!("dlock run: {e}: the command may have finished without the lock"));
            Ok(exit::LOST)
        }
        Err(e) => {
            // The command ran under a valid lease; the lock frees itself when its ttl ends.
            out.eprintln(&format!("dlock run: release failed: {e}"));
            Ok(exit::of_status(status))
        }
    }
}

fn forward(pid: Option<Pid>, sig: Signal) {
    if let Some(pid) = pid {
        let _ = kill(pid, sig);
    }
}
