//! Fixtures shared by the Redis and Redlock test files: fresh local `redis-server`s per fixture.

#![allow(dead_code, unreachable_pub)]

pub mod split_brain;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use dlock_testkit::servers::redis::RedisServer;
use lock_conformance::forgery::RedisForgery;
use lock_conformance::proxy::{FaultProxy, ProxyGroup};
use lock_conformance::{async_trait, Fixture, LinkedClient, ServerControl};
use lock_core::{backend::LeaseStore, LockError, LockName};
use lock_redis::RedisOptions;

/// Options for tests: short timeouts, so fault cases finish quickly.
pub fn test_options() -> RedisOptions {
    RedisOptions {
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_millis(750),
        // Above every lease the suite's cases take (their base ttl is 1.5 s) and short enough
        // for the restart cases; fresh servers skip it (`mark_fresh`).
        restart_quiet_period: Some(Duration::from_secs(3)),
        ..RedisOptions::default()
    }
}

/// Tells the server at `url` that it is fresh for `prefix`: no lease can have been forgotten,
/// so no restart quiet period (what an operator does for a new, empty deployment).
pub async fn mark_fresh(url: &str, prefix: &str) -> Result<(), LockError> {
    let mut c = raw_connection(url).await?;
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}:boot"))
        .arg(0)
        .query_async(&mut c)
        .await
        .map_err(|e| LockError::backend("test", e))?;
    Ok(())
}

async fn raw_connection(url: &str) -> Result<redis::aio::MultiplexedConnection, LockError> {
    let client = redis::Client::open(url).map_err(|e| LockError::backend("test", e))?;
    tokio::time::timeout(Duration::from_secs(5), client.get_multiplexed_async_connection())
        .await
        .map_err(|_| LockError::unavailable("test", "connecting to the test server timed out"))?
        .map_err(|e| LockError::backend("test", e))
}

/// One fresh Redis server.
pub struct RedisFixture {
    pub server: RedisServer,
    pub options: RedisOptions,
}

impl RedisFixture {
    pub async fn start() -> Result<RedisFixture, LockError> {
        // A prefix of its own, so runs against a shared server (DLOCK_TEST_REDIS_URL) never meet.
        let options = RedisOptions { key_prefix: format!("dlock-t{:08x}", rand::random::<u32>()), ..test_options() };
        let server = RedisServer::start().await?;
        mark_fresh(server.url(), &options.key_prefix).await?;
        Ok(RedisFixture { server, options })
    }

    /// The Redis key (or channel) `suffix` of the lock named by the already escaped `escaped`.
    pub fn key(&self, escaped: &str, suffix: &str) -> String {
        format!("{}:{{{escaped}}}:{suffix}", self.options.key_prefix)
    }

    /// Whether the test owns the server (it may stop it, change its ACLs, …).
    pub fn owned(&self) -> bool {
        self.server.control().is_some()
    }

    pub async fn redis_client(&self) -> Result<lock_redis::RedisLock, LockError> {
        lock_redis::connect(self.server.url(), self.options.clone()).await
    }

    /// A fresh read-write lock client.
    pub async fn rw(&self) -> Result<lock_redis::RedisRwLock, LockError> {
        lock_redis::connect_rw(self.server.url(), self.options.clone()).await
    }

    /// A fresh semaphore client.
    pub async fn semaphore(&self) -> Result<lock_redis::RedisSemaphore, LockError> {
        lock_redis::connect_semaphore(self.server.url(), self.options.clone()).await
    }
}

lock_conformance::impl_fixture! {
    RedisFixture, backend: "redis", |f| {
        client: f.redis_client().await?,
        rw: f.rw().await?,
        semaphore: f.semaphore().await?,
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let Some(addr) = self.server.addr() else { return Ok(None) };
        let proxy = FaultProxy::start(addr).await?;
        let client = lock_redis::connect(&format!("redis://{}", proxy.local_addr()), self.options.clone()).await?;
        Ok(Some(LinkedClient { client: Arc::new(client), link: proxy }))
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        self.server.control()
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        delete_key(self.server.url(), &self.key(&name.escaped(), "lock")).await?;
        Ok(true)
    }

    /// What `idle_gc_after` does: the hash of the (released) name, its token counter with it, is
    /// gone, as its expiry removes it.
    async fn collect_idle(&self, name: &LockName) -> Result<bool, LockError> {
        delete_key(self.server.url(), &self.key(&name.escaped(), "lock")).await?;
        Ok(true)
    }

    async fn lease_stores(&self) -> Result<Vec<(&'static str, Arc<dyn LeaseStore>)>, LockError> {
        lease_stores_at(self.server.url(), &self.options).await
    }

    async fn forge_grant(&self, name: &LockName, token: u64) -> Result<Option<usize>, LockError> {
        forge_grants(self.server.url(), &self.options.key_prefix, name, token).await.map(Some)
    }

    /// The claim window of a grant in the release (1 s, lock-redis `handoff` docs): a grant its
    /// waiter never claims lapses then, and with nobody else queued a newcomer's try takes the
    /// lock; the abandon of a dropped wait frees it sooner, a round trip after the drop. The
    /// second second is slack for a loaded machine.
    fn untaken_grant_bound(&self) -> Duration {
        Duration::from_secs(2)
    }

    fn provenance(&self) -> String {
        self.server.provenance()
    }

    /// This test binary re-run as a child (`conformance_waiter_child`, which `redis.rs` defines).
    async fn queued_waiter(
        &self,
        name: &LockName,
        opts: &lock_core::AcquireOptions,
    ) -> Result<Option<Box<dyn lock_conformance::waiter_process::QueuedWaiter>>, LockError> {
        let target = format!("{} {}", self.options.key_prefix, self.server.url());
        let child = lock_conformance::waiter_process::ChildWaiter::spawn(&target, name, opts).await?;
        Ok(Some(Box::new(child)))
    }
}

/// The client of a `RedlockFixture`'s child waiter: its `redlock://` URL is the target.
pub async fn connect_redlock_child(target: String) -> Result<Arc<dyn lock_core::DistributedLock>, LockError> {
    Ok(Arc::new(lock_redis::connect_redlock(&target, test_options()).await?))
}

/// The client of a `RedisFixture`'s child waiter: the key prefix and URL of its target.
pub async fn connect_child(target: String) -> Result<Arc<dyn lock_core::DistributedLock>, LockError> {
    let (prefix, url) =
        target.split_once(' ').ok_or_else(|| LockError::config(format!("bad child target {target:?}")))?;
    let options = RedisOptions { key_prefix: prefix.to_owned(), ..test_options() };
    Ok(Arc::new(lock_redis::connect(url, options).await?))
}

/// A fresh server and its control, or `None` (said on stderr, as `NOT APPLICABLE <test>`) when
/// the server is external (`DLOCK_TEST_REDIS_URL`) and cannot be stopped or restarted.
pub async fn owned_server(test: &str) -> Option<(RedisFixture, Arc<dyn ServerControl>)> {
    let fx = RedisFixture::start().await.expect("a Redis server for the test");
    let Some(server) = fx.server() else {
        eprintln!("NOT APPLICABLE {test}: the server is external");
        return None;
    };
    Some((fx, server))
}

/// Stops the server and starts it again: without persistence, as the fixtures run it, it comes
/// back empty.
pub async fn restart(server: &dyn ServerControl) {
    server.stop().await.unwrap();
    server.start().await.unwrap();
}

/// What an attacker who may read keys and publish (`+@read +publish`) can send the waiters of
/// `name` on the server at `url`: for every entry of the name's queue (`owner[:terms][~wake]`,
/// the values of its `waiter-entries` hash), the current grant wake-up `@<owner>` and the older
/// releasers' grant `!<owner>:<token>:<attempt>` for the attempt its terms name and attempts 1 to
/// 5, on the name's channel and on the entry's wake channel. The number of messages published.
pub async fn forge_grants(url: &str, prefix: &str, name: &LockName, token: u64) -> Result<usize, LockError> {
    forge_grants_on(&mut raw_connection(url).await?, prefix, name, token).await
}

/// [`forge_grants`] over a connection of the caller's (a cluster connection: the queue is read on
/// the name's slot, and a message published on any node reaches every node).
pub async fn forge_grants_on(
    c: &mut (impl redis::aio::ConnectionLike + Send),
    prefix: &str,
    name: &LockName,
    token: u64,
) -> Result<usize, LockError> {
    let entries: Vec<String> = redis::cmd("HVALS")
        .arg(name_key(prefix, name, "waiter-entries"))
        .query_async(c)
        .await
        .map_err(|e| LockError::backend("test", e))?;
    publish_forgeries(c, &name_key(prefix, name, "released"), &entries, token).await
}

/// What the same attacker can send the waiters of a Redlock `name` on each master at `urls`: a
/// master's queue entries (`owner[~wake]`) are the members of its `rl-waiters` sorted set.
pub async fn forge_redlock_grants(
    urls: &[&str],
    prefix: &str,
    name: &LockName,
    token: u64,
) -> Result<usize, LockError> {
    let mut sent = 0;
    for url in urls {
        let c = &mut raw_connection(url).await?;
        let entries: Vec<String> = redis::cmd("ZRANGE")
            .arg(name_key(prefix, name, "rl-waiters"))
            .arg(0)
            .arg(-1)
            .query_async(c)
            .await
            .map_err(|e| LockError::backend("test", e))?;
        sent += publish_forgeries(c, &name_key(prefix, name, "released"), &entries, token).await?;
    }
    Ok(sent)
}

fn name_key(prefix: &str, name: &LockName, suffix: &str) -> String {
    format!("{prefix}:{{{}}}:{suffix}", name.escaped())
}

/// For each queue entry `owner[:terms][~wake]`, every message that forges its grant
/// ([`RedisForgery`]) on `channel` and on the entry's wake channel. The number published.
async fn publish_forgeries(
    c: &mut (impl redis::aio::ConnectionLike + Send),
    channel: &str,
    entries: &[String],
    token: u64,
) -> Result<usize, LockError> {
    let mut sent = 0;
    for forgery in entries.iter().filter_map(|e| RedisForgery::of(e, token)) {
        for to in forgery.channels(channel) {
            for message in &forgery.messages {
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(to)
                    .arg(message)
                    .query_async(c)
                    .await
                    .map_err(|e| LockError::backend("test", e))?;
                sent += 1;
            }
        }
    }
    Ok(sent)
}

/// Deletes `key` on the server at `url` with a one-off connection.
pub async fn delete_key(url: &str, key: &str) -> Result<(), LockError> {
    let mut c = raw_connection(url).await?;
    let _: i64 = redis::cmd("DEL").arg(key).query_async(&mut c).await.map_err(|e| LockError::backend("test", e))?;
    Ok(())
}

/// The lease store of every kind, each from a client of its own at `url` (what the suite's
/// store cases drive directly).
pub async fn lease_stores_at(
    url: &str,
    options: &RedisOptions,
) -> Result<Vec<(&'static str, Arc<dyn LeaseStore>)>, LockError> {
    let mut stores: Vec<(&'static str, Arc<dyn LeaseStore>)> =
        vec![("exclusive", Arc::clone(lock_redis::connect(url, options.clone()).await?.store()) as _)];
    stores.extend(lock_redis::connect_rw(url, options.clone()).await?.lease_stores());
    stores.push(("permit", lock_redis::connect_semaphore(url, options.clone()).await?.lease_store(1)?));
    Ok(stores)
}

/// Five fresh, independent Redis masters.
pub struct RedlockFixture {
    pub servers: Vec<RedisServer>,
    pub options: RedisOptions,
}

impl RedlockFixture {
    pub async fn start() -> Result<RedlockFixture, LockError> {
        Self::start_n(5).await
    }

    pub async fn start_n(n: usize) -> Result<RedlockFixture, LockError> {
        let mut servers = Vec::with_capacity(n);
        for _ in 0..n {
            // Always local: Redlock needs N independent servers the test can stop.
            let server = RedisServer::start_local().await?;
            mark_fresh(server.url(), &test_options().key_prefix).await?;
            servers.push(server);
        }
        Ok(RedlockFixture { servers, options: test_options() })
    }

    fn addrs(&self) -> Vec<std::net::SocketAddr> {
        self.servers.iter().filter_map(|s| s.addr()).collect()
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.addrs().iter().map(|a| a.to_string()).collect();
        format!("redlock://{}", hosts.join(","))
    }

    pub async fn redlock_client(&self) -> Result<lock_redis::Redlock, LockError> {
        lock_redis::connect_redlock(&self.url(), self.options.clone()).await
    }

    /// Control of master `i`.
    pub fn master(&self, i: usize) -> Arc<dyn ServerControl> {
        self.servers[i].control().expect("local servers have control")
    }
}

/// Stops, starts or pauses every master together: the deployment as a whole goes away.
pub struct AllMasters(Vec<Arc<dyn ServerControl>>);

#[async_trait]
impl ServerControl for AllMasters {
    async fn stop(&self) -> Result<(), LockError> {
        for s in &self.0 {
            s.stop().await?;
        }
        Ok(())
    }

    async fn start(&self) -> Result<(), LockError> {
        for s in &self.0 {
            s.start().await?;
        }
        Ok(())
    }

    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        for s in &self.0 {
            s.pause(paused).await?;
        }
        Ok(())
    }

    fn persistent(&self) -> bool {
        false
    }
}

lock_conformance::impl_fixture! {
    RedlockFixture, backend: "redlock", |f| {
        client: f.redlock_client().await?,
    }

    /// This test binary re-run as a child (`conformance_waiter_child`, which `redlock.rs` defines).
    async fn queued_waiter(
        &self,
        name: &LockName,
        opts: &lock_core::AcquireOptions,
    ) -> Result<Option<Box<dyn lock_conformance::waiter_process::QueuedWaiter>>, LockError> {
        let child = lock_conformance::waiter_process::ChildWaiter::spawn(&self.url(), name, opts).await?;
        Ok(Some(Box::new(child)))
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let group = ProxyGroup::start(&self.addrs()).await?;
        let hosts: Vec<String> = group.local_addrs().iter().map(|a| a.to_string()).collect();
        let client =
            lock_redis::connect_redlock(&format!("redlock://{}", hosts.join(",")), self.options.clone()).await?;
        Ok(Some(LinkedClient { client: Arc::new(client), link: Arc::new(group) }))
    }

    /// Deletes the lease on every master (the fence counters stay).
    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        let key = format!("{}:{{{}}}:lock", self.options.key_prefix, name.escaped());
        for s in &self.servers {
            delete_key(s.url(), &key).await?;
        }
        Ok(true)
    }

    /// Redlock has no idle collection of its own: this deletes the name's fence keys on every
    /// master (as an eviction would), which tokens floored by the masters' clocks survive.
    async fn collect_idle(&self, name: &LockName) -> Result<bool, LockError> {
        for suffix in ["fence", "fence-by"] {
            let key = format!("{}:{{{}}}:{suffix}", self.options.key_prefix, name.escaped());
            for s in &self.servers {
                delete_key(s.url(), &key).await?;
            }
        }
        Ok(true)
    }

    async fn lease_stores(&self) -> Result<Vec<(&'static str, Arc<dyn LeaseStore>)>, LockError> {
        Ok(vec![("exclusive", Arc::clone(self.redlock_client().await?.store()) as _)])
    }

    /// The claim window of a release's grant (1 s, lock-redis `scripts/redlock.rs`, "Tokens left
    /// by the release"), as on a single instance; the second second is slack for a loaded machine.
    fn untaken_grant_bound(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// On every master: a Redlock waiter is woken by any master's `@<owner>`, so each is a way
    /// in for a forged grant.
    async fn forge_grant(&self, name: &LockName, token: u64) -> Result<Option<usize>, LockError> {
        let urls: Vec<&str> = self.servers.iter().map(|s| s.url()).collect();
        forge_redlock_grants(&urls, &self.options.key_prefix, name, token).await.map(Some)
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        let controls: Option<Vec<_>> = self.servers.iter().map(|s| s.control()).collect();
        controls.map(|c| Arc::new(AllMasters(c)) as Arc<dyn ServerControl>)
    }

    fn provenance(&self) -> String {
        format!("{} × {}", self.servers.len(), self.servers.first().map(|s| s.provenance()).unwrap_or_default())
    }
}
