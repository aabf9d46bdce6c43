//! Redis Cluster: `redis+cluster://[user:password@]n1:p1,n2:p2,…[?tls=true]`.
//!
//! Commands go through the redis crate's cluster client (`cluster_async`): it learns the slot
//! map from the nodes, routes each script by its first key (all keys of a lock name share one
//! hash tag, so one slot), follows `MOVED` (a slot that changed master) and `ASK` (a slot being
//! migrated), and refreshes the map when a node stops answering. Scripts are still called by SHA
//! and loaded again on `NOSCRIPT`, which a promoted replica or a newly added master answers once.
//!
//! Release notifications use classic pub/sub on one node at a time: in a cluster a `PUBLISH` (also
//! one made by a script) is forwarded over the cluster bus to every node, so a subscriber on any
//! node hears every release. The subscriber rotates through the URL's nodes when its node goes
//! away; releases published meanwhile are lost, which is why every waiter is woken after a
//! reconnect and waiters also re-try on the holder's remaining ttl (notifications are hints).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lock_core::LockError;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, NodeAddress};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::url::parse_node_list;
use lock_core::backend::redact::{redact_message, redact_url};

/// The scheme of a cluster URL.
pub(crate) const SCHEME: &str = "redis+cluster";

const USAGE: &str = "use redis+cluster://[user:password@]node1:port1,node2:port2,…[?tls=true] (any nodes of the \
                     cluster; the client learns the others from them)";

/// The cluster client and, for the pub/sub listener, a client per node of the URL.
pub(crate) struct ClusterEndpoint {
    pub(crate) client: ClusterClient,
    nodes: Vec<redis::Client>,
    /// The node the next pub/sub connect goes to.
    next: AtomicUsize,
}

impl ClusterEndpoint {
    /// Parses the URL and `node_map` (`RedisOptions::cluster_node_map`); every problem is a
    /// `Config` error.
    pub(crate) fn parse(raw: &str, node_map: &BTreeMap<String, String>) -> Result<Arc<ClusterEndpoint>, LockError> {
        let urls = parse_node_list(raw, SCHEME, USAGE)?;
        let nodes = urls.iter().map(|u| crate::url::open_client(u)).collect::<Result<Vec<_>, _>>()?;
        if nodes.iter().any(|n| n.get_connection_info().redis_settings().db() != 0) {
            return Err(LockError::config(format!(
                "{}: a Redis Cluster has only database 0; {USAGE}",
                redact_url(raw)
            )));
        }
        let mut map = HashMap::new();
        for (announced, reached) in node_map {
            map.insert(node_address(announced)?, node_address(reached)?);
        }
        let mut builder = ClusterClient::builder(urls.iter().map(String::as_str));
        if !map.is_empty() {
            builder = builder.node_address_map(map);
        }
        let client = builder.build().map_err(|e| {
            LockError::config(format!("{}: {}; {USAGE}", redact_url(raw), redact_message(&e.to_string(), raw)))
        })?;
        Ok(Arc::new(ClusterEndpoint { client, nodes, next: AtomicUsize::new(0) }))
    }

    /// User, password and database of the nodes (one set for all: the client checks).
    pub(crate) fn settings(&self) -> &redis::RedisConnectionInfo {
        self.nodes[0].get_connection_info().redis_settings()
    }

    /// A client for the next node of the URL, round robin: each pub/sub (re)connect tries
    /// another node, so a dead node is left behind.
    pub(crate) fn next_node(&self) -> redis::Client {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.nodes.len();
        self.nodes[i].clone()
    }
}

/// `host:port` as the cluster client's node address.
fn node_address(raw: &str) -> Result<NodeAddress, LockError> {
    raw.rsplit_once(':')
        .and_then(|(host, port)| Some((host.trim_start_matches('[').trim_end_matches(']'), port.parse::<u16>().ok()?)))
        .filter(|(host, _)| !host.is_empty())
        .map(|(host, port)| NodeAddress::new(host, port))
        .ok_or_else(|| {
            LockError::config(format!(
                "redis cluster_node_map entry {raw:?} is not host:port; write e.g. \"10.0.0.5:6379\" = \"127.0.0.1:16379\""
            ))
        })
}

/// A command connection: to one server, or to a whole cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// `WAIT acks ms` where `key` was just written: on one server, that server; on a cluster, the
    /// master of `key`'s slot (the cluster client keeps one connection per node, so it is the
    /// connection the write went over, and `WAIT` counts the replicas that have it). The cluster
    /// client's own routing would send `WAIT` to every master and report the minimum.
    pub(crate) async fn wait_replicas(&mut self, key: &str, acks: u32, ms: u64) -> redis::RedisResult<i64> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(acks).arg(ms);
        match self {
            Conn::Single(c) => wait.query_async(c).await,
            Conn::Cluster(c) => {
                let route = Route::new(slot(key.as_bytes()), SlotAddr::Master);
                let reply =
                    c.route_command(wait, RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route))).await?;
                Ok(redis::from_redis_value(reply)?)
            }
        }
    }
}

/// One `SCAN` step over a cluster's masters (`SCAN` has no key, so the cluster client cannot
/// route it): `at` `None` starts a scan on every master; `Some((node, cursor))` continues on
/// that node. Returns `(node, next cursor, keys)` per node asked.
pub(crate) async fn scan_step(
    conn: &mut Conn,
    at: Option<(&str, u64)>,
    pattern: &str,
    count: usize,
) -> redis::RedisResult<Vec<(String, u64, Vec<String>)>> {
    let Conn::Cluster(c) = conn else {
        return Err(redis::RedisError::from((redis::ErrorKind::Client, "scan_step needs a cluster connection")));
    };
    let mut scan = redis::cmd("SCAN");
    scan.arg(at.map_or(0, |(_, cursor)| cursor)).arg("MATCH").arg(pattern).arg("COUNT").arg(count);
    match at {
        None => {
            let all = RoutingInfo::MultiNode((redis::cluster_routing::MultipleNodeRoutingInfo::AllMasters, None));
            let replies: Vec<(String, Value)> = redis::from_redis_value(c.route_command(scan, all).await?)?;
            replies
                .into_iter()
                .map(|(node, reply)| {
                    let (cursor, keys): (u64, Vec<String>) = redis::from_redis_value(reply)?;
                    Ok((node, cursor, keys))
                })
                .collect()
        }
        Some((node, _)) => {
            let (host, port) = node
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
                .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Client, "a node address without a port")))?;
            let one = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
            let (cursor, keys): (u64, Vec<String>) = redis::from_redis_value(c.route_command(scan, one).await?)?;
            Ok(vec![(node.to_owned(), cursor, keys)])
        }
    }
}

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag (or of the whole key) mod 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter().position(|b| *b == b'}').filter(|len| *len > 0).map(|len| &rest[..len])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for byte in tagged {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the `CLUSTER KEYSLOT` documentation.
        assert_eq!(slot(b"somekey"), 11058);
        assert_eq!(slot(b"foo{hash_tag}"), 2515);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        // The first `{…}` with something inside is the tag; `{}` is no tag (the whole key counts).
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        // CRC16/XMODEM's check value.
        assert_eq!(slot(b"123456789"), 0x31C3);
    }

    #[test]
    fn cluster_urls() {
        let none = BTreeMap::new();
        assert!(ClusterEndpoint::parse("redis+cluster://a:1,b:2", &none).is_ok());
        assert!(ClusterEndpoint::parse("redis+cluster://u:pw@a:1,b:2", &none).is_ok());
        let map = BTreeMap::from([("10.0.0.5:6379".to_owned(), "127.0.0.1:1".to_owned())]);
        assert!(ClusterEndpoint::parse("redis+cluster://a:1", &map).is_ok());
        let bad = BTreeMap::from([("10.0.0.5".to_owned(), "127.0.0.1:1".to_owned())]);
        assert!(matches!(ClusterEndpoint::parse("redis+cluster://a:1", &bad), Err(LockError::Config { .. })));
        for bad in ["redis+cluster://", "redis+cluster://a:1,,b:2", "redis+cluster://a:1/2", "redis+cluster://a:1?x=1"]
        {
            let e = ClusterEndpoint::parse(bad, &BTreeMap::new()).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("redis+cluster"), "{bad} must be refused with usage: {e}");
        }
        let e = ClusterEndpoint::parse("redis+cluster://u:topsecret@a:1,b:x", &BTreeMap::new())
            .err()
            .expect("bad port")
            .to_string();
        assert!(!e.contains("topsecret"), "{e}");
    }
}
