//! Where a connection goes: a fixed server, the primary that Redis Sentinels name *now*, or a
//! Redis Cluster (crate::cluster).
//!
//! A Sentinel endpoint asks the Sentinels on every connect (and so on every reconnect after a
//! failover), and the redis crate then checks that the named server answers `ROLE` as master,
//! so a client never keeps writing to a demoted primary once its connection was replaced.
//!
//! URL: `redis+sentinel://[user:password@]s1:p1,s2:p2,s3:p3/<master>[/<db>]`. The credentials
//! and database are those of the data nodes; the Sentinels themselves are asked without AUTH.

use std::sync::Arc;

use lock_core::LockError;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};

use crate::cluster::ClusterEndpoint;
use crate::url::{open_client, split_db};
use lock_core::backend::redact::redact_url;

/// The scheme of a Sentinel URL.
pub(crate) const SCHEME: &str = "redis+sentinel";

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
}

/// A parsed `redis+sentinel://` URL.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// `redis://host:port` of each Sentinel.
    pub(crate) sentinels: Vec<String>,
    pub(crate) master: String,
    userinfo: Option<String>,
    db: Option<u32>,
}

const USAGE: &str = "use redis+sentinel://[user:password@]sentinel1:port1,sentinel2:port2,…/<master name>[/<db>]";

/// Parses a `redis+sentinel://` URL; every problem is a `Config` error.
pub(crate) fn parse_sentinel(raw: &str) -> Result<SentinelUrl, LockError> {
    let rest = match raw.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case(SCHEME) => rest,
        _ => return Err(LockError::config(format!("{} is not a {SCHEME}:// URL; {USAGE}", redact_url(raw)))),
    };
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u.to_owned()), r),
        None => (None, rest),
    };
    if let Some((_, query)) = rest.split_once(['?', '#']) {
        return Err(LockError::config(format!(
            "unknown redis+sentinel URL parameter {query:?} in {}; this URL takes no parameters; {USAGE}",
            redact_url(raw)
        )));
    }
    let (hosts, path) = rest
        .split_once('/')
        .ok_or_else(|| LockError::config(format!("no master name in {}; {USAGE}", redact_url(raw))))?;
    let (master, db) = split_db(path, SCHEME, USAGE)?;
    if master.is_empty() {
        return Err(LockError::config(format!("no master name in {}; {USAGE}", redact_url(raw))));
    }
    let mut sentinels = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(LockError::config(format!("empty sentinel address in {}; {USAGE}", redact_url(raw))));
        }
        // Sentinels listen on 26379 unless told otherwise.
        let url = if host.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && !p.contains(']')) {
            format!("redis://{host}")
        } else {
            format!("redis://{host}:26379")
        };
        open_client(&url).map_err(|e| LockError::config(format!("sentinel {host}: {e}")))?;
        sentinels.push(url);
    }
    Ok(SentinelUrl { sentinels, master: master.to_owned(), userinfo, db })
}

impl SentinelUrl {
    /// The Sentinel endpoint (not connected yet).
    pub(crate) fn endpoint(&self) -> Result<Endpoint, LockError> {
        let mut template = String::from("redis://");
        if let Some(u) = &self.userinfo {
            template.push_str(u);
            template.push('@');
        }
        template.push_str(self.sentinels[0].trim_start_matches("redis://"));
        if let Some(db) = self.db {
            template.push_str(&format!("/{db}"));
        }
        let settings = open_client(&template)?;
        let info = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(settings.get_connection_info().redis_settings().clone());
        let sentinel =
            SentinelClient::build(self.sentinels.clone(), self.master.clone(), Some(info), SentinelServerType::Master)
                .map_err(|e| LockError::config(format!("invalid sentinel addresses: {e}; {USAGE}")))?;
        Ok(Endpoint::Sentinel(Arc::new(SentinelEndpoint { sentinel: tokio::sync::Mutex::new(sentinel), settings })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls() {
        let u = parse_sentinel("redis+sentinel://a:1,b:2,c:3/mymaster").unwrap();
        assert_eq!(u.sentinels, vec!["redis://a:1", "redis://b:2", "redis://c:3"]);
        assert_eq!((u.master.as_str(), u.db, u.userinfo.as_deref()), ("mymaster", None, None));
        let u = parse_sentinel("redis+sentinel://u:p/w@a:1,b:2/m/3").unwrap();
        assert_eq!((u.master.as_str(), u.db, u.userinfo.as_deref()), ("m", Some(3), Some("u:p/w")));
        assert_eq!(parse_sentinel("redis+sentinel://a:1/m/").unwrap().db, None);
        let u = parse_sentinel("redis+sentinel://a,[::1],b:5/m").unwrap();
        assert_eq!(u.sentinels, vec!["redis://a:26379", "redis://[::1]:26379", "redis://b:5"]);
        for bad in [
            "redis://a:1/m",
            "redis+sentinel://a:1",
            "redis+sentinel://a:1/",
            "redis+sentinel://a:1,,b:2/m",
            "redis+sentinel://a:1/m/x",
            "redis+sentinel://a:1/m?tls=true",
            "redis+sentinel://a:notaport/m",
            "redis+sentinel:///m",
        ] {
            assert!(matches!(parse_sentinel(bad), Err(LockError::Config { .. })), "{bad} must be refused");
        }
        let e = parse_sentinel("redis+sentinel://u:topsecret@a:1/m?x=1").unwrap_err().to_string();
        assert!(e.contains("unknown") && !e.contains("topsecret"), "{e}");
    }

    #[tokio::test]
    async fn endpoint_keeps_credentials_and_db() {
        let e = parse_sentinel("redis+sentinel://u:pw@a:1,b:2/m/4").unwrap().endpoint().unwrap();
        let s = e.settings();
        assert_eq!((s.db(), s.username(), s.password()), (4, Some("u"), Some("pw")));
    }
}
