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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
    /// `Config` error. `ca`: the PEM of `tls_ca_file`, which every node (`?tls=true`) is
    /// verified against instead of the webpki roots, by the cluster client and the pub/sub
    /// clients alike.
    pub(crate) fn parse(
        raw: &str,
        node_map: &BTreeMap<String, String>,
        ca: Option<&[u8]>,
    ) -> Result<Arc<ClusterEndpoint>, LockError> {
        let urls = parse_node_list(raw, SCHEME, USAGE)?;
        let nodes = urls.iter().map(|u| crate::url::open_client_with_ca(u, ca)).collect::<Result<Vec<_>, _>>()?;
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
        if let Some(pem) = ca {
            builder = builder.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(pem.to_vec()) });
        }
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

/// A command connection: to one server, or to a whole cluster (plain, or [`Tagged`] for
/// `min_replicas_ack`).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
    Tagged(Tagged),
}

/// What [`Conn::wait_replicas`] answers when it cannot count the acknowledgement on the node
/// that wrote (a slot being migrated or just moved): no replica is counted.
pub(crate) const UNCOUNTED: i64 = -1;

/// A cluster connection that sends each command to the master of one key's slot with
/// `CLUSTER MYID` behind it in the same pipeline, and remembers the answer: the node that ran
/// the command. The cluster client re-sends a redirected pipeline whole to the node of the
/// `MOVED` or `ASK`, so that answer names the node that applied the write even after a
/// redirect. `WAIT` then counts only on that node ([`Conn::wait_replicas`]): sent by the slot
/// map alone it went to the source of a half-migrated slot while the script had run on the
/// importing node (it answered at once, counting nothing of our write).
#[derive(Clone)]
pub(crate) struct Tagged {
    conn: ClusterConnection,
    route: Route,
    ran_on: Arc<Mutex<Option<String>>>,
}

impl Tagged {
    fn ran_on(&self) -> MutexGuard<'_, Option<String>> {
        self.ran_on.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `command` then `CLUSTER MYID`, one pipeline to the slot's master (or the redirect's
    /// node): the command's reply and the id of the node that ran it.
    async fn with_id(&mut self, command: Cmd) -> redis::RedisResult<(Value, Option<String>)> {
        let mut pipe = redis::pipe();
        pipe.add_command(command).cmd("CLUSTER").arg("MYID");
        let route = SingleNodeRoutingInfo::SpecificNode(self.route);
        let mut replies = self.conn.route_pipeline(pipe, 0, 2, route).await?.into_iter();
        let reply = replies.next().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Client, "the cluster answered a pipeline of two with nothing"))
        })?;
        Ok((reply, replies.next().and_then(|id| redis::from_redis_value::<String>(id).ok())))
    }

    /// `WAIT acks ms` on the node that ran the last command, or [`UNCOUNTED`] when the slot's
    /// master is another node now (or that command's node is unknown).
    async fn wait(&mut self, acks: u32, ms: u64) -> redis::RedisResult<i64> {
        let Some(wrote) = self.ran_on().clone() else { return Ok(UNCOUNTED) };
        let mut wait = redis::cmd("WAIT");
        wait.arg(acks).arg(ms);
        let (acked, waited_on) = self.with_id(wait).await?;
        if waited_on.as_deref() != Some(wrote.as_str()) {
            tracing::debug!(wrote, ?waited_on, "the slot's master changed between the write and its WAIT");
            return Ok(UNCOUNTED);
        }
        Ok(redis::from_redis_value(acked)?)
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Tagged(t) => Box::pin(async move {
                let answer = t.with_id(cmd.clone()).await;
                // A command that failed ran nowhere we know of: no earlier command's node stays.
                *t.ran_on() = answer.as_ref().ok().and_then(|(_, id)| id.clone());
                answer.map(|(reply, _)| reply)
            }),
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
            Conn::Tagged(t) => t.conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Tagged(t) => t.conn.get_db(),
        }
    }
}

impl Conn {
    /// This connection ready for `WAIT` after a write to `key`'s slot: on a cluster a
    /// [`Tagged`] one (each command learns the node that ran it); elsewhere itself.
    pub(crate) fn tagged(self, key: &str) -> Conn {
        match self {
            Conn::Cluster(conn) => Conn::Tagged(Tagged {
                conn,
                route: Route::new(slot(key.as_bytes()), SlotAddr::Master),
                ran_on: Arc::default(),
            }),
            other => other,
        }
    }

    /// `WAIT acks ms` on the node and connection that made the last write: on one server,
    /// this connection (the write went over it just before); on a cluster, a [`Tagged`]
    /// connection's last command's node, or [`UNCOUNTED`] when that is not the slot's master
    /// any more (a half-migrated slot's `ASK`, a `MOVED` the slot map has not caught up with).
    /// The cluster client's own routing would send a keyless `WAIT` to every master.
    pub(crate) async fn wait_replicas(&mut self, acks: u32, ms: u64) -> redis::RedisResult<i64> {
        match self {
            Conn::Single(c) => redis::cmd("WAIT").arg(acks).arg(ms).query_async(c).await,
            Conn::Tagged(t) => t.wait(acks, ms).await,
            // Not tagged: the node that wrote is unknown.
            Conn::Cluster(_) => Ok(UNCOUNTED),
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
        assert!(ClusterEndpoint::parse("redis+cluster://a:1,b:2", &none, None).is_ok());
        assert!(ClusterEndpoint::parse("redis+cluster://u:pw@a:1,b:2", &none, None).is_ok());
        let map = BTreeMap::from([("10.0.0.5:6379".to_owned(), "127.0.0.1:1".to_owned())]);
        assert!(ClusterEndpoint::parse("redis+cluster://a:1", &map, None).is_ok());
        let bad = BTreeMap::from([("10.0.0.5".to_owned(), "127.0.0.1:1".to_owned())]);
        assert!(matches!(ClusterEndpoint::parse("redis+cluster://a:1", &bad, None), Err(LockError::Config { .. })));
        for bad in ["redis+cluster://", "redis+cluster://a:1,,b:2", "redis+cluster://a:1/2", "redis+cluster://a:1?x=1"]
        {
            let e =
                ClusterEndpoint::parse(bad, &BTreeMap::new(), None).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("redis+cluster"), "{bad} must be refused with usage: {e}");
        }
        let e = ClusterEndpoint::parse("redis+cluster://u:topsecret@a:1,b:x", &BTreeMap::new(), None)
            .err()
            .expect("bad port")
            .to_string();
        assert!(!e.contains("topsecret"), "{e}");
    }
}
