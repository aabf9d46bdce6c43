//! A local Redis Sentinel deployment: one primary, two replicas (`--replicaof`) and three
//! Sentinels (`sentinel monitor <name> 127.0.0.1 <port> 2`), all child processes on free
//! 127.0.0.1 ports in one temp dir, stopped by PID when dropped.
//!
//! Sentinel timings are short (`down-after-milliseconds` [`DOWN_AFTER_MS`], `failover-timeout`
//! [`FAILOVER_TIMEOUT_MS`]) so a failover takes seconds, not minutes. No node persists anything:
//! a node restarted by [`RedisSentinelDeployment::restart`] comes back empty and Sentinel turns it
//! into a replica of the current primary.
//!
//! Peers reach each data node through a proxy in front of it, which the nodes announce
//! (`replica-announce-port`), and each node and Sentinel dials out from its own loopback address
//! (`servers::peer_links`): [`RedisSentinelDeployment::partition`] cuts a data node from the
//! other data nodes and every Sentinel while clients (127.0.0.1) still reach it. Clients are
//! handed the proxies' addresses by the Sentinels, so they always go through them too.
//!
//! For the conformance suite the data nodes together are "the server" ([`ServerControl`]: all
//! three stopped, started empty in the same roles, or paused at once) and the deployment offers
//! node faults ([`DeploymentControl`]: a failover by SIGKILL of the primary, a replica killed,
//! a Sentinel paused, the primary partitioned from its peers).
//!
//! dlock-testkit does not depend on the redis crate, so Sentinels are asked with raw RESP
//! over TCP ([`command`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_conformance::{async_trait, DeploymentControl, ServerControl};
use lock_core::LockError;

use super::local::each_child;
use super::peer_links::PeerLinks;
pub use super::redis::command;
use super::redis::{node_args, redis_binary};
use crate::process::{free_port, wait_for_port, ChildServer};

/// The master name the Sentinels monitor.
pub const MASTER_NAME: &str = "dlockprimary";
/// How long a node must not answer before a Sentinel calls it down. A Sentinel pings every
/// `min(down-after, 1 s)` and also counts from the moment it opens a link, so at 1 s a single
/// late answer was a failure: under load a Sentinel that had just switched to the promoted
/// replica called it down 1.06 s later and a second failover promoted the other replica (7 of
/// 175 runs of `failover_window_without_acks` beside a busy core, 2026-12-07; at 2 s, 0 of 70;
/// docs/deployments.md). At 2 s a node must miss two pings.
pub const DOWN_AFTER_MS: u64 = 2000;
/// Sentinel's failover timeout (also the pause between two failovers of the same master).
pub const FAILOVER_TIMEOUT_MS: u64 = 3000;
/// How long a failover may take here before it counts as failed.
const FAILOVER_WAIT: Duration = Duration::from_secs(30);
/// How long a fresh deployment may take to replicate and be seen by every Sentinel.
const START_WAIT: Duration = Duration::from_secs(30);

/// Which process of the deployment a fault hook acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentinelNode {
    /// Data node `i` (0 is the first primary, 1 and 2 its replicas); after a failover any of
    /// them may be the primary ([`RedisSentinelDeployment::primary_index`]).
    Data(usize),
    /// Sentinel `i` (0..3).
    Sentinel(usize),
}

/// A running primary + 2 replicas + 3 Sentinels.
pub struct RedisSentinelDeployment {
    /// Each data node's public address (its proxy, what everyone dials) and process.
    data: Vec<(SocketAddr, Arc<ChildServer>)>,
    /// Each data node's own address (readiness checks only).
    data_own: Vec<SocketAddr>,
    sentinels: Vec<(SocketAddr, Arc<ChildServer>)>,
    /// Data nodes first (index = data node), then the Sentinels.
    links: PeerLinks,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for RedisSentinelDeployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSentinelDeployment")
            .field("data", &self.data.iter().map(|(a, _)| a).collect::<Vec<_>>())
            .field("sentinels", &self.sentinels.iter().map(|(a, _)| a).collect::<Vec<_>>())
            .finish()
    }
}

impl RedisSentinelDeployment {
    /// Every data node's process, in node order.
    fn data_children(&self) -> Vec<Arc<ChildServer>> {
        self.data.iter().map(|(_, child)| Arc::clone(child)).collect()
    }

    /// Starts the deployment and returns once both replicas are in sync and every Sentinel
    /// knows the primary and both replicas. The primary is marked fresh for the default key
    /// prefix (`SET dlock:boot 0`), like a single test server.
    pub async fn start() -> Result<RedisSentinelDeployment, LockError> {
        // A deployment whose replicas never came online (seen once in a fresh-clone CI run
        // under full load: the primary had had replicas, `connected_slaves:0` for 30 s) is
        // thrown away and started once more, said on stderr; a second failure is the error.
        match Self::start_once().await {
            Err(first) => {
                eprintln!("[testkit] the Sentinel deployment did not start ({first}); starting a fresh one once");
                Self::start_once().await
            }
            started => started,
        }
    }

    async fn start_once() -> Result<RedisSentinelDeployment, LockError> {
        let program = redis_binary()?;
        let dir = tempfile::Builder::new().prefix("dlock-sentinel-").tempdir().map_err(|e| {
            LockError::unavailable_from("test", "cannot create a temp dir for the sentinel deployment", e)
        })?;
        let (mut data, mut data_own, mut links) = (Vec::new(), Vec::new(), PeerLinks::default());
        for i in 0..3 {
            let port = free_port()?;
            let own = SocketAddr::from(([127, 0, 0, 1], port));
            let (source, public) = links.add_proxied(&[own]).await?;
            let addr = public[0];
            let node_dir = subdir(dir.path(), &format!("data{i}"))?;
            let mut args = node_args(port, &node_dir);
            args.extend(dial_from(source));
            args.extend(["--replica-announce-ip", "127.0.0.1", "--replica-announce-port"].map(str::to_owned));
            args.push(addr.port().to_string());
            if let Some((primary, _)) = data.first() {
                let primary: &SocketAddr = primary;
                args.extend(["--replicaof".to_owned(), "127.0.0.1".to_owned(), primary.port().to_string()]);
            }
            let child = Arc::new(ChildServer::new(&program, args, &node_dir));
            child.start()?;
            wait_for_port(own, Duration::from_secs(10)).await?;
            data.push((addr, child));
            data_own.push(own);
        }
        let primary = data[0].0;
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port()?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let source = links.add_dialer()?;
            let node_dir = subdir(dir.path(), &format!("sentinel{i}"))?;
            let conf = node_dir.join("sentinel.conf");
            // announce-ip: a Sentinel would otherwise announce its source address to the
            // others, where it does not listen.
            let text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\nbind-source-addr {source}\n\
                 sentinel announce-ip 127.0.0.1\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER_NAME} 2\n",
                node_dir.display(),
                primary.port()
            );
            std::fs::write(&conf, text)
                .map_err(|e| LockError::unavailable_from("test", "cannot write sentinel.conf", e))?;
            let args = vec![conf.to_string_lossy().into_owned(), "--sentinel".to_owned()];
            let child = Arc::new(ChildServer::new(&program, args, &node_dir));
            child.start()?;
            wait_for_port(addr, Duration::from_secs(10)).await?;
            sentinels.push((addr, child));
        }
        let deployment = RedisSentinelDeployment { data, data_own, sentinels, links, _dir: dir };
        deployment.wait_synced().await?;
        let reply = command(primary, &["SET", "dlock:boot", "0"]).await?;
        if !reply.starts_with("+OK") {
            return Err(LockError::unavailable("test", format!("the primary refused SET dlock:boot 0: {reply}")));
        }
        Ok(deployment)
    }

    /// Waits until the data node the Sentinels name as primary has both others as online
    /// replicas and every Sentinel sees it and two replicas up, no failover in progress. Asks
    /// for the primary each time: after a node fault the Sentinels may still change their minds.
    pub async fn wait_synced(&self) -> Result<(), LockError> {
        let end = Instant::now() + START_WAIT;
        loop {
            let primary = self.primary_index().await.unwrap_or(0);
            let mut ready = true;
            for (addr, _) in &self.sentinels {
                let reply = command(*addr, &["SENTINEL", "REPLICAS", MASTER_NAME]).await.unwrap_or_default();
                // Each replica's entry carries its flags; two entries flagged plain "slave" = both seen and up.
                ready &= reply.matches("flags\r\n$5\r\nslave\r\n").count() >= 2;
                // And the primary flagged plain "master": not down, no failover under way (a
                // pause of every data node leaves the Sentinels deciding for a while after it).
                let master = command(*addr, &["SENTINEL", "MASTER", MASTER_NAME]).await.unwrap_or_default();
                ready &= master.contains("flags\r\n$6\r\nmaster\r\n");
            }
            let info = command(self.data[primary].0, &["INFO", "replication"]).await.unwrap_or_default();
            ready &= info.contains("connected_slaves:2") && info.matches("state=online").count() >= 2;
            if ready {
                return Ok(());
            }
            if Instant::now() >= end {
                let mut replicas = String::new();
                for own in &self.data_own {
                    let info = command(*own, &["INFO", "replication"]).await.unwrap_or_else(|e| e.to_string());
                    replicas.push_str(&format!("\n{own}: {info}"));
                }
                return Err(LockError::unavailable(
                    "test",
                    format!(
                        "the sentinel deployment was not ready after {START_WAIT:?}; last primary info: {info}; \
                         every data node's:{replicas}"
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `redis+sentinel://s1:p1,s2:p2,s3:p3/<master>`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|(a, _)| a.to_string()).collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The address of data node `i`.
    pub fn data_addr(&self, i: usize) -> SocketAddr {
        self.data[i].0
    }

    /// The primary the Sentinels report now (the first one that answers).
    pub async fn primary(&self) -> Result<SocketAddr, LockError> {
        let mut last = String::new();
        for (addr, _) in &self.sentinels {
            match command(*addr, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]).await {
                Ok(reply) => match parse_addr(&reply) {
                    Some(a) => return Ok(a),
                    None => last = reply,
                },
                Err(e) => last = e.to_string(),
            }
        }
        Err(LockError::unavailable("test", format!("no sentinel reported the primary: {last}")))
    }

    /// The index of the data node the Sentinels report as primary.
    pub async fn primary_index(&self) -> Result<usize, LockError> {
        let p = self.primary().await?;
        self.data.iter().position(|(a, _)| *a == p).ok_or_else(|| {
            LockError::unavailable("test", format!("the sentinels name {p}, not a node of this deployment"))
        })
    }

    fn child(&self, node: SentinelNode) -> &Arc<ChildServer> {
        match node {
            SentinelNode::Data(i) => &self.data[i].1,
            SentinelNode::Sentinel(i) => &self.sentinels[i].1,
        }
    }

    /// SIGKILLs a node.
    pub fn kill(&self, node: SentinelNode) {
        self.child(node).stop();
    }

    /// SIGSTOPs (`true`) or SIGCONTs a node.
    pub fn pause(&self, node: SentinelNode, paused: bool) {
        self.child(node).pause(paused);
    }

    /// Starts a killed node again (empty: nothing persists). A data node that is not the
    /// primary the Sentinels name is made a replica of it at once (it starts with its original
    /// arguments, which may name no primary; an empty primary is what the restart quiet period
    /// guards against, so that window is kept to one command).
    pub async fn restart(&self, node: SentinelNode) -> Result<(), LockError> {
        self.child(node).start()?;
        let own = match node {
            SentinelNode::Data(i) => self.data_own[i],
            SentinelNode::Sentinel(i) => self.sentinels[i].0,
        };
        wait_for_port(own, Duration::from_secs(10)).await?;
        if let SentinelNode::Data(i) = node {
            let primary = self.primary().await?;
            if primary != self.data[i].0 {
                self.replicate(i, primary).await?;
            }
        }
        Ok(())
    }

    /// `REPLICAOF` the given primary (or `NO ONE` for itself) on data node `i`.
    async fn replicate(&self, i: usize, primary: SocketAddr) -> Result<(), LockError> {
        let port = primary.port().to_string();
        let args: [&str; 3] =
            if primary == self.data[i].0 { ["REPLICAOF", "NO", "ONE"] } else { ["REPLICAOF", "127.0.0.1", &port] };
        let reply = command(self.data[i].0, &args).await?;
        if !reply.starts_with("+OK") {
            return Err(LockError::unavailable("test", format!("data node {i} refused {args:?}: {reply}")));
        }
        Ok(())
    }

    /// Cuts (`on`) or heals every link between `node` and the other data nodes and the
    /// Sentinels, both directions, open connections included (held, not reset); clients still
    /// reach it. A Sentinel's links to the other Sentinels are not cut (they dial each other
    /// directly).
    pub fn partition(&self, node: SentinelNode, on: bool) {
        let peer = match node {
            SentinelNode::Data(i) => i,
            SentinelNode::Sentinel(i) => self.data.len() + i,
        };
        self.links.partition(peer, on);
    }

    /// SIGKILLs the primary and waits until a Sentinel reports a different one that answers
    /// `ROLE` as master, and until no other data node says it is a primary. Returns the old and
    /// the new primary's indexes and how long the promotion took after the kill.
    pub async fn failover(&self) -> Result<Failover, LockError> {
        let old = self.primary_index().await?;
        let killed_at = Instant::now();
        self.kill(SentinelNode::Data(old));
        let promoted = self.wait_promoted(old, killed_at, FAILOVER_WAIT).await?.ok_or_else(|| {
            LockError::unavailable("test", format!("no replica was promoted within {FAILOVER_WAIT:?}"))
        })?;
        let new = self.wait_one_primary(old, killed_at + FAILOVER_WAIT).await?;
        Ok(Failover { new, ..promoted })
    }

    /// Waits until the primary the Sentinels name is the only data node but `gone` (killed)
    /// that answers `ROLE` as master; its index. A Sentinel that calls the just promoted replica
    /// down starts a second failover, which promotes the other one ([`DOWN_AFTER_MS`]): clients
    /// that reconnected in between stay on the first, which the Sentinels demote only some
    /// seconds later (once they see it answer as a primary), while new connections go to the
    /// second. What clients do after a failover is tested once there is one primary again.
    async fn wait_one_primary(&self, gone: usize, end: Instant) -> Result<usize, LockError> {
        loop {
            let named = self.primary_index().await.ok();
            let mut masters = Vec::new();
            for (i, (addr, _)) in self.data.iter().enumerate().filter(|(i, _)| *i != gone) {
                let role = command(*addr, &["ROLE"]).await.unwrap_or_default();
                if role.contains("$6\r\nmaster") {
                    masters.push(i);
                }
            }
            match named {
                Some(n) if masters == [n] => return Ok(n),
                _ if Instant::now() >= end => {
                    return Err(LockError::unavailable(
                        "test",
                        format!("the Sentinels name node {named:?}, and nodes {masters:?} answer as primaries"),
                    ))
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Waits up to `within` until a Sentinel reports a primary other than `old` that answers
    /// `ROLE` as master; `since` is when the fault began. `None` if none was by then.
    pub async fn wait_promoted(
        &self,
        old: usize,
        since: Instant,
        within: Duration,
    ) -> Result<Option<Failover>, LockError> {
        let end = Instant::now() + within;
        loop {
            if let Ok(new) = self.primary_index().await {
                if new != old {
                    let role = command(self.data[new].0, &["ROLE"]).await.unwrap_or_default();
                    if role.contains("master") {
                        return Ok(Some(Failover { old, new, promoted_after: since.elapsed() }));
                    }
                }
            }
            if Instant::now() >= end {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The data nodes as one server: stopped, started (empty, the primary the Sentinels name as
/// primary again, the others its replicas) or paused together.
#[async_trait]
impl ServerControl for RedisSentinelDeployment {
    async fn stop(&self) -> Result<(), LockError> {
        each_child(&self.data_children(), ChildServer::stop).await
    }

    async fn start(&self) -> Result<(), LockError> {
        for ((_, child), own) in self.data.iter().zip(&self.data_own) {
            child.start()?;
            wait_for_port(*own, Duration::from_secs(10)).await?;
        }
        // The Sentinels still name the primary of before the stop; restore that topology.
        let primary = self.primary_index().await?;
        for i in 0..self.data.len() {
            self.replicate(i, self.data[primary].0).await?;
        }
        self.wait_synced().await
    }

    /// Pauses every data node, or resumes them and waits until the deployment serves as before
    /// (the Sentinels saw them all down, and the next case must not meet their decisions).
    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        each_child(&self.data_children(), move |c: &ChildServer| c.pause(paused)).await?;
        if paused {
            return Ok(());
        }
        self.wait_synced().await
    }

    /// Nothing is saved: a restarted data node is empty.
    fn persistent(&self) -> bool {
        false
    }
}

/// Node faults: the primary SIGKILLed (Sentinel promotes a replica; the old primary comes
/// back empty as a replica of the new one), a replica killed and restarted, a Sentinel paused,
/// the primary cut from its replicas and the Sentinels while its clients still reach it (when
/// the cut outlasts `down-after-milliseconds` a replica is promoted and, once healed, the old
/// primary is demoted and resynced by the Sentinels).
#[async_trait]
impl DeploymentControl for RedisSentinelDeployment {
    fn faults(&self) -> Vec<&'static str> {
        vec!["failover", "kill-replica", "pause-sentinel", "partition-primary"]
    }

    async fn inject(&self, fault: &str, span: Duration) -> Result<String, LockError> {
        let started = Instant::now();
        let what = match fault {
            "failover" => {
                let f = self.failover().await?;
                tokio::time::sleep(span).await;
                self.restart(SentinelNode::Data(f.old)).await?;
                format!(
                    "primary {} killed, {} promoted after {} ms, the old one back as a replica",
                    f.old,
                    f.new,
                    f.promoted_after.as_millis()
                )
            }
            "kill-replica" => {
                let primary = self.primary_index().await?;
                let replica = (primary + 1) % self.data.len();
                self.kill(SentinelNode::Data(replica));
                tokio::time::sleep(span).await;
                self.restart(SentinelNode::Data(replica)).await?;
                format!("replica {replica} killed for {} ms", span.as_millis())
            }
            "pause-sentinel" => {
                self.pause(SentinelNode::Sentinel(0), true);
                tokio::time::sleep(span).await;
                self.pause(SentinelNode::Sentinel(0), false);
                format!("sentinel 0 paused for {} ms", span.as_millis())
            }
            "partition-primary" => {
                let old = self.primary_index().await?;
                self.partition(SentinelNode::Data(old), true);
                let promoted = self.wait_promoted(old, started, span).await;
                tokio::time::sleep(span.saturating_sub(started.elapsed())).await;
                self.partition(SentinelNode::Data(old), false);
                match promoted? {
                    Some(f) => format!(
                        "primary {old} cut off from its peers for {} ms, {} promoted after {} ms",
                        span.as_millis(),
                        f.new,
                        f.promoted_after.as_millis()
                    ),
                    None => format!("primary {old} cut off from its peers for {} ms, no promotion", span.as_millis()),
                }
            }
            other => return Err(LockError::config(format!("unknown sentinel deployment fault {other:?}"))),
        };
        self.wait_synced().await?;
        Ok(format!(
            "{what}; primary {}, both replicas in sync {} ms after the fault began",
            self.primary_index().await?,
            started.elapsed().as_millis()
        ))
    }
}

/// What [`RedisSentinelDeployment::failover`] observed.
#[derive(Clone, Copy, Debug)]
pub struct Failover {
    /// The data node that was primary (now killed).
    pub old: usize,
    /// The promoted data node.
    pub new: usize,
    /// From the SIGKILL until the Sentinels reported the new primary and it answered as master.
    pub promoted_after: Duration,
}

/// Makes a node dial its peers from `source` (see `servers::peer_links`).
pub(crate) fn dial_from(source: IpAddr) -> [String; 2] {
    ["--bind-source-addr".to_owned(), source.to_string()]
}

pub(crate) fn subdir(base: &std::path::Path, name: &str) -> Result<std::path::PathBuf, LockError> {
    let d = base.join(name);
    std::fs::create_dir_all(&d).map_err(|e| LockError::unavailable_from("test", "cannot create a node dir", e))?;
    Ok(d)
}

/// Parses the two-bulk-string reply `[host, port]` of `SENTINEL GET-MASTER-ADDR-BY-NAME`.
fn parse_addr(reply: &str) -> Option<SocketAddr> {
    let parts: Vec<&str> = reply.split("\r\n").collect();
    // *2, $len, host, $len, port
    if parts.first() != Some(&"*2") {
        return None;
    }
    let host = parts.get(2)?;
    let port: u16 = parts.get(4)?.parse().ok()?;
    format!("{host}:{port}").parse().ok()
}
