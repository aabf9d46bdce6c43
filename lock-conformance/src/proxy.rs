//! An in-process TCP fault proxy (tokio) between clients and a server.
//!
//! Point a client at [`FaultProxy::local_addr`] instead of the server; the proxy forwards bytes
//! both ways and can, at any moment:
//!
//! - **partition** ([`ClientLink::set_partitioned`]): stop forwarding in both directions while
//!   keeping every connection open. Bytes are held, not dropped, as TCP retransmission would
//!   deliver them once the network heals; new connections are accepted but not connected
//!   upstream until the partition ends. Clients therefore see requests that never answer — the
//!   hardest failure for a lock client, which must time out on its own.
//! - partition **by source** ([`FaultProxy::set_source_partitioned`]): the same black hole for
//!   the connections from one source IP only (a deployment whose nodes dial out from their own
//!   loopback address, 127.0.0.x, cut from their peers while clients on 127.0.0.1 pass);
//! - add **latency** ([`ClientLink::set_latency`]) to every chunk, in each direction;
//! - **reset** every open connection ([`ClientLink::reset_connections`]) with a TCP RST; new
//!   connections are still accepted.
//!
//! [`ProxyGroup`] drives several proxies as one link (Redlock's N masters), and can also cut a
//! subset of them.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use lock_conformance::{proxy::FaultProxy, ClientLink};
//! let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let proxy = FaultProxy::start(upstream.local_addr().unwrap()).await?;
//! // connect clients to proxy.local_addr() …
//! proxy.set_partitioned(true).await;
//! proxy.set_partitioned(false).await;
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::ClientLink;

/// How long the proxy waits for the upstream server to accept a connection. A refused or
/// silent upstream closes the client's connection, as the real server would appear.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What is black-holed: everything, or the connections from some source addresses.
#[derive(Clone, Debug, Default)]
struct Cut {
    all: bool,
    sources: BTreeSet<IpAddr>,
}

impl Cut {
    fn blocks(&self, peer: IpAddr) -> bool {
        self.all || self.sources.contains(&peer)
    }
}

/// An in-process TCP proxy with fault switches. Dropping the last `Arc` (or calling
/// [`FaultProxy::shutdown`]) closes the listener and every connection.
pub struct FaultProxy {
    local: SocketAddr,
    upstream: SocketAddr,
    partitioned: watch::Sender<Cut>,
    latency_us: Arc<AtomicU64>,
    /// Cancelled (and replaced) by a reset; every connection holds a child token.
    generation: Mutex<CancellationToken>,
    /// Cancelled on shutdown/drop: ends the accept loop and every connection.
    stop: CancellationToken,
    connections: Arc<AtomicU64>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("local", &self.local)
            .field("upstream", &self.upstream)
            .field("partitioned", &*self.partitioned.borrow())
            .field("latency", &self.latency())
            .finish()
    }
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards every accepted connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Arc<FaultProxy>, LockError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| LockError::unavailable_from("proxy", "cannot bind a local port for the fault proxy", e))?;
        let local = listener
            .local_addr()
            .map_err(|e| LockError::unavailable_from("proxy", "the fault proxy's socket has no address", e))?;
        let (partitioned, _) = watch::channel(Cut::default());
        let proxy = Arc::new(FaultProxy {
            local,
            upstream,
            partitioned,
            latency_us: Arc::new(AtomicU64::new(0)),
            generation: Mutex::new(CancellationToken::new()),
            stop: CancellationToken::new(),
            connections: Arc::new(AtomicU64::new(0)),
        });
        let weak = Arc::downgrade(&proxy);
        let stop = proxy.stop.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = stop.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Some(proxy) = weak.upgrade() else { return };
                match accepted {
                    Ok((client, peer)) => proxy.serve(client, peer.ip()),
                    Err(e) => {
                        tracing::debug!(error = %e, "fault proxy accept failed");
                        // Out of descriptors and the like: back off instead of spinning.
                        drop(proxy);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        });
        Ok(proxy)
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The server the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Whether all traffic is black-holed now.
    pub fn is_partitioned(&self) -> bool {
        self.partitioned.borrow().all
    }

    /// Black-holes (`on`) or lets through again the connections whose source address is
    /// `source`, open ones included, as [`ClientLink::set_partitioned`] does for all of them.
    pub fn set_source_partitioned(&self, source: IpAddr, on: bool) {
        self.partitioned.send_modify(|cut| {
            if on {
                cut.sources.insert(source);
            } else {
                cut.sources.remove(&source);
            }
        });
    }

    /// The latency added to each forwarded chunk.
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_us.load(Ordering::SeqCst))
    }

    /// How many connections the proxy has accepted so far.
    pub fn connections_accepted(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }

    /// Closes the listener and resets every connection; the proxy stays dead afterwards.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    fn current_generation(&self) -> CancellationToken {
        self.generation.lock().unwrap_or_else(|e| e.into_inner()).child_token()
    }

    fn serve(&self, client: TcpStream, peer: IpAddr) {
        self.connections.fetch_add(1, Ordering::SeqCst);
        let conn = self.current_generation();
        let stop = self.stop.clone();
        let upstream = self.upstream;
        let partitioned = self.partitioned.subscribe();
        let latency = Arc::clone(&self.latency_us);
        tokio::spawn(async move {
            let _ = client.set_nodelay(true);
            let run = async {
                // A partitioned network does not let the handshake through either.
                let mut p = partitioned.clone();
                let _ = p.wait_for(|cut| !cut.blocks(peer)).await;
                let server = match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%upstream, error = %e, "fault proxy: upstream refused");
                        return None;
                    }
                    Err(_) => {
                        tracing::debug!(%upstream, "fault proxy: upstream connect timed out");
                        return None;
                    }
                };
                let _ = server.set_nodelay(true);
                Some(server)
            };
            let server = tokio::select! {
                _ = conn.cancelled() => None,
                _ = stop.cancelled() => None,
                s = run => s,
            };
            let Some(server) = server else {
                let _ = client.set_zero_linger();
                return;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let cut = {
                let up = pump(&mut cr, &mut sw, (partitioned.clone(), peer), Arc::clone(&latency));
                let down = pump(&mut sr, &mut cw, (partitioned, peer), latency);
                // A clean EOF only half-closes (the pump shuts its write side), as a real peer
                // would; the connection ends when both directions have ended.
                tokio::select! {
                    _ = conn.cancelled() => true,
                    _ = stop.cancelled() => true,
                    _ = async { tokio::join!(up, down) } => false,
                }
            };
            if cut {
                // Zero linger makes the close an RST: a reset looks like a reset to both peers.
                for stream in [cr.reunite(cw), sr.reunite(sw)].into_iter().flatten() {
                    let _ = stream.set_zero_linger();
                }
            }
        });
    }
}

/// Copies `from` to `to` of a connection from `peer`, holding bytes while that peer is cut off
/// and delivering each chunk `latency` after it was read. The delay is a constant offset, not a per-chunk pause: a reader task
/// stamps each chunk with its due time and a writer task waits for it, so chatty protocols
/// (ZooKeeper pings) see the configured latency instead of a growing queue. Returns when
/// `from` reaches EOF (after draining) or either side fails.
async fn pump(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    (partitioned, peer): (watch::Receiver<Cut>, IpAddr),
    latency_us: Arc<AtomicU64>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(64);
    let mut cut_r = partitioned.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            if cut_r.wait_for(|cut| !cut.blocks(peer)).await.is_err() {
                break;
            }
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let due = tokio::time::Instant::now() + Duration::from_micros(latency_us.load(Ordering::SeqCst));
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let mut cut_w = partitioned;
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            // Not even a zero sleep without latency: the timer's 1 ms granularity would add a
            // millisecond to every chunk (it did: 3 ms per request instead of 0.5 ms).
            if due > tokio::time::Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            // A partition that began while this chunk was in flight holds it too.
            if cut_w.wait_for(|cut| !cut.blocks(peer)).await.is_err() {
                break;
            }
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::pin!(writer);
    tokio::select! {
        _ = &mut writer => {}
        // EOF from the source: deliver what is in flight, then half-close.
        _ = reader => writer.await,
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[async_trait]
impl ClientLink for FaultProxy {
    async fn set_partitioned(&self, on: bool) {
        self.partitioned.send_modify(|cut| cut.all = on);
    }

    async fn set_latency(&self, latency: Duration) {
        self.latency_us.store(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    async fn reset_connections(&self) {
        let old = {
            let mut g = self.generation.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *g, CancellationToken::new())
        };
        old.cancel();
    }
}

/// Several proxies driven as one link (e.g. one per Redlock master). Faults apply to every
/// member; [`ProxyGroup::member`] gives one proxy to cut a minority or a majority.
#[derive(Clone, Debug)]
pub struct ProxyGroup {
    proxies: Vec<Arc<FaultProxy>>,
}

impl ProxyGroup {
    /// Starts one proxy per upstream, in order.
    pub async fn start(upstreams: &[SocketAddr]) -> Result<ProxyGroup, LockError> {
        let mut proxies = Vec::with_capacity(upstreams.len());
        for u in upstreams {
            proxies.push(FaultProxy::start(*u).await?);
        }
        Ok(ProxyGroup { proxies })
    }

    /// Groups proxies that were started already.
    pub fn new(proxies: Vec<Arc<FaultProxy>>) -> ProxyGroup {
        ProxyGroup { proxies }
    }

    /// The members, in order.
    pub fn proxies(&self) -> &[Arc<FaultProxy>] {
        &self.proxies
    }

    /// The member at `index`.
    pub fn member(&self, index: usize) -> Option<&Arc<FaultProxy>> {
        self.proxies.get(index)
    }

    /// The addresses clients connect to, in order.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.proxies.iter().map(|p| p.local_addr()).collect()
    }

    /// Partitions the first `count` members (and heals the others).
    pub async fn partition_first(&self, count: usize) {
        for (i, p) in self.proxies.iter().enumerate() {
            p.set_partitioned(i < count).await;
        }
    }
}

#[async_trait]
impl ClientLink for ProxyGroup {
    async fn set_partitioned(&self, on: bool) {
        for p in &self.proxies {
            p.set_partitioned(on).await;
        }
    }

    async fn set_latency(&self, latency: Duration) {
        for p in &self.proxies {
            p.set_latency(latency).await;
        }
    }

    async fn reset_connections(&self) {
        for p in &self.proxies {
            p.reset_connections().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        match tokio::time::timeout(within, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn forwards_partitions_delays_and_resets() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, Duration::from_secs(2)).await.as_deref(), Some(&b"ping"[..]));

        proxy.set_partitioned(true).await;
        let mut held = [0u8; 4];
        s.write_all(b"pong").await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut held)).await.is_err());
        proxy.set_partitioned(false).await;
        // The held bytes arrive after healing, as TCP would deliver them.
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut held)).await.unwrap().unwrap();
        assert_eq!(&held, b"pong");

        proxy.set_latency(Duration::from_millis(150)).await;
        let t = std::time::Instant::now();
        assert!(roundtrip(&mut s, Duration::from_secs(3)).await.is_some());
        assert!(t.elapsed() >= Duration::from_millis(300), "latency applies both ways: {:?}", t.elapsed());
        proxy.set_latency(Duration::ZERO).await;

        proxy.reset_connections().await;
        let mut buf = [0u8; 4];
        let r = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await.unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "connection must be closed after a reset: {r:?}");
        let mut s2 = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert!(roundtrip(&mut s2, Duration::from_secs(2)).await.is_some(), "new connections still work");
        assert_eq!(proxy.connections_accepted(), 2);
    }

    #[tokio::test]
    async fn latency_is_an_offset_not_a_throughput_cap() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        proxy.set_latency(Duration::from_millis(100)).await;
        let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let t = std::time::Instant::now();
        for _ in 0..10 {
            s.write_all(b"ping").await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut buf = [0u8; 40];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf)).await.unwrap().unwrap();
        // 10 chunks, 100 ms each way: ~0.3 s as a delay line; 2 s if chunks queued behind each other.
        assert!(t.elapsed() < Duration::from_millis(1000), "latency accumulated: {:?}", t.elapsed());
        assert!(t.elapsed() >= Duration::from_millis(200), "latency missing: {:?}", t.elapsed());
    }

    /// A connection from 127.0.0.2 (a node dialling out from its own loopback address) is held
    /// while that source is cut; one from 127.0.0.1 passes throughout.
    #[tokio::test]
    async fn source_partition_cuts_one_peer() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let (node, at): (IpAddr, _) = ([127, 0, 0, 2].into(), proxy.local_addr());
        let from_node = || async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(node, 0)).unwrap();
            socket.connect(at).await.unwrap()
        };
        let mut open = from_node().await;
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        proxy.set_source_partitioned(node, true);
        assert!(!proxy.is_partitioned(), "a source cut is not a full partition");
        assert!(
            roundtrip(&mut open, Duration::from_millis(300)).await.is_none(),
            "open connection from the cut source"
        );
        let mut fresh = from_node().await;
        assert!(
            roundtrip(&mut fresh, Duration::from_millis(300)).await.is_none(),
            "new connection from the cut source"
        );
        assert!(roundtrip(&mut client, Duration::from_secs(2)).await.is_some(), "127.0.0.1 must pass");
        proxy.set_source_partitioned(node, false);
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), open.read_exact(&mut buf)).await.unwrap().unwrap();
        assert_eq!(&buf, b"ping", "held bytes arrive after the heal");
        assert!(roundtrip(&mut fresh, Duration::from_secs(2)).await.is_some(), "the held connect completes");
    }

    #[tokio::test]
    async fn group_cuts_a_subset() {
        let a = echo_server().await;
        let group = ProxyGroup::start(&[a, a, a]).await.unwrap();
        group.partition_first(2).await;
        let addrs = group.local_addrs();
        let mut s0 = TcpStream::connect(addrs[0]).await.unwrap();
        let mut s2 = TcpStream::connect(addrs[2]).await.unwrap();
        assert!(roundtrip(&mut s0, Duration::from_millis(300)).await.is_none());
        assert!(roundtrip(&mut s2, Duration::from_secs(2)).await.is_some());
        group.set_partitioned(false).await;
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), s0.read_exact(&mut buf)).await.unwrap().unwrap();
    }
}
