//! The shared conformance suite, strict, against ONE 3-member ZooKeeper ensemble for the whole
//! binary (three JVMs are too costly to start per case): "the server" of the fault cases is the
//! whole ensemble (every member stopped, paused, restarted at once), and the nemesis adds the
//! ensemble's node faults — the leader or a follower killed and restarted, a follower's peer
//! links cut — through `Fixture::deployment`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use dlock_testkit::servers::zk_ensemble::{EnsembleOptions, ZkEnsemble};
use lock_conformance::LinkedClient;
use lock_core::{LockError, LockName};
use lock_zk::{ZkLock, ZkOptions};

/// The session of the suite's clients: short, so that the expiry cases run in seconds. A leader
/// election longer than its lease part (about half, `lease::server_bound`) costs the holders their leases — safely,
/// with the lost signal — which the nemesis's node faults exercise on purpose.
const SESSION: Duration = Duration::from_secs(2);

struct EnsembleFixture {
    ensemble: Arc<ZkEnsemble>,
    root: String,
    options: ZkOptions,
}

impl EnsembleFixture {
    async fn start() -> Result<EnsembleFixture, LockError> {
        // syncLimit 5 × 200 ms ticks: a follower cut off from the leader stops serving after 1 s.
        let ensemble = Arc::new(ZkEnsemble::start(EnsembleOptions::default()).await?);
        Ok(EnsembleFixture { ensemble, root: common::uuid_like_root(), options: common::test_options(SESSION) })
    }

    fn hosts(&self) -> String {
        self.ensemble.client_addrs().iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",")
    }

    async fn connect(&self) -> Result<ZkLock, LockError> {
        // Right after a node fault the survivors may still be electing: connect as an
        // application would, retrying until they serve.
        let url = format!("{}{}", self.ensemble.url(), self.root);
        dlock_testkit::retry_unavailable(Duration::from_secs(60), || lock_zk::connect(&url, self.options.clone())).await
    }
}

lock_conformance::impl_fixture! {
    EnsembleFixture, backend: "zookeeper-ensemble", |f| {
        every_kind: f.connect().await?,
        deployment: f.ensemble,
    }

    /// A client that names every member through a proxy of its own: its link is all three.
    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let connect = |hosts| async move { lock_zk::connect(&format!("zk://{hosts}{}", self.root), self.options.clone()).await };
        dlock_testkit::linked_group_client(&self.ensemble.client_addrs(), connect).await
    }

    fn base_ttl(&self) -> Duration {
        common::lease_bound(self.options.session_timeout)
    }

    fn expiry_bound(&self) -> Duration {
        // The leader expires a silent session after its timeout (rounded up to a tick).
        self.options.session_timeout + Duration::from_millis(400)
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        common::delete_holder_node(&common::raw_session(&self.hosts()).await?, &self.root, name).await?;
        Ok(true)
    }

    async fn collect_idle(&self, name: &LockName) -> Result<bool, LockError> {
        common::collect_container(&common::raw_session(&self.hosts()).await?, &self.root, name).await?;
        Ok(true)
    }

    fn provenance(&self) -> String {
        format!("local 3-member ensemble {}", self.ensemble.url())
    }
}

lock_conformance::conformance_tests!(
    zookeeper_ensemble,
    || async { EnsembleFixture::start().await },
    strict,
    one_fixture(4)
);
