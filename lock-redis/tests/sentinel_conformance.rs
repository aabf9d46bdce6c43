//! The shared conformance suite, strict, through `redis+sentinel://` against ONE local primary +
//! 2 replicas + 3 Sentinels for the whole binary. "The server" of the fault cases is the three
//! data nodes (stopped, paused, restarted empty at once); the nemesis adds the deployment's node
//! faults — a failover by SIGKILL of the primary, a replica killed, a Sentinel paused, the
//! primary cut from its replicas and the Sentinels while clients still reach it — through
//! `Fixture::deployment`. Clients ask for `min_replicas_ack = 1`: the no-overlap guarantee across
//! a failover rests on it (README, "Redis Sentinel").

mod common;

use std::sync::Arc;

use dlock_testkit::servers::redis_sentinel::RedisSentinelDeployment;
use lock_conformance::proxy::FaultProxy;
use lock_conformance::{async_trait, DeploymentControl, Fixture, LinkedClient, ServerControl};
use lock_core::{backend::LeaseStore, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName};
use lock_redis::RedisOptions;

/// How long a client connect may wait for the deployment to settle after a node fault: the
/// Sentinels name a primary not yet reachable or confirmed (`MasterNameNotFound…`) until then.
const FAILOVER_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

struct SentinelFixture {
    deployment: Arc<RedisSentinelDeployment>,
    options: RedisOptions,
}

impl SentinelFixture {
    async fn start() -> Result<SentinelFixture, LockError> {
        let deployment = Arc::new(RedisSentinelDeployment::start().await?);
        let options = RedisOptions {
            key_prefix: format!("dlock-s{:08x}", rand::random::<u32>()),
            min_replicas_ack: 1,
            ..common::test_options()
        };
        common::mark_fresh(&format!("redis://{}", deployment.primary().await?), &options.key_prefix).await?;
        Ok(SentinelFixture { deployment, options })
    }

    async fn primary_url(&self) -> Result<String, LockError> {
        Ok(format!("redis://{}", self.deployment.primary().await?))
    }

    fn key(&self, name: &LockName, suffix: &str) -> String {
        format!("{}:{{{}}}:{suffix}", self.options.key_prefix, name.escaped())
    }
}

#[async_trait]
impl Fixture for SentinelFixture {
    fn backend(&self) -> &str {
        "redis-sentinel"
    }

    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        let (url, options) = (self.deployment.url(), self.options.clone());
        Ok(Arc::new(
            dlock_testkit::retry_unavailable(FAILOVER_BOUND, || lock_redis::connect(&url, options.clone())).await?,
        ))
    }

    async fn rw_client(&self) -> Result<Option<Arc<dyn DistributedRwLock>>, LockError> {
        let (url, options) = (self.deployment.url(), self.options.clone());
        Ok(Some(Arc::new(
            dlock_testkit::retry_unavailable(FAILOVER_BOUND, || lock_redis::connect_rw(&url, options.clone())).await?,
        )))
    }

    async fn semaphore_client(&self) -> Result<Option<Arc<dyn DistributedSemaphore>>, LockError> {
        let (url, options) = (self.deployment.url(), self.options.clone());
        Ok(Some(Arc::new(
            dlock_testkit::retry_unavailable(FAILOVER_BOUND, || lock_redis::connect_semaphore(&url, options.clone()))
                .await?,
        )))
    }

    /// A client of the current primary through a fault proxy of its own. Sentinel hands clients
    /// the address the primary announces (the deployment's peer proxy, which cuts peers, never
    /// clients), so no link proxy can sit in a discovered path: this client does not follow a
    /// later failover (it then gets errors from the demoted node, which it must survive safely)
    /// — the Sentinel-URL clients of the same run do follow.
    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let proxy = FaultProxy::start(self.deployment.primary().await?).await?;
        let client = lock_redis::connect(&format!("redis://{}", proxy.local_addr()), self.options.clone()).await?;
        Ok(Some(LinkedClient { client: Arc::new(client), link: proxy }))
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        Some(self.deployment.clone())
    }

    fn deployment(&self) -> Option<Arc<dyn DeploymentControl>> {
        Some(self.deployment.clone())
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        common::delete_key(&self.primary_url().await?, &self.key(name, "lock")).await?;
        Ok(true)
    }

    async fn collect_idle(&self, name: &LockName) -> Result<bool, LockError> {
        common::delete_key(&self.primary_url().await?, &self.key(name, "fence")).await?;
        Ok(true)
    }

    async fn lease_stores(&self) -> Result<Vec<(&'static str, Arc<dyn LeaseStore>)>, LockError> {
        common::lease_stores_at(&self.deployment.url(), &self.options).await
    }

    /// On the primary, where the queue is written and every client subscribes.
    async fn forge_grant(&self, name: &LockName, token: u64) -> Result<Option<usize>, LockError> {
        common::forge_grants(&self.primary_url().await?, &self.options.key_prefix, name, token).await.map(Some)
    }

    fn provenance(&self) -> String {
        format!("local redis-server primary + 2 replicas + 3 sentinels ({:?})", self.deployment)
    }
}

lock_conformance::conformance_tests!(
    redis_sentinel,
    || async { SentinelFixture::start().await },
    strict,
    one_fixture(4)
);
