//! The fixture behind `dlock conformance`: fresh clients of a configured deployment, and
//! clients behind an in-process fault proxy for the network fault cases.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dlock::url::UrlParts;
use dlock::{Config, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, Scheme};
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
        let mut conn = super::raw::redis(&first).await?;
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
        if url.starts_with("rediss:") || url.contains("mode=verify") {
            return Ok(None);
        }
        // The Sentinels hand the client the primary's own address: a proxy in front of the
        // Sentinels would leave the data path unbroken, and a cut that does not cut proves nothing.
        if url.starts_with("redis+sentinel:") {
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

    fn expiry_bound(&self) -> Duration {
        // A ZooKeeper lock outlives its vanished holder until the session expires.
        #[cfg(feature = "zk")]
        if self.scheme == Scheme::ZooKeeper {
            return self.config.zk.session_timeout.max(self.base_ttl());
        }
        self.base_ttl()
    }

    fn provenance(&self) -> String {
        format!("configured deployment {}", self.config.redacted_url())
    }
}
