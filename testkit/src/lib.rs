//! # dlock-testkit
//!
//! Test servers for dlock's own tests (not published; every crate of the workspace takes it as a
//! dev-dependency). The conformance suite itself — the cases, the runner, the fault proxy and
//! the memory fixture, what a third party needs to certify a backend — stays in
//! `lock-conformance`; this crate only provisions the servers the bundled backends are certified
//! against.
//!
//! [`servers::provision`] gets a fresh server from, in order:
//!
//! 1. `DLOCK_TEST_<BACKEND>_URL` ([`servers::env_var`]): an existing server, used as it is
//!    (no server control, so server fault cases are then `not_applicable`);
//! 2. a container from an official image, when this crate is built with the `containers`
//!    feature and `docker info` answers;
//! 3. a local server binary on a free port of 127.0.0.1 in a temp dir, run as a
//!    [`servers::local::LocalServer`] — the one shape every local server has: a [`process::ChildServer`]
//!    (stopped by PID, never left behind), a readiness check, and stop/start/pause as a
//!    [`ServerControl`].
//!
//! It prints which one it used. The servers: [`servers::redis`], [`servers::postgres`],
//! [`servers::mysql`] (MariaDB), [`servers::zookeeper`], and the deployments
//! [`servers::redis_sentinel`] and [`servers::zk_ensemble`]. To run against Docker:
//!
//! ```text
//! docker info                      # must answer
//! cargo nextest run -p lock-redis --features dlock-testkit/containers
//! ```

pub mod process;
pub mod servers;

pub use lock_conformance::ServerControl;

/// Runs `connect` until it answers anything but `Unavailable`, for up to `within`: how an
/// application connects to a deployment that may be in the middle of a failover or an election
/// (a conformance case that starts right after a node fault meets one).
pub async fn retry_unavailable<T, F, Fut>(
    within: std::time::Duration,
    mut connect: F,
) -> Result<T, lock_core::LockError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, lock_core::LockError>>,
{
    let end = tokio::time::Instant::now() + within;
    loop {
        match connect().await {
            Err(lock_core::LockError::Unavailable { .. }) if tokio::time::Instant::now() < end => {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await
            }
            r => return r,
        }
    }
}
