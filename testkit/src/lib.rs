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
//!
//! Beside the servers, what the backends' fixtures share: [`unique_suffix`] for a fixture's
//! root or prefix, [`behind_proxy`], [`linked_client`] and [`linked_group_client`] for clients
//! behind fault proxies, [`certs`] for the TLS tests' throwaway certificates, and [`planted`]
//! for the hostile PostgreSQL `search_path` of the search-path tests.

pub mod certs;
pub mod planted;
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

/// A suffix no other fixture of this or a concurrent test process uses (the time in ns and the
/// process id, in hex): the root or key prefix under which one fixture's locks live.
pub fn unique_suffix() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    format!("{nanos:x}-{}", std::process::id())
}

/// A client that reaches the server at `server` (`None`: an external server whose address is
/// unknown, an error) through a new fault proxy: `connect` is given the proxy's address.
pub async fn behind_proxy<T, F, Fut>(
    server: Option<std::net::SocketAddr>,
    connect: F,
) -> Result<(T, std::sync::Arc<lock_conformance::proxy::FaultProxy>), lock_core::LockError>
where
    F: FnOnce(std::net::SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Result<T, lock_core::LockError>>,
{
    let upstream =
        server.ok_or_else(|| lock_core::LockError::config("the test server's address is unknown; no fault proxy"))?;
    let proxy = lock_conformance::proxy::FaultProxy::start(upstream).await?;
    let client = connect(proxy.local_addr()).await?;
    Ok((client, proxy))
}

/// A fixture's [`linked_client`](lock_conformance::Fixture::linked_client) over
/// [`behind_proxy`]: `None` when the server's address is unknown (an external server).
pub async fn linked_client<T, F, Fut>(
    server: Option<std::net::SocketAddr>,
    connect: F,
) -> Result<Option<lock_conformance::LinkedClient>, lock_core::LockError>
where
    T: lock_core::DistributedLock,
    F: FnOnce(std::net::SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Result<T, lock_core::LockError>>,
{
    if server.is_none() {
        return Ok(None);
    }
    let (client, link) = behind_proxy(server, connect).await?;
    Ok(Some(lock_conformance::LinkedClient { client: std::sync::Arc::new(client), link }))
}

/// A fixture's [`linked_client`](lock_conformance::Fixture::linked_client) for a deployment of
/// several `members`: a fault proxy in front of each member's client address, and a client that
/// `connect` makes from the proxies' addresses (`host:port,host:port,…`). Its link is the whole
/// group: a partition cuts the client off every member at once.
pub async fn linked_group_client<T, F, Fut>(
    members: &[std::net::SocketAddr],
    connect: F,
) -> Result<Option<lock_conformance::LinkedClient>, lock_core::LockError>
where
    T: lock_core::DistributedLock,
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, lock_core::LockError>>,
{
    let group = lock_conformance::proxy::ProxyGroup::start(members).await?;
    let hosts: Vec<String> = group.local_addrs().iter().map(|a| a.to_string()).collect();
    let client = connect(hosts.join(",")).await?;
    Ok(Some(lock_conformance::LinkedClient { client: std::sync::Arc::new(client), link: std::sync::Arc::new(group) }))
}
