//! Where a connection goes: a fixed server, the primary that Redis Sentinels name *now*, or a
//! Redis Cluster (crate::cluster).
//!
//! A Sentinel endpoint asks the Sentinels on every connect (and so on every reconnect after a
//! failover), and the redis crate then checks that the named server answers `ROLE` as master,
//! so a client never keeps writing to a demoted primary once its connection was replaced.
//!
//! The URL and the Sentinel client are in crate::sentinel.

use std::sync::Arc;

use lock_core::LockError;
use redis::sentinel::SentinelClient;

use crate::cluster::ClusterEndpoint;
pub(crate) use crate::sentinel::is_sentinel;
use crate::sentinel::parse_sentinel;

/// A fixed server or a Sentinel-discovered primary. Cloned once per connect: the size
/// difference costs nothing worth an extra allocation.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Endpoint {
    Fixed(redis::Client),
    Sentinel(Arc<SentinelEndpoint>),
    Cluster(Arc<ClusterEndpoint>),
}

pub(crate) struct SentinelEndpoint {
    /// `&mut` to ask; the Sentinel connections it caches are reused across asks.
    sentinel: tokio::sync::Mutex<SentinelClient>,
    /// The data nodes' settings (user, password, db): a client opened on the first Sentinel's
    /// address, never connected, only read.
    settings: redis::Client,
}

impl Endpoint {
    /// User, password and database of the data connections.
    pub(crate) fn settings(&self) -> &redis::RedisConnectionInfo {
        match self {
            Endpoint::Fixed(c) => c.get_connection_info().redis_settings(),
            Endpoint::Sentinel(s) => s.settings.get_connection_info().redis_settings(),
            Endpoint::Cluster(c) => c.settings(),
        }
    }

    /// A client for the server to connect to now (on a cluster: the next node of the URL, for
    /// pub/sub; commands use the cluster client). Unbounded itself: callers bound it with their
    /// connect timeout.
    pub(crate) async fn resolve(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Endpoint::Fixed(c) => Ok(c.clone()),
            Endpoint::Sentinel(s) => s.sentinel.lock().await.async_get_client().await,
            Endpoint::Cluster(c) => Ok(c.next_node()),
        }
    }

    /// After an authentication error from [`Endpoint::resolve`]: whether the Sentinels (not
    /// the data node they named) refused this client's login.
    pub(crate) async fn sentinels_refuse_login(&self) -> bool {
        match self {
            Endpoint::Sentinel(s) => crate::sentinel::sentinels_refuse_login(&mut *s.sentinel.lock().await).await,
            _ => false,
        }
    }
}

/// The endpoint of a `redis[s]+sentinel://` URL (not connected yet); `ca` is the PEM of
/// `tls_ca_file`, for the Sentinels and the data nodes alike.
pub(crate) fn sentinel(url: &str, ca: Option<&[u8]>) -> Result<Endpoint, LockError> {
    let parsed = parse_sentinel(url)?;
    let settings = parsed.data_settings()?;
    let client = parsed.client(settings.get_connection_info().redis_settings(), ca)?;
    Ok(Endpoint::Sentinel(Arc::new(SentinelEndpoint { sentinel: tokio::sync::Mutex::new(client), settings })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoint_keeps_credentials_and_db() {
        let e = sentinel("redis+sentinel://u:pw@a:1,b:2/m/4?sentinel_password=sp", None).unwrap();
        let s = e.settings();
        assert_eq!((s.db(), s.username(), s.password()), (4, Some("u"), Some("pw")));
    }
}
