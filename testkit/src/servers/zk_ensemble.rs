//! A local ZooKeeper ensemble (`QuorumPeerMain` × n from the installed jars) whose peer links can
//! be cut: every member names each other member through its own [`FaultProxy`] (one for the
//! quorum port, one for the election port, per direction), so a member can be partitioned from
//! the rest while its clients still reach it — the follower that keeps answering reads for a
//! session the leader already expired (CURATOR-498).
//!
//! `syncLimit × tickTime` is how long a follower cut off from the leader keeps serving; it is
//! [`EnsembleOptions::sync_limit`] × [`EnsembleOptions::tick`] ([`TICK`] by default). Members are stopped by PID when dropped.
//!
//! For the conformance suite the ensemble is "the server" ([`ServerControl`](crate::ServerControl):
//! every member stopped, started or paused at once) and offers node faults
//! ([`DeploymentControl`]: the leader or a follower killed and restarted, a follower's peer links
//! cut and healed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lock_conformance::proxy::FaultProxy;
use lock_conformance::{async_trait, ClientLink, DeploymentControl};
use lock_core::LockError;

use super::deployment::{check_size, Deployment, Kind};
use super::local::LocalServer;
use super::zookeeper::{classpath, four_letters, java, quorum_peer_args, serves, TICK};
use crate::process::{free_port, ChildServer};

/// How long a fresh ensemble may take to elect a leader (three cold JVMs on two busy cores; CI
/// once saw no leader within 90 s while other suites ran).
const START_TIMEOUT: Duration = Duration::from_secs(150);

/// Shape of the ensemble: `EnsembleOptions { sync_limit: 40, ..EnsembleOptions::default() }`.
#[derive(Clone, Debug)]
pub struct EnsembleOptions {
    /// Members (3 or 5).
    pub members: usize,
    /// Ticks a follower may lag or be cut off from the leader before it gives up.
    pub sync_limit: u32,
    /// The members' `tickTime` ([`TICK`] unless set; ZooKeeper's own default is 2 s);
    /// `minSessionTimeout` is two ticks.
    pub tick: Duration,
}

impl Default for EnsembleOptions {
    fn default() -> Self {
        EnsembleOptions { members: 3, sync_limit: 5, tick: TICK }
    }
}

/// A running ensemble: its members (a [`Deployment`]: as a [`ServerControl`](crate::ServerControl)
/// every member stopped, started or paused at once), and the proxies between them.
pub type ZkEnsemble = Deployment<Zk>;

/// What a [`ZkEnsemble`] has beside its members: the proxies each member dials to reach the
/// others (quorum and election of each), as (from, to, proxy) by member index.
pub struct Zk {
    links: Vec<(usize, usize, Arc<FaultProxy>)>,
}

#[async_trait]
impl Kind for Zk {
    const SETTLES_ON_RESUME: bool = true;

    async fn leads(addr: SocketAddr) -> Option<bool> {
        let srvr = four_letters(addr, "srvr").await;
        if srvr.contains("Mode: leader") {
            Some(true)
        } else {
            srvr.contains("Mode: follower").then_some(false)
        }
    }

    async fn settle(ensemble: &ZkEnsemble) -> Result<(), LockError> {
        ensemble.wait_quorum(START_TIMEOUT).await
    }
}

impl ZkEnsemble {
    /// Starts `options.members` members on free ports and waits until one leads and the others
    /// follow.
    pub async fn start(options: EnsembleOptions) -> Result<ZkEnsemble, LockError> {
        let n = options.members;
        check_size("an ensemble", n)?;
        let missing = |what: &str| {
            LockError::unavailable("test", format!("{what} not found; install ZooKeeper (apt-get install zookeeper)"))
        };
        let cp = classpath().ok_or_else(|| missing("the ZooKeeper jars"))?;
        let java = java().ok_or_else(|| missing("java"))?;
        let dir = tempfile::Builder::new()
            .prefix("dlock-zk-ensemble-")
            .tempdir()
            .map_err(|e| LockError::unavailable_from("test", "cannot create a temp dir", e))?;
        let local = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let mut ports = Vec::new();
        for _ in 0..n {
            ports.push((free_port()?, free_port()?, free_port()?));
        }
        let (mut members, mut links) = (Vec::new(), Vec::new());
        for i in 0..n {
            let mut servers = String::new();
            for (j, &(_, quorum, election)) in ports.iter().enumerate() {
                let (q, e) = if i == j {
                    (quorum, election)
                } else {
                    let pq = FaultProxy::start(local(quorum)).await?;
                    let pe = FaultProxy::start(local(election)).await?;
                    let addrs = (pq.local_addr().port(), pe.local_addr().port());
                    links.push((i, j, pq));
                    links.push((i, j, pe));
                    addrs
                };
                servers += &format!("server.{}=127.0.0.1:{q}:{e}\n", j + 1);
            }
            let home = dir.path().join(format!("m{}", i + 1));
            let data = home.join("data");
            let cfg = home.join("zoo.cfg");
            let config = format!(
                "tickTime={tick}\ninitLimit=50\nsyncLimit={sync}\ndataDir={data}\nclientPort={client}\n\
                 clientPortAddress=127.0.0.1\nminSessionTimeout={min}\nmaxSessionTimeout=120000\nmaxClientCnxns=0\n\
                 admin.enableServer=false\n4lw.commands.whitelist=*\nautopurge.purgeInterval=0\n\
                 reconfigEnabled=false\ncnxTimeout=1000\n{servers}",
                tick = options.tick.as_millis(),
                sync = options.sync_limit,
                data = data.display(),
                client = ports[i].0,
                min = (options.tick * 2).as_millis(),
            );
            std::fs::create_dir_all(&data)
                .and_then(|_| std::fs::write(data.join("myid"), format!("{}\n", i + 1)))
                .and_then(|_| std::fs::write(&cfg, config))
                .map_err(|e| LockError::unavailable_from("test", "cannot write the member's config", e))?;
            let mut args = quorum_peer_args(&cp, &cfg);
            // Re-elect within a second or two after a member dies (the default back-off between
            // election notifications grows to 60 s).
            args.splice(
                0..0,
                [
                    "-Dzookeeper.fastleader.minNotificationInterval=100".to_owned(),
                    "-Dzookeeper.fastleader.maxNotificationInterval=800".to_owned(),
                ],
            );
            let child = ChildServer::new(java.clone(), args, &home);
            let client = local(ports[i].0);
            let server = LocalServer::persistent(&format!("ZooKeeper member {}", i + 1), child, client, START_TIMEOUT)
                .ready_when(serves);
            members.push(Arc::new(server));
        }
        let proxies = links.iter().map(|(_, _, p)| Arc::clone(p)).collect();
        Deployment::start_members(members, proxies, Zk { links }, dir).await
    }

    /// `zk://h1:p1,h2:p2,…` naming every member.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.client_addrs().iter().map(|a| a.to_string()).collect();
        format!("zk://{}", hosts.join(","))
    }

    /// `zk://<member i>` alone (a client pinned to one member), with `root` as its root path.
    pub fn member_url(&self, i: usize, root: &str) -> String {
        let addr = self.client_addrs().get(i).map(|a| a.to_string()).unwrap_or_default();
        format!("zk://{addr}/{}", root.trim_start_matches('/'))
    }

    /// Every member but `i`, as a URL with `root`.
    pub fn others_url(&self, i: usize, root: &str) -> String {
        let hosts: Vec<String> =
            self.client_addrs().iter().enumerate().filter(|(j, _)| *j != i).map(|(_, a)| a.to_string()).collect();
        format!("zk://{}/{}", hosts.join(","), root.trim_start_matches('/'))
    }

    /// Cuts (or heals) member `i`'s links to every other member, both directions; its clients
    /// still reach it.
    pub async fn partition(&self, i: usize, on: bool) {
        for p in self.links_of(i) {
            p.set_partitioned(on).await;
        }
    }

    /// Delays every chunk on member `i`'s links to the others (both directions) by `latency`
    /// (zero heals): within `syncLimit` it stays in the quorum but learns of commits late, so
    /// its local reads lag behind what the leader and the other follower already committed.
    pub async fn slow_links(&self, i: usize, latency: Duration) {
        for p in self.links_of(i) {
            p.set_latency(latency).await;
        }
    }

    /// The proxies on member `i`'s links to the others, both directions.
    fn links_of(&self, i: usize) -> impl Iterator<Item = &Arc<FaultProxy>> {
        self.kind().links.iter().filter(move |(from, to, _)| *from == i || *to == i).map(|(_, _, p)| p)
    }

    /// Waits until one member leads and every member serves.
    pub async fn wait_quorum(&self, within: Duration) -> Result<(), LockError> {
        self.wait_serving(within, self.members().len()).await
    }

    /// Waits until one member leads and a majority serves (after a member was stopped).
    pub async fn wait_leader(&self, within: Duration) -> Result<(), LockError> {
        self.wait_serving(within, self.members().len() / 2 + 1).await
    }

    async fn wait_serving(&self, within: Duration, needed: usize) -> Result<(), LockError> {
        let end = tokio::time::Instant::now() + within;
        loop {
            let mut modes = Vec::new();
            for m in self.members() {
                modes.push(four_letters(m.addr(), "srvr").await);
            }
            let leaders = modes.iter().filter(|s| s.contains("Mode: leader")).count();
            let serving = modes.iter().filter(|s| s.contains("Mode:")).count();
            if leaders == 1 && serving >= needed {
                return Ok(());
            }
            if tokio::time::Instant::now() >= end {
                let logs: Vec<String> = (0..self.members().len()).map(|i| self.log(i)).collect();
                return Err(LockError::unavailable(
                    "test",
                    format!("the ensemble had no leader within {within:?}; logs:\n{}", logs.join("\n----\n")),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Node faults, one member at a time; the other two keep a quorum throughout.
#[async_trait]
impl DeploymentControl for ZkEnsemble {
    fn faults(&self) -> Vec<&'static str> {
        vec!["kill-leader", "kill-follower", "partition-follower"]
    }

    async fn inject(&self, fault: &str, span: Duration) -> Result<String, LockError> {
        self.inject_with(fault, span, async |_, follower| match (fault, follower) {
            ("partition-follower", Some(i)) => {
                self.partition(i, true).await;
                tokio::time::sleep(span).await;
                self.partition(i, false).await;
                Ok(Some(format!("member {} cut off from its peers for {} ms", i + 1, span.as_millis())))
            }
            ("partition-follower", None) => Ok(None),
            (other, _) => Err(LockError::config(format!("unknown ensemble fault {other:?}"))),
        })
        .await
    }
}
