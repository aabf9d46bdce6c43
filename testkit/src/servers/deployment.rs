//! The one shape of a local deployment, an etcd cluster or a ZooKeeper ensemble: members that
//! are [`LocalServer`]s with their data in one temp dir, and fault proxies in front of them or
//! between them. As a [`ServerControl`] it is the whole deployment (every member stopped,
//! started or paused at once); its member faults kill and restart the leader or a follower, and
//! a kind adds faults of its own. What differs per kind is its [`Kind`]: how a member says
//! whether it leads, and when the deployment serves again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lock_conformance::proxy::FaultProxy;
use lock_conformance::{async_trait, ServerControl};
use lock_core::LockError;

use super::local::LocalServer;

/// A local deployment of kind `K` (see the module docs). Dropping it stops every member and
/// every proxy.
pub struct Deployment<K> {
    members: Vec<Arc<LocalServer>>,
    /// Every fault proxy of the deployment, the kind's included.
    proxies: Vec<Arc<FaultProxy>>,
    kind: K,
    _dir: tempfile::TempDir,
}

/// What a kind of local deployment says for itself.
#[async_trait]
pub trait Kind: Send + Sync + Sized + 'static {
    /// Whether a resume waits until the deployment serves again, as a start does.
    const SETTLES_ON_RESUME: bool;

    /// Whether the member at `addr` answers, and then whether it leads.
    async fn leads(addr: SocketAddr) -> Option<bool>;

    /// Waits until `deployment` serves again, after a start, a resume or a member fault.
    async fn settle(deployment: &Deployment<Self>) -> Result<(), LockError>;
}

impl<K: Kind> Deployment<K> {
    /// Starts `members` (in `dir`, behind or between `proxies`) and returns once the deployment
    /// serves.
    pub(crate) async fn start_members(
        members: Vec<Arc<LocalServer>>,
        proxies: Vec<Arc<FaultProxy>>,
        kind: K,
        dir: tempfile::TempDir,
    ) -> Result<Deployment<K>, LockError> {
        let deployment = Deployment { members, proxies, kind, _dir: dir };
        start_each(&deployment.members).await?;
        K::settle(&deployment).await?;
        Ok(deployment)
    }

    /// The kind's own parts (its proxies by role, what it found out at start).
    pub(crate) fn kind(&self) -> &K {
        &self.kind
    }

    /// Every member's server, in member order.
    pub(crate) fn members(&self) -> &[Arc<LocalServer>] {
        &self.members
    }

    /// The client address of every member itself (no proxy in between).
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.members.iter().map(|m| m.addr()).collect()
    }

    /// The index of the member that leads now, if one answers so.
    pub async fn leader(&self) -> Option<usize> {
        self.first_member(Some(true)).await
    }

    /// The index of a member that answers and does not lead.
    pub async fn follower(&self) -> Option<usize> {
        self.first_member(Some(false)).await
    }

    async fn first_member(&self, leads: Option<bool>) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if K::leads(m.addr()).await == leads {
                return Some(i);
            }
        }
        None
    }

    /// Stop / start / pause of member `i`.
    pub fn control(&self, i: usize) -> Option<Arc<dyn ServerControl>> {
        self.members.get(i).map(|m| Arc::clone(m) as _)
    }

    /// The member's server log, for failure reports.
    pub fn log(&self, i: usize) -> String {
        self.members.get(i).map(|m| m.log()).unwrap_or_default()
    }

    /// A member fault: `kill-leader` or `kill-follower` (SIGKILLed, restarted after `span`), any
    /// other through `own`, given the leader and a follower found now (`Ok(None)`: no member has
    /// the role it needs). Then waits until the deployment serves again, and says what was done
    /// and how long after the fault began that was.
    pub(crate) async fn inject_with(
        &self,
        fault: &str,
        span: Duration,
        own: impl AsyncFnOnce(Option<usize>, Option<usize>) -> Result<Option<String>, LockError>,
    ) -> Result<String, LockError> {
        let (leader, follower) = (self.leader().await, self.follower().await);
        let started = tokio::time::Instant::now();
        let done = match (fault, leader, follower) {
            ("kill-leader", Some(i), _) | ("kill-follower", _, Some(i)) => {
                self.members[i].kill_for(span).await?;
                Some(format!("member {} ({}) killed for {} ms", i + 1, &fault[5..], span.as_millis()))
            }
            ("kill-leader" | "kill-follower", _, _) => None,
            _ => own(leader, follower).await?,
        };
        let Some(what) = done else {
            // Mid-election: no member has that role now; the next fault will find one.
            return Ok(format!("no member in that role to hurt (leader {leader:?}, follower {follower:?})"));
        };
        K::settle(self).await?;
        Ok(format!("{what}; every member served again {} ms after the fault began", started.elapsed().as_millis()))
    }
}

impl<K> std::fmt::Debug for Deployment<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clients: Vec<SocketAddr> = self.members.iter().map(|m| m.addr()).collect();
        f.debug_struct("Deployment").field("clients", &clients).finish()
    }
}

/// The whole deployment as one server: what the suite's server fault cases mean for it.
#[async_trait]
impl<K: Kind> ServerControl for Deployment<K> {
    async fn stop(&self) -> Result<(), LockError> {
        for m in &self.members {
            m.stop().await?;
        }
        Ok(())
    }

    async fn start(&self) -> Result<(), LockError> {
        start_each(&self.members).await?;
        K::settle(self).await
    }

    /// Where the kind [settles on resume](Kind::SETTLES_ON_RESUME), a resume returns once the
    /// deployment serves again, as `start` does: members paused together may elect a leader
    /// anew, and the cases expect the deployment back when this returns (`fault_server_pause`
    /// saw "cannot connect" on three attempts in a row right after it on a ZooKeeper ensemble).
    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        for m in &self.members {
            m.pause(paused).await?;
        }
        if paused || !K::SETTLES_ON_RESUME {
            return Ok(());
        }
        K::settle(self).await
    }

    /// Every member keeps its data (etcd's write-ahead log and snapshots: keys, leases and
    /// revisions; ZooKeeper's snapshot and transaction log: sessions and nodes).
    fn persistent(&self) -> bool {
        true
    }
}

impl<K> Drop for Deployment<K> {
    fn drop(&mut self) {
        for p in &self.proxies {
            p.shutdown();
        }
        for m in &self.members {
            m.child().stop();
        }
    }
}

/// A deployment of `n` members as `what` ("an etcd cluster") asks for, or why not: 1 to 7.
pub(crate) fn check_size(what: &str, n: usize) -> Result<(), LockError> {
    if (1..=7).contains(&n) {
        Ok(())
    } else {
        Err(LockError::config(format!("{what} of {n} members; use 3 or 5")))
    }
}

/// Starts every one of `members` at once — a member of a quorum serves only once a quorum runs,
/// so one started alone would never be ready — and waits for each.
async fn start_each(members: &[Arc<LocalServer>]) -> Result<(), LockError> {
    let mut starting = tokio::task::JoinSet::new();
    for m in members {
        let m = Arc::clone(m);
        starting.spawn(async move { m.start().await });
    }
    while let Some(started) = starting.join_next().await {
        started.map_err(|e| LockError::unavailable_from("test", "a member's start task failed", e))??;
    }
    Ok(())
}
