//! The fixture behind `dlock conformance`: fresh clients of a configured deployment, and
//! clients behind an in-process fault proxy for the network fault cases.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dlock::url::UrlParts;
use dlock::{Config, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName, Scheme};
use lock_conformance::proxy::ProxyGroup;
use lock_conformance::{async_trait, Fixture, LinkedClient};

/// A deployment named by a URL. The suite's clients are made with [`dlock::connect_with`].
pub(crate) struct UrlFixture {
    config: Config,
    scheme: Scheme,
    backend: String,
    prefix: String,
    /// Keeps a `memory://` server alive for the whole run.
    _first: Arc<dyn DistributedLock>,
}

impl UrlFixture {
    /// A Redis Cluster client reaches every node at the address the cluster announces, not
    /// only the URL's: so every node gets a proxy (found with `CLUSTER NODES` on the first
    /// node of the URL), and `cluster_node_map` sends the client through them.
    #[cfg(feature = "redis")]
    async fn linked_cluster_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let first = super::raw::redis_urls(&self.config.url)?.into_iter().next();
        let Some(first) = first else { return Ok(None) };
        let mut conn = super::raw::redis(&first, &self.config.redis_options()).await?;
        let nodes: String = super::raw::redis_query(&mut conn, redis::cmd("CLUSTER").arg("NODES")).await?;
        // `<id> <ip:port@bus[,hostname]> <flags> …`
        let announced: Vec<SocketAddr> =
            nodes.lines().filter_map(|line| line.split(' ').nth(1)?.split('@').next()?.parse().ok()).collect();
        let group = ProxyGroup::start(&announced).await?;
        let proxied = group.local_addrs();
        let mut config = self.config.clone();
        config.redis.cluster_node_map =
            announced.iter().zip(&proxied).map(|(real, proxy)| (real.to_string(), proxy.to_string())).collect();
        let hosts: Vec<String> = proxied.iter().map(SocketAddr::to_string).collect();
        let Some(parts) = UrlParts::parse(&self.config.url) else { return Ok(None) };
        config.url = format!("{}{}{}", parts.head(), hosts.join(","), parts.tail());
        let client = dlock::connect_with(&config).await?;
        Ok(Some(LinkedClient { client, link: Arc::new(group) }))
    }

    pub(crate) async fn new(config: Config) -> Result<Self, LockError> {
        let scheme = Scheme::of(&config.url)?;
        let first = dlock::connect_with(&config).await?;
        let prefix = format!("dlock-conformance-{:08x}/", rand_u32());
        Ok(UrlFixture { backend: first.backend().to_owned(), config, scheme, prefix, _first: first })
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() as u32
}

#[async_trait]
impl Fixture for UrlFixture {
    fn backend(&self) -> &str {
        &self.backend
    }

    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        dlock::connect_with(&self.config).await
    }

    async fn rw_client(&self) -> Result<Option<Arc<dyn DistributedRwLock>>, LockError> {
        match dlock::connect_rw_with(&self.config).await {
            Ok(c) => Ok(Some(c)),
            Err(LockError::Unsupported { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn semaphore_client(&self) -> Result<Option<Arc<dyn DistributedSemaphore>>, LockError> {
        match dlock::connect_semaphore_with(&self.config).await {
            Ok(c) => Ok(Some(c)),
            Err(LockError::Unsupported { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        // TLS names the server's host, which a local proxy cannot present; SQLite has no network;
        // `memory://` runs through `MemoryFixture` instead.
        let Some(port) = self.scheme.default_port() else { return Ok(None) };
        let url = self.config.url.to_ascii_lowercase();
        if url.starts_with("rediss:") || url.starts_with("etcds:") || url.contains("mode=verify") {
            return Ok(None);
        }
        // The Sentinels hand the client the primary's own address: a proxy in front of the
        // Sentinels would leave the data path unbroken, and a cut that does not cut proves nothing.
        if super::raw::is_sentinel(&url) {
            return Ok(None);
        }
        #[cfg(feature = "redis")]
        if url.starts_with("redis+cluster:") {
            return self.linked_cluster_client().await;
        }
        let Some(parts) = UrlParts::parse(&self.config.url) else { return Ok(None) };
        let mut upstreams = Vec::new();
        for host in &parts.hosts {
            let target = if host.contains(':') { host.to_string() } else { format!("{host}:{port}") };
            let addr: SocketAddr = tokio::net::lookup_host(&target)
                .await
                .map_err(|e| LockError::unavailable_from(&self.backend, format!("cannot resolve {target}"), e))?
                .next()
                .ok_or_else(|| LockError::unavailable(&self.backend, format!("{target} resolves to nothing")))?;
            upstreams.push(addr);
        }
        let group = ProxyGroup::start(&upstreams).await?;
        let rewritten: Vec<String> = group.proxies().iter().map(|p| p.local_addr().to_string()).collect();
        let mut config = self.config.clone();
        config.url = format!("{}{}{}", parts.head(), rewritten.join(","), parts.tail());
        let client = dlock::connect_with(&config).await?;
        Ok(Some(LinkedClient { client, link: Arc::new(group) }))
    }

    fn name_prefix(&self) -> String {
        self.prefix.clone()
    }

    /// Sends what anyone who may read the lock's queue and publish (Redis) or `NOTIFY`
    /// (PostgreSQL) can send its waiters: see [`forge_redis`] and [`forge_postgres`]. Redlock,
    /// MySQL, SQLite and ZooKeeper send no grant messages: `None`.
    async fn forge_grant(&self, name: &LockName, token: u64) -> Result<Option<usize>, LockError> {
        match self.scheme {
            #[cfg(feature = "redis")]
            Scheme::Redis => forge_redis(&self.config, name, token).await.map(Some),
            #[cfg(feature = "postgres")]
            Scheme::Postgres => forge_postgres(&self.config, name, token).await.map(Some),
            _ => {
                let _ = (name, token);
                Ok(None)
            }
        }
    }

    /// The suite's default (1.5 s), except that a ZooKeeper lease lasts at most what the leader
    /// surely keeps of the configured session (`ZkOptions::lease_bound`: 4.5 s of the default
    /// 10 s session, 0.6 s of a 2 s one): a base ttl above it would be cut, and the cases would
    /// time their checks for a lease the backend never grants.
    fn base_ttl(&self) -> Duration {
        let suite = Duration::from_millis(1500);
        #[cfg(feature = "zk")]
        if self.scheme == Scheme::ZooKeeper {
            return suite.min(self.config.zk.lease_bound());
        }
        suite
    }

    fn expiry_bound(&self) -> Duration {
        // A ZooKeeper lock outlives its vanished holder until the server expires the session:
        // `session_timeout` after it last heard from it, rounded up to the servers' next tick.
        #[cfg(feature = "zk")]
        if self.scheme == Scheme::ZooKeeper {
            let zk = &self.config.zk;
            return (zk.session_timeout + zk.tick_time).max(self.base_ttl());
        }
        self.base_ttl()
    }

    fn provenance(&self) -> String {
        format!("configured deployment {}", self.config.redacted_url())
    }
}

/// For every entry of the name's queue, the messages of its
/// [`RedisForgery`](lock_conformance::forgery::RedisForgery) on the name's channel and the entry's
/// wake channel. On the primary behind Sentinels; on a cluster, on the node that answers
/// for the name's slot (a message published there reaches every node). How many were published.
#[cfg(feature = "redis")]
async fn forge_redis(config: &Config, name: &LockName, token: u64) -> Result<usize, LockError> {
    use super::raw::{redis, redis_query};
    use lock_conformance::forgery::RedisForgery;
    let key = |suffix: &str| format!("{}:{{{}}}:{suffix}", config.redis.key_prefix, name.escaped());
    let urls = if super::raw::is_sentinel(&config.url) {
        vec![super::raw::sentinel_primary(config).await?]
    } else {
        super::raw::redis_urls(&config.url)?
    };
    let mut last = LockError::config("the Redis URL names no server");
    for url in urls {
        let mut conn = redis(&url, &config.redis_options()).await?;
        // Other nodes of a cluster answer MOVED.
        let entries: Vec<String> = match redis_query(&mut conn, redis::cmd("HVALS").arg(key("waiter-entries"))).await {
            Ok(entries) => entries,
            Err(e) => {
                last = e;
                continue;
            }
        };
        let channel = key("released");
        let mut sent = 0;
        for forgery in entries.iter().filter_map(|e| RedisForgery::of(e, token)) {
            for to in forgery.channels(&channel) {
                for message in &forgery.messages {
                    redis_query::<i64>(&mut conn, redis::cmd("PUBLISH").arg(to).arg(message)).await?;
                    sent += 1;
                }
            }
        }
        return Ok(sent);
    }
    Err(last)
}

/// `dlock-grant:<owner>:<token>` for every queue entry of the name, on the table's channel and
/// the channel the entry names. How many were sent.
#[cfg(feature = "postgres")]
async fn forge_postgres(config: &Config, name: &LockName, token: u64) -> Result<usize, LockError> {
    use super::raw::{within, Sql};
    let Sql::Postgres(mut c) = Sql::connect(&config.url, config.sql.tls).await? else { return Ok(0) };
    let table = &config.sql.table;
    // Names resolved as the lock's own sessions resolve them.
    let waiters = format!("{}_waiters", dlock::sql::pin_postgres(&mut c, table).await?);
    let (schema, waiters) = waiters.split_once('.').unwrap_or(("", &waiters));
    let select = format!("SELECT owner, wake FROM \"{schema}\".\"{waiters}\" WHERE name = $1");
    let entries: Vec<(String, Option<String>)> = within(
        "postgres",
        "reading the waiter queue",
        sqlx::query_as(sqlx::AssertSqlSafe(select)).bind(name.as_str()).fetch_all(&mut c),
    )
    .await?;
    let mut sent = 0;
    for (owner, wake) in &entries {
        let forged = format!("dlock-grant:{owner}:{token}");
        for channel in std::iter::once(table.as_str()).chain(wake.as_deref()) {
            let notify = sqlx::query("SELECT pg_notify($1, $2)").bind(channel).bind(&forged).execute(&mut c);
            within("postgres", "NOTIFY", notify).await?;
            sent += 1;
        }
    }
    Ok(sent)
}
