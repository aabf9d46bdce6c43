//! The ZooKeeper test fixture: a fresh standalone server per test process (or
//! `DLOCK_TEST_ZK_URL`), a unique root per fixture, short sessions, and clients behind a fault
//! proxy for the network cases.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dlock_testkit::servers::zookeeper::{ZkServer, TICK};
use lock_conformance::proxy::FaultProxy;
use lock_conformance::{ClientLink, LinkedClient, ServerControl};
use lock_core::AcquireOptions;
use lock_core::{Lease, LockError, LockName, LostSignal};
use lock_zk::{ZkLock, ZkOptions};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

/// The session timeout of test clients: short, so that expiry cases run in seconds.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(2);

pub struct ZkFixture {
    pub server: ZkServer,
    pub root: String,
    pub options: ZkOptions,
}

impl ZkFixture {
    pub async fn start() -> Result<ZkFixture, LockError> {
        Self::with_session_timeout(SESSION_TIMEOUT).await
    }

    pub async fn with_session_timeout(session_timeout: Duration) -> Result<ZkFixture, LockError> {
        let server = ZkServer::start().await?;
        Ok(ZkFixture { server, root: uuid_like_root(), options: test_options(session_timeout) })
    }

    pub fn url(&self) -> String {
        self.server.url_with_root(&self.root)
    }

    pub async fn connect(&self) -> Result<ZkLock, LockError> {
        lock_zk::connect(&self.url(), self.options.clone()).await
    }

    /// A client whose traffic goes through a fault proxy.
    pub async fn connect_linked(&self) -> Result<(ZkLock, Arc<FaultProxy>), LockError> {
        dlock_testkit::behind_proxy(self.server.addr(), |a| self.connect_at(a)).await
    }

    /// A client of the server at `addr` (a proxy in front of it), under this fixture's root.
    async fn connect_at(&self, addr: SocketAddr) -> Result<ZkLock, LockError> {
        lock_zk::connect(&format!("zk://{addr}/{}", self.root.trim_start_matches('/')), self.options.clone()).await
    }

    /// A raw zookeeper-client session within 10 s, for the operator's actions of the fixture;
    /// `None` when the server's address is unknown (an external server).
    async fn raw_session(&self) -> Result<Option<zookeeper_client::Client>, LockError> {
        let Some(addr) = self.server.addr() else { return Ok(None) };
        Ok(Some(raw_session(&addr.to_string()).await?))
    }

    /// A raw zookeeper-client session (for looking at nodes).
    pub async fn raw(&self) -> zookeeper_client::Client {
        let addr = self.server.addr().expect("local server");
        zookeeper_client::Client::connect(&addr.to_string()).await.expect("raw session")
    }
}

/// A raw zookeeper-client session to `hosts` (`h1:p1,h2:p2,…`) within 10 s, for the operator's
/// actions of a fixture.
pub async fn raw_session(hosts: &str) -> Result<zookeeper_client::Client, LockError> {
    tokio::time::timeout(Duration::from_secs(10), zookeeper_client::Client::connect(hosts))
        .await
        .map_err(|_| LockError::unavailable("test", "no raw ZooKeeper session in 10s"))?
        .map_err(zk)
}

/// What an operator's `delete` does: removes the holder's node (the lowest sequence) of lock
/// `name` under `root`.
pub async fn delete_holder_node(raw: &zookeeper_client::Client, root: &str, name: &LockName) -> Result<(), LockError> {
    let parent = format!("{root}/{}", name.escaped());
    let mut children = raw.list_children(&parent).await.map_err(zk)?;
    children.sort_by_key(|c| c.rsplit('-').next().and_then(|s| s.parse::<i64>().ok()));
    let Some(holder) = children.first() else {
        return Err(LockError::config(format!("no lock node under {parent} to delete")));
    };
    raw.delete(&format!("{parent}/{holder}"), None).await.map_err(zk)
}

/// ZooKeeper's own collection: the name's container parent, empty once released, is removed
/// (here at once, as the server does after its container check); tokens are zxids.
pub async fn collect_container(raw: &zookeeper_client::Client, root: &str, name: &LockName) -> Result<(), LockError> {
    match raw.delete(&format!("{root}/{}", name.escaped()), None).await {
        Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
        Err(e) => Err(zk(e)),
    }
}

pub fn uuid_like_root() -> String {
    format!("/dlock-test/{}", dlock_testkit::unique_suffix())
}

fn zk(e: zookeeper_client::Error) -> LockError {
    LockError::backend("zookeeper", e)
}

lock_conformance::impl_fixture! {
    ZkFixture, backend: "zookeeper", |f| {
        every_kind: f.connect().await?,
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        dlock_testkit::linked_client(self.server.addr(), |a| self.connect_at(a)).await
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        self.server.control()
    }

    fn base_ttl(&self) -> Duration {
        lease_bound(self.options.session_timeout)
    }

    fn expiry_bound(&self) -> Duration {
        // The server expires a silent session after its timeout (rounded up to a tick).
        self.options.session_timeout + Duration::from_millis(400)
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        let Some(raw) = self.raw_session().await? else { return Ok(false) };
        delete_holder_node(&raw, &self.root, name).await?;
        Ok(true)
    }

    async fn collect_idle(&self, name: &LockName) -> Result<bool, LockError> {
        let Some(raw) = self.raw_session().await? else { return Ok(false) };
        collect_container(&raw, &self.root, name).await?;
        Ok(true)
    }

    fn provenance(&self) -> String {
        self.server.provenance().to_owned()
    }

    /// This test binary re-run as a child (`conformance_waiter_child`, which `zookeeper.rs`
    /// defines), on a session of the fixture's timeout: killed, its node lives until the server
    /// expires that session.
    async fn queued_waiter(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<Box<dyn lock_conformance::waiter_process::QueuedWaiter>>, LockError> {
        let target = format!("{} {}", self.options.session_timeout.as_millis(), self.url());
        let child = lock_conformance::waiter_process::ChildWaiter::spawn(&target, name, opts).await?;
        Ok(Some(Box::new(child)))
    }
}

/// The client of a `ZkFixture`'s child waiter: `<session timeout ms> <url>`.
pub async fn connect_child(target: String) -> Result<Arc<dyn lock_core::DistributedLock>, LockError> {
    let bad = || LockError::config(format!("bad child target {target:?}"));
    let (session_ms, url) = target.split_once(' ').ok_or_else(bad)?;
    let session_timeout = Duration::from_millis(session_ms.parse().map_err(|_| bad())?);
    Ok(Arc::new(lock_zk::connect(url, test_options(session_timeout)).await?))
}

/// The options of every test client: sessions of `session_timeout`, and the test servers' tick
/// (a lease's validity allows for half of it).
pub fn test_options(session_timeout: Duration) -> ZkOptions {
    ZkOptions {
        session_timeout,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(3),
        tick_time: TICK,
        ..ZkOptions::default()
    }
}

// ---- Helpers of the ZooKeeper-specific tests ----

/// A fresh server and two clients of it.
pub async fn two_clients() -> (ZkFixture, ZkLock, ZkLock) {
    let fx = ZkFixture::start().await.unwrap();
    let (a, b) = (fx.connect().await.unwrap(), fx.connect().await.unwrap());
    (fx, a, b)
}

/// A fresh server, a client behind a fault proxy (with the proxy) and a direct client.
pub async fn linked_and_direct() -> (ZkFixture, (ZkLock, Arc<FaultProxy>), ZkLock) {
    let fx = ZkFixture::start().await.unwrap();
    let linked = fx.connect_linked().await.unwrap();
    let direct = fx.connect().await.unwrap();
    (fx, linked, direct)
}

/// Drops `wait` after 500 ms, asserting that it was still waiting then.
pub async fn drop_while_waiting<T>(wait: impl std::future::Future<Output = T>) {
    assert!(timeout(Duration::from_millis(500), wait).await.is_err(), "the wait ended within 500 ms");
}

/// The cancel-safety of one kind's waits while a holder holds: a wait dropped while queued, one
/// whose own wait runs out (`Timeout`, promptly) and waits dropped at each early await point must
/// each leave no node behind — `queued` (the kind's nodes under the name) is back to the
/// holder's one after each.
pub async fn cancelled_waits_leave_no_node(
    wait: impl AsyncFn(AcquireOptions) -> Result<Lease, LockError>,
    queued: impl AsyncFn() -> usize,
) {
    let only_the_holder =
        async |what: &str| eventually(Duration::from_secs(3), what, async || queued().await == 1).await;

    drop_while_waiting(wait(opts(3000))).await;
    only_the_holder("the cancelled waiter's node deleted").await;

    let begun = Instant::now();
    let err = wait(opts(3000).wait(Duration::from_millis(400))).await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    assert!(begun.elapsed() < Duration::from_millis(1500), "{:?}", begun.elapsed());
    only_the_holder("the timed-out waiter's node deleted").await;

    for ms in [0u64, 1, 2, 5, 10, 20] {
        let _ = timeout(Duration::from_millis(ms), wait(opts(3000))).await;
    }
    only_the_holder("no node of a wait dropped at an early await point").await;
}

pub fn name(s: &str) -> LockName {
    LockName::new(s).expect("valid name")
}

/// The longest lease lock-zk grants on a session at the test servers' tick
/// ([`ZkOptions::lease_bound`]), as the suite's base ttl: 1 s of a 2 s session.
pub fn lease_bound(session: Duration) -> Duration {
    ZkOptions { session_timeout: session, tick_time: TICK, ..ZkOptions::default() }.lease_bound()
}

pub fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new(Duration::from_millis(ttl_ms))
}

/// The lock nodes queued under `name`.
pub async fn nodes(fx: &ZkFixture, lock: &ZkLock, name: &LockName) -> Vec<String> {
    let raw = fx.raw().await;
    match raw.list_children(&lock.parent_path(name)).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {}: {e}", lock.parent_path(name)),
    }
}

/// Waits until `cond` holds, up to `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + within;
    while !cond().await {
        assert!(Instant::now() < end, "not within {within:?}: {what}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// The nodes queued under the read-write lock `name`.
pub async fn rw_nodes(fx: &ZkFixture, lock: &ZkLock, name: &LockName) -> Vec<String> {
    children_of(fx, &lock.rw_parent_path(name)).await
}

/// The nodes queued under the semaphore `name`.
pub async fn sem_nodes(fx: &ZkFixture, lock: &ZkLock, name: &LockName) -> Vec<String> {
    children_of(fx, &lock.semaphore_parent_path(name)).await
}

pub async fn children_of(fx: &ZkFixture, parent: &str) -> Vec<String> {
    let raw = fx.raw().await;
    match raw.list_children(parent).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {parent}: {e}"),
    }
}

pub fn long_wait(ttl_ms: u64) -> AcquireOptions {
    opts(ttl_ms).wait(Duration::from_secs(30))
}

pub async fn total_watch_events(clients: &[ZkLock]) -> u64 {
    clients.iter().map(ZkLock::watch_events).sum()
}

/// How a partitioned holder gave way: the waiter's lease, and how long after the cut the holder's
/// lost signal fired and the waiter was granted.
pub struct GaveWay {
    pub granted: Lease,
    pub lost_after: Duration,
    pub granted_after: Duration,
}

/// Partitions the holder's `link`, waits up to `lost_within` for its `lost` signal, then up to
/// `granted_within` for the `waiting` task's grant.
pub async fn partition_until_granted(
    link: &dyn ClientLink,
    lost: LostSignal,
    lost_within: Duration,
    waiting: JoinHandle<Result<Lease, LockError>>,
    granted_within: Duration,
) -> GaveWay {
    let cut = Instant::now();
    link.set_partitioned(true).await;
    timeout(lost_within, lost.fired()).await.expect("the cut-off holder's lost signal fires");
    let lost_after = cut.elapsed();
    let granted = timeout(granted_within, waiting).await.expect("waiter granted").expect("join").expect("granted");
    GaveWay { granted, lost_after, granted_after: cut.elapsed() }
}
