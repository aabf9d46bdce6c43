//! Peer links that can be cut while clients still pass, for the Redis deployments.
//!
//! Redis clients learn node addresses from the deployment itself (Sentinel's
//! `GET-MASTER-ADDR-BY-NAME`, the cluster's slot map), so a proxy a node's peers dial is also the
//! one its clients dial: cutting the proxy would cut both. Instead every node dials out from its
//! own loopback address (`bind-source-addr 127.0.0.x`; all of 127/8 is loopback on Linux, and
//! Redis 7 data nodes, Sentinels and the cluster bus all honour it), while test clients dial from
//! 127.0.0.1. A node's [`FaultProxy`] can then black-hole its peers' connections by source address
//! and let the clients' through.
//!
//! Assumes the peers reach each other only through the proxies: a node announces its proxy
//! (`replica-announce-port`, `cluster-announce-port`, …), never its own port.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use lock_conformance::proxy::FaultProxy;
use lock_core::LockError;

/// The first source address handed out; node `i` of a deployment dials from `FIRST + i`.
const FIRST: u8 = 10;

/// One peer: where it dials from and the proxies in front of the ports its peers dial (none
/// for a peer nobody dials).
struct Peer {
    source: IpAddr,
    proxies: Vec<Arc<FaultProxy>>,
}

/// The peers of one deployment, by index.
#[derive(Default)]
pub(crate) struct PeerLinks {
    peers: Vec<Peer>,
}

impl PeerLinks {
    /// Adds a peer that others dial through a new proxy in front of each of `upstreams` (its
    /// ports: client, cluster bus); returns its source address and the proxies' addresses, in
    /// order (what it must announce).
    pub(crate) async fn add_proxied(
        &mut self,
        upstreams: &[SocketAddr],
    ) -> Result<(IpAddr, Vec<SocketAddr>), LockError> {
        let mut proxies = Vec::new();
        for u in upstreams {
            proxies.push(FaultProxy::start(*u).await?);
        }
        let public = proxies.iter().map(|p| p.local_addr()).collect();
        Ok((self.push(proxies)?, public))
    }

    /// Adds a peer nobody dials (a Sentinel: only clients and other Sentinels do, and those
    /// links are not cut here); returns its source address.
    pub(crate) fn add_dialer(&mut self) -> Result<IpAddr, LockError> {
        self.push(Vec::new())
    }

    fn push(&mut self, proxies: Vec<Arc<FaultProxy>>) -> Result<IpAddr, LockError> {
        let last = u8::try_from(self.peers.len())
            .ok()
            .and_then(|i| FIRST.checked_add(i))
            .ok_or_else(|| LockError::config("too many peers for one deployment's source addresses"))?;
        let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
        self.peers.push(Peer { source, proxies });
        Ok(source)
    }

    /// Cuts (`on`) or heals every link between peer `i` and the others, both directions and
    /// open connections too; clients on 127.0.0.1 keep reaching every peer.
    pub(crate) fn partition(&self, i: usize, on: bool) {
        let Some(cut) = self.peers.get(i) else { return };
        for (_, peer) in self.peers.iter().enumerate().filter(|(j, _)| *j != i) {
            for p in &cut.proxies {
                p.set_source_partitioned(peer.source, on);
            }
            for p in &peer.proxies {
                p.set_source_partitioned(cut.source, on);
            }
        }
    }
}

impl Drop for PeerLinks {
    fn drop(&mut self) {
        for p in self.peers.iter().flat_map(|p| &p.proxies) {
            p.shutdown();
        }
    }
}
