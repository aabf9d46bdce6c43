//! The shared conformance suite, strict, against ONE 3-member etcd cluster for the whole binary:
//! "the server" of the fault cases is the whole cluster (every member stopped, paused, restarted
//! at once), and the nemesis adds member faults — the leader or a follower killed and restarted,
//! the leader paused (only on an etcd without the stalled-leader lease bug: see
//! `EtcdCluster`), every client cut off the leader (a fault proxy in front of each member's
//! client port) — through `Fixture::deployment`. A member cut off from its peers is not among
//! them: see `EtcdCluster` for why a proxy cannot do that to etcd.

mod common;

use std::sync::Arc;
use std::time::Duration;

use dlock_testkit::servers::etcd::EtcdCluster;
use lock_conformance::LinkedClient;
use lock_core::{LockError, LockName};
use lock_etcd::{EtcdLock, EtcdOptions};

struct ClusterFixture {
    cluster: Arc<EtcdCluster>,
    prefix: String,
    options: EtcdOptions,
}

impl ClusterFixture {
    async fn start() -> Result<ClusterFixture, LockError> {
        let cluster = Arc::new(EtcdCluster::start(3).await?);
        let options = EtcdOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(3),
            keep_alive: Duration::from_secs(1),
            ..EtcdOptions::default()
        };
        Ok(ClusterFixture { cluster, prefix: common::unique_prefix(), options })
    }

    async fn connect(&self) -> Result<EtcdLock, LockError> {
        // Right after a member fault the survivors may still be electing: connect as an
        // application would, retrying until they serve.
        let url = self.cluster.url(&self.prefix);
        dlock_testkit::retry_unavailable(Duration::from_secs(60), || lock_etcd::connect(&url, self.options.clone()))
            .await
    }

    async fn raw(&self) -> Result<etcd_client::Client, LockError> {
        let endpoints: Vec<String> = self.cluster.client_addrs().iter().map(|a| format!("http://{a}")).collect();
        let connect = etcd_client::Client::connect(endpoints, None);
        tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| LockError::unavailable("test", "no raw etcd client in 10s"))?
            .map_err(|e| LockError::backend("etcd", e))
    }
}

lock_conformance::impl_fixture! {
    ClusterFixture, backend: "etcd-cluster", |f| {
        every_kind: f.connect().await?,
        deployment: f.cluster,
    }

    /// A client that names every member through a proxy of its own: its link is all three.
    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let connect = |hosts| async move { lock_etcd::connect(&format!("etcd://{hosts}/{}", self.prefix), self.options.clone()).await };
        dlock_testkit::linked_group_client(&self.cluster.client_addrs(), connect).await
    }

    fn expiry_bound(&self) -> Duration {
        // As on one member (the ttl rounded up to seconds, a 500 ms revoke tick).
        Duration::from_secs(3)
    }

    fn untaken_grant_bound(&self) -> Duration {
        Duration::from_millis(300)
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        let mut raw = self.raw().await?;
        common::delete_holder_key(&mut raw, &self.prefix, name).await?;
        Ok(true)
    }

    async fn collect_idle(&self, _name: &LockName) -> Result<bool, LockError> {
        Ok(true)
    }

    fn provenance(&self) -> String {
        format!("local 3-member etcd cluster {}", self.cluster.url(""))
    }
}

lock_conformance::conformance_tests!(etcd_cluster, || async { ClusterFixture::start().await }, strict, one_fixture(4));
