//! A local Redis Cluster: 3 masters and 3 replicas, `redis-server --cluster-enabled yes` child
//! processes on free 127.0.0.1 ports in one temp dir, stopped by PID when dropped.
//!
//! Each node gets its cluster bus port explicitly (`--cluster-port`, a second free port), so no
//! port + 10000 can collide with anything else on the machine. Slots are split in three ranges
//! (`CLUSTER ADDSLOTSRANGE`), the nodes meet (`CLUSTER MEET`) and each replica follows its master
//! (`CLUSTER REPLICATE`); [`RedisCluster::start`] returns once every node reports
//! `cluster_state:ok` and every replica is in sync. `cluster-node-timeout` is short
//! ([`NODE_TIMEOUT_MS`]) so a killed master is replaced by its replica within seconds; a node
//! persists nothing but its `nodes.conf`, so a restarted node comes back empty and rejoins as a
//! replica of whoever took over its slots.
//!
//! Every node sits behind two proxies, one for its client port and one for its bus port, and
//! announces them (`cluster-announce-ip/port/bus-port`), so peers, `CLUSTER MEET`, replication
//! and clients (through `CLUSTER SLOTS`/`MOVED`) all go through them; each node dials out from
//! its own loopback address (`servers::peer_links`). [`RedisCluster::partition`] cuts a node
//! from every other node (bus and replication) while clients on 127.0.0.1 still reach it.
//!
//! dlock-testkit does not depend on the redis crate: nodes are driven with raw RESP
//! ([`command`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::LockError;

use super::peer_links::PeerLinks;
pub use super::redis::command;
use super::redis::{node_args, redis_binary};
use super::redis_sentinel::{dial_from, subdir};
use crate::process::{free_port, wait_for_port, ChildServer};

/// `cluster-node-timeout`: how long a master may not answer before its replica takes over.
pub const NODE_TIMEOUT_MS: u64 = 1000;
/// Masters (nodes 0..3); nodes 3..6 start as their replicas (node `3 + i` follows node `i`).
pub const MASTERS: usize = 3;
/// How long start-up, a failover or a migration may take here before it counts as failed.
const WAIT: Duration = Duration::from_secs(30);

/// A running 3-master, 3-replica Redis Cluster.
pub struct RedisCluster {
    /// Each node's public address (its client proxy, what it announces) and process.
    nodes: Vec<(SocketAddr, Arc<ChildServer>)>,
    /// Each node's own client address (readiness checks only).
    own: Vec<SocketAddr>,
    /// Each node's announced cluster bus port (its bus proxy), for `CLUSTER MEET`.
    bus_ports: Vec<u16>,
    links: PeerLinks,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster").field("nodes", &self.nodes.iter().map(|(a, _)| a).collect::<Vec<_>>()).finish()
    }
}

/// What [`RedisCluster::kill_master_of`] and [`RedisCluster::manual_failover`] observed.
#[derive(Clone, Copy, Debug)]
pub struct Failover {
    /// The node that was master of the slot.
    pub old: usize,
    /// The node that is master of the slot now.
    pub new: usize,
    /// From the kill (or the `CLUSTER FAILOVER`) until the new master answered `ROLE` as master
    /// and the surviving nodes agreed that it owns the slot.
    pub took: Duration,
}

impl RedisCluster {
    /// Starts six nodes and joins them into one cluster (see the module docs).
    pub async fn start() -> Result<RedisCluster, LockError> {
        let program = redis_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("dlock-cluster-")
            .tempdir()
            .map_err(|e| LockError::unavailable_from("test", "cannot create a temp dir for the cluster", e))?;
        let (mut nodes, mut own, mut bus_ports, mut links) = (Vec::new(), Vec::new(), Vec::new(), PeerLinks::default());
        for i in 0..2 * MASTERS {
            let (port, bus) = (free_port()?, free_port()?);
            let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
            let (source, public) = links.add_proxied(&[local(port), local(bus)]).await?;
            let (addr, bus_public) = (public[0], public[1].port());
            let node_dir = subdir(dir.path(), &format!("node{i}"))?;
            let mut args = node_args(port, &node_dir);
            args.extend(dial_from(source));
            args.extend(
                [
                    "--cluster-announce-ip",
                    "127.0.0.1",
                    "--cluster-announce-port",
                    &addr.port().to_string(),
                    "--cluster-announce-bus-port",
                    &bus_public.to_string(),
                    "--cluster-port",
                    &bus.to_string(),
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &NODE_TIMEOUT_MS.to_string(),
                    // A replica may always take over, however long it was cut off: the tests
                    // kill masters on purpose and want the failover.
                    "--cluster-replica-validity-factor",
                    "0",
                    // Slots of a dead master fail alone; the others keep serving.
                    "--cluster-require-full-coverage",
                    "no",
                    // A restarted node's replica syncs at once instead of after Redis's 5 s
                    // diskless-sync delay: the strict suites need its acknowledgement.
                    "--repl-diskless-sync-delay",
                    "0",
                ]
                .iter()
                .map(|s| s.to_string()),
            );
            let child = Arc::new(ChildServer::new(&program, args, &node_dir));
            child.start()?;
            nodes.push((addr, child));
            own.push(local(port));
            bus_ports.push(bus_public);
        }
        for addr in &own {
            wait_for_port(*addr, Duration::from_secs(10)).await?;
        }
        let cluster = RedisCluster { nodes, own, bus_ports, links, _dir: dir };
        cluster.join().await?;
        Ok(cluster)
    }

    async fn join(&self) -> Result<(), LockError> {
        let per = 16384 / MASTERS;
        for i in 0..MASTERS {
            let (from, to) = (i * per, if i + 1 == MASTERS { 16383 } else { (i + 1) * per - 1 });
            expect_ok(self.addr(i), &["CLUSTER", "ADDSLOTSRANGE", &from.to_string(), &to.to_string()]).await?;
        }
        let first = self.addr(0);
        for ((addr, _), bus) in self.nodes.iter().zip(&self.bus_ports).skip(1) {
            expect_ok(first, &["CLUSTER", "MEET", "127.0.0.1", &addr.port().to_string(), &bus.to_string()]).await?;
        }
        let end = Instant::now() + WAIT;
        for i in 0..MASTERS {
            let master_id = self.node_id(i).await?;
            // A replica can follow a master only once it has heard of it through the gossip.
            loop {
                let reply = command(self.addr(MASTERS + i), &["CLUSTER", "REPLICATE", &master_id]).await?;
                if reply.starts_with("+OK") {
                    break;
                }
                if Instant::now() >= end {
                    return Err(LockError::unavailable("test", format!("CLUSTER REPLICATE failed: {}", reply.trim())));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.wait_healthy().await
    }

    /// Waits until every node reports `cluster_state:ok` and knows all six, and each master has
    /// one replica in sync.
    pub async fn wait_healthy(&self) -> Result<(), LockError> {
        self.wait_until("every node reports cluster_state:ok and every replica is in sync", || async {
            if !self.all_ok().await {
                return false;
            }
            let mut synced = 0;
            for (addr, _) in &self.nodes {
                let info = command(*addr, &["INFO", "replication"]).await.unwrap_or_default();
                if info.contains("role:master") {
                    if !info.contains("connected_slaves:1") || !info.contains("state=online") {
                        return false;
                    }
                    synced += 1;
                }
            }
            synced == MASTERS
        })
        .await
    }

    /// Whether every node reports `cluster_state:ok` and knows all six.
    async fn all_ok(&self) -> bool {
        for (addr, _) in &self.nodes {
            let info = command(*addr, &["CLUSTER", "INFO"]).await.unwrap_or_default();
            if !info.contains("cluster_state:ok") || !info.contains(&format!("cluster_known_nodes:{}", 2 * MASTERS)) {
                return false;
            }
        }
        true
    }

    /// `redis+cluster://n1:p1,…` naming every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|(a, _)| a.to_string()).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The address of node `i` (0..6).
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.nodes[i].0
    }

    /// How many nodes the cluster was started with.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never empty; here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s cluster id (`CLUSTER MYID`).
    pub async fn node_id(&self, i: usize) -> Result<String, LockError> {
        let reply = command(self.addr(i), &["CLUSTER", "MYID"]).await?;
        bulk(&reply).ok_or_else(|| LockError::unavailable("test", format!("CLUSTER MYID: {}", reply.trim())))
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of any live node).
    pub async fn slot_of(&self, key: &str) -> Result<u16, LockError> {
        let mut last = String::new();
        for (addr, _) in &self.nodes {
            match command(*addr, &["CLUSTER", "KEYSLOT", key]).await {
                Ok(reply) => match reply.trim().strip_prefix(':').and_then(|n| n.parse().ok()) {
                    Some(slot) => return Ok(slot),
                    None => last = reply,
                },
                Err(e) => last = e.to_string(),
            }
        }
        Err(LockError::unavailable("test", format!("no node answered CLUSTER KEYSLOT: {last}")))
    }

    /// The node that is master of `slot` in the view of every live node that answers, if they
    /// agree and it answers `ROLE` as master; `None` while they disagree or it is down.
    pub async fn master_of(&self, slot: u16) -> Option<usize> {
        self.master_seen_by(slot, None).await
    }

    /// [`RedisCluster::master_of`] in the view of every live node but `skip` (a node cut off
    /// from the others keeps its own, outdated view).
    async fn master_seen_by(&self, slot: u16, skip: Option<usize>) -> Option<usize> {
        let mut agreed: Option<usize> = None;
        let mut asked = 0;
        for (i, (addr, child)) in self.nodes.iter().enumerate() {
            if child.pid().is_none() || skip == Some(i) {
                continue;
            }
            let Ok(nodes) = command(*addr, &["CLUSTER", "NODES"]).await else { continue };
            asked += 1;
            let port = master_port(&nodes, slot)?;
            let index = self.nodes.iter().position(|(a, _)| a.port() == port)?;
            if agreed.is_some_and(|a| a != index) {
                return None;
            }
            agreed = Some(index);
        }
        let index = agreed.filter(|_| asked > 0)?;
        let role = command(self.addr(index), &["ROLE"]).await.unwrap_or_default();
        role.contains("master").then_some(index)
    }

    /// SIGKILLs node `i`.
    pub fn kill(&self, i: usize) {
        self.nodes[i].1.stop();
    }

    /// SIGSTOPs (`true`) or SIGCONTs node `i`.
    pub fn pause(&self, i: usize, paused: bool) {
        self.nodes[i].1.pause(paused);
    }

    /// Starts a killed node again: empty (nothing persists), with its `nodes.conf`, so it
    /// rejoins and follows whoever owns its slots now. Returns once it answers.
    pub async fn restart(&self, i: usize) -> Result<(), LockError> {
        self.nodes[i].1.start()?;
        wait_for_port(self.own[i], Duration::from_secs(10)).await
    }

    /// Cuts (`on`) or heals every link between node `i` and the other nodes — cluster bus and
    /// replication, both directions, open connections included (held, not reset); clients still
    /// reach it. A master cut off for `cluster-node-timeout` sees itself in the minority and
    /// refuses commands (`CLUSTERDOWN`) while the majority promotes its replica.
    pub fn partition(&self, i: usize, on: bool) {
        self.links.partition(i, on);
    }

    /// SIGKILLs every node (the whole cluster goes away).
    pub fn kill_all(&self) {
        for (_, child) in &self.nodes {
            child.stop();
        }
    }

    /// Starts every killed node again (empty, with their `nodes.conf`) and waits until the
    /// cluster is healthy as after `start` (`wait_healthy`: every replica in sync, since grants
    /// that ask a replica's acknowledgement fail until then).
    pub async fn restart_all(&self) -> Result<(), LockError> {
        for (i, (_, child)) in self.nodes.iter().enumerate() {
            if child.pid().is_none() {
                self.nodes[i].1.start()?;
            }
        }
        for addr in &self.own {
            wait_for_port(*addr, Duration::from_secs(10)).await?;
        }
        self.wait_healthy().await
    }

    /// SIGKILLs the master of `slot` and waits until its replica took the slot over
    /// (automatic failover after `cluster-node-timeout`).
    pub async fn kill_master_of(&self, slot: u16) -> Result<Failover, LockError> {
        let old = self.wait_for_master(slot).await?;
        let started = Instant::now();
        self.kill(old);
        self.wait_for_new_master(slot, old, started).await
    }

    /// Cuts the master of `slot` from every other node ([`RedisCluster::partition`]) and waits
    /// until the others agree that its replica took the slot over; the cut stays until
    /// `partition(old, false)`.
    pub async fn partition_master_of(&self, slot: u16) -> Result<Failover, LockError> {
        let old = self.wait_for_master(slot).await?;
        let started = Instant::now();
        self.partition(old, true);
        self.wait_for_new_master(slot, old, started).await
    }

    /// `CLUSTER FAILOVER` on a replica of `slot`'s master (a coordinated hand-over: the master
    /// stops writes until the replica caught up) and waits until it is the slot's master.
    pub async fn manual_failover(&self, slot: u16) -> Result<Failover, LockError> {
        let old = self.wait_for_master(slot).await?;
        let replica = self.replica_of(old).await?;
        let started = Instant::now();
        expect_ok(self.addr(replica), &["CLUSTER", "FAILOVER"]).await?;
        self.wait_for_new_master(slot, old, started).await
    }

    /// A live replica of master `master` (from its `CLUSTER NODES`).
    pub async fn replica_of(&self, master: usize) -> Result<usize, LockError> {
        let master_id = self.node_id(master).await?;
        let nodes = command(self.addr(master), &["CLUSTER", "NODES"]).await?;
        // A replica's line: `<id> <addr> slave <master id> …`.
        nodes
            .lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let port: u16 = fields.get(1)?.split('@').next()?.rsplit_once(':')?.1.parse().ok()?;
                (fields.get(3) == Some(&master_id.as_str()) && !fields.get(2)?.contains("fail")).then_some(port)
            })
            .and_then(|port| self.nodes.iter().position(|(a, _)| a.port() == port))
            .ok_or_else(|| LockError::unavailable("test", format!("node {master} has no live replica")))
    }

    async fn wait_for_master(&self, slot: u16) -> Result<usize, LockError> {
        let end = Instant::now() + WAIT;
        loop {
            if let Some(m) = self.master_of(slot).await {
                return Ok(m);
            }
            if Instant::now() >= end {
                return Err(LockError::unavailable("test", format!("the nodes never agreed on slot {slot}'s master")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_for_new_master(&self, slot: u16, old: usize, started: Instant) -> Result<Failover, LockError> {
        let end = started + WAIT;
        loop {
            // The old master is left out: killed it answers nothing, cut off it still claims
            // the slot.
            if let Some(new) = self.master_seen_by(slot, Some(old)).await.filter(|n| *n != old) {
                return Ok(Failover { old, new, took: started.elapsed() });
            }
            if Instant::now() >= end {
                return Err(LockError::unavailable("test", format!("slot {slot} got no new master within {WAIT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Moves `slot` (with every key in it) from its master to master `to`, the way
    /// `redis-cli --cluster reshard` does: `SETSLOT IMPORTING` on the target, `MIGRATING` on the
    /// source, `MIGRATE` the keys in batches, then `SETSLOT NODE` everywhere. While keys move,
    /// clients of the slot get `ASK` redirections. Returns how many keys moved.
    pub async fn migrate_slot(&self, slot: u16, to: usize) -> Result<usize, LockError> {
        let Some(from) = self.begin_migration(slot, to).await? else { return Ok(0) };
        let moved = self.move_slot_keys(slot, from, to).await?;
        self.finish_migration(slot, from, to).await?;
        Ok(moved)
    }

    /// The first step of [`migrate_slot`](Self::migrate_slot): `slot` marked `IMPORTING` on
    /// master `to` and `MIGRATING` on its master, which it returns (`None`: `to` has it already).
    /// From here until [`finish_migration`](Self::finish_migration) a command on keys the source
    /// does not have is answered `ASK` (a client re-sends it to `to` behind `ASKING`).
    pub async fn begin_migration(&self, slot: u16, to: usize) -> Result<Option<usize>, LockError> {
        let from = self.wait_for_master(slot).await?;
        if from == to {
            return Ok(None);
        }
        let (from_id, to_id) = (self.node_id(from).await?, self.node_id(to).await?);
        let s = slot.to_string();
        expect_ok(self.addr(to), &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]).await?;
        expect_ok(self.addr(from), &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]).await?;
        Ok(Some(from))
    }

    /// `MIGRATE`s every key `slot` has on `from` to `to`, in batches; how many moved.
    pub async fn move_slot_keys(&self, slot: u16, from: usize, to: usize) -> Result<usize, LockError> {
        let s = slot.to_string();
        let target_port = self.addr(to).port().to_string();
        let mut moved = 0;
        loop {
            let reply = command(self.addr(from), &["CLUSTER", "GETKEYSINSLOT", &s, "100"]).await?;
            let keys = bulk_array(&reply);
            if keys.is_empty() {
                return Ok(moved);
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &target_port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            expect_ok(self.addr(from), &args).await?;
            moved += keys.len();
        }
    }

    /// The last step of [`migrate_slot`](Self::migrate_slot): `slot` assigned to `to` on every
    /// node, and waited for until the nodes agree.
    pub async fn finish_migration(&self, slot: u16, from: usize, to: usize) -> Result<(), LockError> {
        let to_id = self.node_id(to).await?;
        let s = slot.to_string();
        // The target first, then the source, then everyone else (what redis-cli does).
        let mut order = vec![to, from];
        order.extend((0..self.nodes.len()).filter(|i| *i != to && *i != from));
        for i in order {
            if self.nodes[i].1.pid().is_some() {
                // A replica answers an error for SETSLOT NODE of a slot it does not serve; the
                // gossip tells it anyway.
                let _ = command(self.addr(i), &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]).await?;
            }
        }
        let end = Instant::now() + WAIT;
        while self.master_of(slot).await != Some(to) {
            if Instant::now() >= end {
                return Err(LockError::unavailable("test", format!("slot {slot} never settled on node {to}")));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Ok(())
    }

    async fn wait_until<F, Fut>(&self, what: &str, mut ok: F) -> Result<(), LockError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let end = Instant::now() + WAIT;
        while !ok().await {
            if Instant::now() >= end {
                return Err(LockError::unavailable("test", format!("the cluster never got there: {what}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

async fn expect_ok(addr: SocketAddr, args: &[&str]) -> Result<(), LockError> {
    let reply = command(addr, args).await?;
    if reply.starts_with("+OK") {
        Ok(())
    } else {
        Err(LockError::unavailable("test", format!("{addr} refused {:?}: {}", args, reply.trim())))
    }
}

/// The string of a RESP bulk reply `$<len>\r\n<text>\r\n`.
fn bulk(reply: &str) -> Option<String> {
    let mut parts = reply.split("\r\n");
    parts.next()?.strip_prefix('$')?;
    parts.next().map(str::to_owned)
}

/// The strings of a RESP array of bulk strings (no nesting).
fn bulk_array(reply: &str) -> Vec<String> {
    reply.split("\r\n").skip(1).filter(|p| !p.starts_with('$') && !p.is_empty()).map(str::to_owned).collect()
}

/// The client port of the master that `CLUSTER NODES` text names for `slot`.
fn master_port(nodes: &str, slot: u16) -> Option<u16> {
    nodes.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let flags = fields.get(2)?;
        if !flags.contains("master") || flags.contains("fail") {
            return None;
        }
        let owns = fields.iter().skip(8).any(|range| match range.split_once('-') {
            Some((a, b)) => a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b),
            None => range.parse::<u16>() == Ok(slot),
        });
        // `127.0.0.1:port@bus[,hostname]`
        owns.then(|| fields.get(1)?.split('@').next()?.rsplit_once(':')?.1.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies() {
        assert_eq!(bulk("$3\r\nabc\r\n").as_deref(), Some("abc"));
        assert_eq!(bulk_array("*2\r\n$1\r\na\r\n$2\r\nbc\r\n"), vec!["a", "bc"]);
        assert!(bulk_array("*0\r\n").is_empty());
        let nodes = "id1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 6000\n\
                     id2 127.0.0.1:7002@17002 slave id1 0 0 1 connected\n\
                     id3 127.0.0.1:7003@17003 master,fail - 0 0 2 disconnected 5461-5999\n";
        assert_eq!(master_port(nodes, 0), Some(7001));
        assert_eq!(master_port(nodes, 6000), Some(7001));
        assert_eq!(master_port(nodes, 5500), None);
    }
}
