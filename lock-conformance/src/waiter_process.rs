//! A waiter queued on a lock from a process of its own, which the suite kills with SIGKILL
//! (case `queued_head_killed`, through [`Fixture::queued_waiter`](crate::Fixture::queued_waiter)):
//! a real process death closes its connections and runs none of the client's clean-up, what no
//! in-process client can show. A test binary serves such waiters by re-running itself
//! (`current_exe`) on one ignored test, [`waiter_child_test!`](crate::waiter_child_test), that
//! connects from a target string the fixture chose and waits for the lock.

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName, WaitPolicy};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// The test every serving binary defines (by [`waiter_child_test!`](crate::waiter_child_test)).
pub const CHILD_TEST: &str = "conformance_waiter_child";

const ENV_TARGET: &str = "DLOCK_CONFORMANCE_CHILD_TARGET";
const ENV_NAME: &str = "DLOCK_CONFORMANCE_CHILD_NAME";
const ENV_TTL_MS: &str = "DLOCK_CONFORMANCE_CHILD_TTL_MS";
const ENV_WAIT_MS: &str = "DLOCK_CONFORMANCE_CHILD_WAIT_MS";
const ENV_REQUEST_MS: &str = "DLOCK_CONFORMANCE_CHILD_REQUEST_MS";

/// What the child prints once connected, right before its `acquire`.
const READY: &str = "dlock-conformance-child: waiting";
/// What it prints if it got the lock (it then holds it until killed).
const ACQUIRED: &str = "dlock-conformance-child: acquired";

/// How long a child may take to start and connect: a test binary on a loaded machine.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A waiter that the fixture queued somewhere the suite can kill it.
#[async_trait]
pub trait QueuedWaiter: Send + 'static {
    /// Whether it got the lock or ended by itself so far (with what it said), without waiting.
    async fn finished(&mut self) -> Option<String>;
    /// Kills it with no clean-up of its own running (SIGKILL), and returns once it is gone.
    async fn kill(&mut self) -> Result<(), LockError>;
}

/// A [`QueuedWaiter`] in a child process: this test binary re-run on [`CHILD_TEST`].
pub struct ChildWaiter {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ChildWaiter {
    /// Starts the child, which connects through `target` (the string the binary's
    /// [`waiter_child_test!`](crate::waiter_child_test) understands) and waits for `name` with
    /// `opts`; returns once it is connected and about to make its first attempt.
    pub async fn spawn(target: &str, name: &LockName, opts: &AcquireOptions) -> Result<ChildWaiter, LockError> {
        let failed = |what: &str, e: std::io::Error| LockError::unavailable_from("conformance", what.to_owned(), e);
        let exe = std::env::current_exe().map_err(|e| failed("no current executable", e))?;
        let wait_ms = match opts.wait {
            WaitPolicy::NoWait => 0,
            WaitPolicy::For(w) => w.as_millis(),
            // Forever, and whatever a later version adds: as long as a test may take.
            _ => u128::from(u32::MAX),
        };
        let mut child = tokio::process::Command::new(exe)
            .args(["--exact", CHILD_TEST, "--ignored", "--nocapture", "--test-threads=1"])
            .env(ENV_TARGET, target)
            .env(ENV_NAME, name.as_str())
            .env(ENV_TTL_MS, opts.ttl.as_millis().to_string())
            .env(ENV_WAIT_MS, wait_ms.to_string())
            .env(ENV_REQUEST_MS, opts.request_timeout.as_millis().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed("cannot start the waiter process", e))?;
        let Some(out) = child.stdout.take() else {
            return Err(LockError::unavailable("conformance", "the waiter process has no stdout"));
        };
        let mut waiter = ChildWaiter { child, lines: BufReader::new(out).lines() };
        let ready = tokio::time::timeout(START_LIMIT, waiter.next_line_with("dlock-conformance-child:")).await;
        match ready {
            Ok(Some(line)) if line == READY => Ok(waiter),
            Ok(Some(line)) => Err(LockError::unavailable("conformance", format!("the waiter process said {line:?}"))),
            Ok(None) => Err(LockError::unavailable(
                "conformance",
                format!("the waiter process ended before it waited: does this test binary define {CHILD_TEST}?"),
            )),
            Err(_) => Err(LockError::unavailable("conformance", "the waiter process did not start in 30 s")),
        }
    }

    /// The next line of the child's output that starts with `prefix`; `None` at its end.
    async fn next_line_with(&mut self, prefix: &str) -> Option<String> {
        while let Ok(Some(line)) = self.lines.next_line().await {
            if let Some(at) = line.find(prefix) {
                return Some(line[at..].to_owned());
            }
        }
        None
    }
}

#[async_trait]
impl QueuedWaiter for ChildWaiter {
    async fn finished(&mut self) -> Option<String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(format!("the waiter process ended by itself ({status})"));
        }
        // A line already written is read at once; none yet means still waiting.
        match tokio::time::timeout(Duration::from_millis(5), self.next_line_with(ACQUIRED)).await {
            Ok(Some(line)) => Some(line),
            _ => None,
        }
    }

    async fn kill(&mut self) -> Result<(), LockError> {
        let failed = |e: std::io::Error| LockError::unavailable_from("conformance", "cannot kill the waiter", e);
        self.child.start_kill().map_err(failed)?;
        match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(r) => r.map(drop).map_err(failed),
            Err(_) => Err(LockError::unavailable("conformance", "the killed waiter process did not end in 10 s")),
        }
    }
}

/// The body of [`CHILD_TEST`] (what [`waiter_child_test!`](crate::waiter_child_test) calls):
/// when run as a child waiter, connects with `connect(target)`, says it waits, and waits for
/// the lock (holding it, if it gets it, until killed); run as an ordinary test it does nothing.
pub fn serve_waiter<F, Fut>(connect: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<Arc<dyn DistributedLock>, LockError>>,
{
    let Ok(target) = std::env::var(ENV_TARGET) else { return };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return say(&format!("dlock-conformance-child: no runtime: {e}")),
    };
    rt.block_on(async move {
        if let Err(e) = wait_as_child(connect(target)).await {
            say(&format!("dlock-conformance-child: failed: {e}"));
        }
    });
}

/// One line to the parent (a closed pipe is ignored: the parent is gone, or killing us).
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn wait_as_child(
    client: impl Future<Output = Result<Arc<dyn DistributedLock>, LockError>>,
) -> Result<(), LockError> {
    let ms = |var: &str| -> Result<Duration, LockError> {
        let raw = std::env::var(var).map_err(|_| LockError::config(format!("{var} is not set")))?;
        raw.parse().map(Duration::from_millis).map_err(|_| LockError::config(format!("{var}={raw:?}")))
    };
    let name = LockName::new(std::env::var(ENV_NAME).map_err(|_| LockError::config(format!("{ENV_NAME} unset")))?)?;
    let opts = AcquireOptions::new(ms(ENV_TTL_MS)?).wait(ms(ENV_WAIT_MS)?).request_timeout(ms(ENV_REQUEST_MS)?);
    let client = client.await?;
    say(READY);
    let lease = client.acquire(&name, &opts).await?;
    say(&format!("{ACQUIRED} with token {}", lease.token()));
    // Holds it until killed; the parent's case fails meanwhile.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

/// Defines the ignored test [`CHILD_TEST`] that serves [`ChildWaiter`]s of this test binary:
/// `|target| async move { … }` makes a client from the target string the fixture passes to
/// [`ChildWaiter::spawn`] (a URL, plus whatever else the fixture's clients need).
///
/// ```ignore
/// lock_conformance::waiter_child_test!(|target| async move {
///     Ok(std::sync::Arc::new(my_backend::connect(&target).await?) as _)
/// });
/// ```
#[macro_export]
macro_rules! waiter_child_test {
    ($connect:expr) => {
        /// The child process of the conformance case `queued_head_killed` (does nothing when
        /// run on its own).
        #[test]
        #[ignore = "child process of the conformance suite"]
        fn conformance_waiter_child() {
            $crate::waiter_process::serve_waiter($connect);
        }
    };
}
