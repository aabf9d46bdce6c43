//! Release notifications: one pub/sub connection per client and server, shared by all waiters
//! of that client, with reference-counted channel subscriptions.
//!
//! A waiter registers a per-channel [`WakeHub`] entry and the channel is SUBSCRIBEd; when the
//! server confirms, the channel gets a wake-up permit, so a release published between the
//! waiter's attempt and the confirmation is never missed (the waiter re-tries once more). A
//! message wakes one local waiter of that channel; a message `@<owner>` (the single-instance
//! lock handing off to the head of its queue) wakes only the waiter registered as that owner,
//! and nobody in the other clients. Election observers register apart: every message on their
//! channel wakes all of them (a grant publishes `+` and a release nobody waits for `-` for
//! them alone; no waiter acts on those). Channels nobody waits on or observes any more are
//! UNSUBSCRIBEd by a periodic sweep. After the connection drops (server restart,
//! network cut, failed health ping) the listener reconnects, re-subscribes every live channel
//! and wakes every waiter, because releases may have been published in between. Waiters also
//! re-try on a timer bounded by the holder's remaining ttl, so notifications are only hints.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use lock_core::{
    backend::{WakeHub, WakeSubscription},
    ChangeFeed, LockError,
};

use crate::endpoint::Endpoint;
use redis::aio::PubSubSink;
use tokio::time::{timeout, Instant};
use tokio_util::sync::{CancellationToken, DropGuard};

/// How often channels without waiters are unsubscribed, and idle connections pinged.
const SWEEP_EVERY: Duration = Duration::from_secs(2);

struct Server {
    endpoint: Endpoint,
    label: String,
    /// The sink of the live connection and the channels it has confirmed.
    state: Mutex<ServerState>,
}

#[derive(Default)]
struct ServerState {
    sink: Option<PubSubSink>,
    /// Counts connections, so that a confirmation from a previous one is not taken for this one's.
    generation: u64,
    subscribed: HashSet<String>,
    /// The channels this connection has confirmed, and when the confirmation was read.
    confirmed: HashMap<String, Instant>,
}

impl ServerState {
    /// Forgets the connection (the listener reconnects).
    fn disconnect(&mut self) {
        self.sink = None;
        self.subscribed.clear();
        self.confirmed.clear();
    }
}

struct Inner {
    servers: Vec<Server>,
    /// Per channel, the waiters of this client (a hub per channel: its emptiness is the
    /// reference count).
    hubs: Mutex<HashMap<String, WakeHub>>,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE decisions so that they reach each server in the order
    /// they were made.
    ops: tokio::sync::Mutex<()>,
    connect_timeout: Duration,
    request_timeout: Duration,
    stop: CancellationToken,
}

/// The notification side of one client (one server for Redis, N for Redlock).
///
/// Why not `ConnectionManager`'s pub/sub: it needs RESP3 and re-subscribes after a reconnect
/// without telling anyone, while releases published during the outage are lost, so every waiter
/// must be woken then; waiters also need channels reference-counted and a wake-up permit per
/// confirmed SUBSCRIBE.
pub(crate) struct Notifier {
    inner: Arc<Inner>,
    /// This client's own channel (`<prefix>:wake:<random id>`): a release hands the lock to one
    /// of its queued waiters by publishing there, so no other client hears it
    /// (crate::scripts::queue).
    wake_channel: String,
    started: Mutex<bool>,
    _stop: DropGuard,
}

impl Notifier {
    pub(crate) fn new(
        servers: Vec<(Endpoint, String)>,
        key_prefix: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Self {
        let stop = CancellationToken::new();
        let inner = Arc::new(Inner {
            servers: servers
                .into_iter()
                .map(|(endpoint, label)| Server { endpoint, label, state: Mutex::new(ServerState::default()) })
                .collect(),
            hubs: Mutex::new(HashMap::new()),
            ops: tokio::sync::Mutex::new(()),
            connect_timeout,
            request_timeout,
            stop: stop.clone(),
        });
        let wake_channel = format!("{key_prefix}:wake:{}", lock_core::OwnerId::random().to_hex());
        Notifier { inner, wake_channel, started: Mutex::new(false), _stop: stop.drop_guard() }
    }

    /// This client's wake channel, as the scripts take it.
    pub(crate) fn wake_channel(&self) -> &str {
        &self.wake_channel
    }

    /// Registers a queued waiter as `owner` on this client's wake channel (see
    /// [`Notifier::subscribe`]).
    pub(crate) async fn subscribe_waiter(&self, owner: &str) -> Result<Option<WakeSubscription>, LockError> {
        self.subscribe(&self.wake_channel, Some(owner)).await
    }

    /// Starts the listeners on first use: clients that never wait open no pub/sub connection.
    fn ensure_started(&self) {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if *started {
            return;
        }
        *started = true;
        for index in 0..self.inner.servers.len() {
            tokio::spawn(listen(Arc::downgrade(&self.inner), index, self.inner.stop.clone()));
        }
        tokio::spawn(sweep(Arc::downgrade(&self.inner), self.inner.stop.clone()));
    }

    /// Registers a waiter of `channel` (as `owner`: it then wakes only on `@<owner>`, on a
    /// confirmation or a reconnect) and sends SUBSCRIBE to every connected server that has
    /// not subscribed it yet. Returns at once: it neither waits for a connect nor for the
    /// confirmation, so an uncontended acquire costs no extra round trip. Releases published
    /// before the server confirmed are still not missed: on confirmation (and after every
    /// reconnect) the channel gets a wake-up permit, so a waiter that already tried and failed
    /// re-tries once more. When every server had already confirmed the channel on a connection
    /// that is still up, the subscription says since when (`live_since`): a waiter whose
    /// attempt was sent after that needs no re-try, since a wake-up for its owner that arrived
    /// before it registered is kept for it (`WakeHub::wake_or_keep`).
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        owner: Option<&str>,
    ) -> Result<Option<WakeSubscription>, LockError> {
        let (sub, live) = self.register(channel, |hub| hub.subscribe(owner.unwrap_or(channel))).await;
        // Only an owner's wake-ups are kept for it (`wake_owner`); a channel's are not.
        Ok(Some(sub.with_live_since(owner.and(live))))
    }

    /// Registers an election observer of `channel` (docs/contract.md §5.8): it wakes at every
    /// message on the channel (a grant's `+`, a release's `-` or hand-off), on a confirmation
    /// and after a reconnect, and never takes a waiter's wake-up. Subscribes like
    /// [`Notifier::subscribe`]. `keep` lives as long as the feed.
    pub(crate) async fn observe(&self, channel: &str, keep: impl std::any::Any + Send + Sync) -> ChangeFeed {
        self.register(channel, |hub| hub.observe(channel, keep)).await.0
    }

    /// Registers with the channel's hub (`add`), then subscribes the channel where needed.
    /// Also returns since when every server has had the channel confirmed, if all have.
    async fn register<T>(&self, channel: &str, add: impl FnOnce(&WakeHub) -> T) -> (T, Option<Instant>) {
        self.ensure_started();
        let inner = &self.inner;
        let _ops = inner.ops.lock().await;
        let sub = {
            let mut hubs = inner.hubs.lock().unwrap_or_else(|e| e.into_inner());
            add(hubs.entry(channel.to_owned()).or_default())
        };
        let live = inner.confirmed_since(channel);
        for (index, server) in inner.servers.iter().enumerate() {
            let (sink, generation) = {
                let mut st = server.state.lock().unwrap_or_else(|e| e.into_inner());
                let sink = match &st.sink {
                    Some(s) if !st.subscribed.contains(channel) => {
                        let s = s.clone();
                        st.subscribed.insert(channel.to_owned());
                        Some(s)
                    }
                    _ => None,
                };
                (sink, st.generation)
            };
            let Some(mut sink) = sink else { continue };
            let (owned, bound) = (channel.to_owned(), inner.request_timeout);
            let confirm = enqueue(async move { matches!(timeout(bound, sink.subscribe(&owned)).await, Ok(Ok(()))) });
            let weak = Arc::downgrade(inner);
            let owned = channel.to_owned();
            tokio::spawn(async move {
                let ok = confirm.finish().await;
                let Some(inner) = weak.upgrade() else { return };
                let server = &inner.servers[index];
                if ok {
                    {
                        let mut st = server.state.lock().unwrap_or_else(|e| e.into_inner());
                        if st.generation == generation && st.subscribed.contains(&owned) {
                            st.confirmed.insert(owned.clone(), Instant::now());
                        }
                    }
                    inner.wake_each(&owned);
                } else {
                    // Treat the connection as broken so later waiters do not each wait on it;
                    // the listener notices, reconnects and re-subscribes every live channel.
                    // (A previous connection's failure says nothing of the current one.)
                    let mut st = server.state.lock().unwrap_or_else(|e| e.into_inner());
                    if st.generation == generation {
                        st.disconnect();
                    }
                    tracing::debug!(server = %server.label, "SUBSCRIBE not confirmed; waiters fall back to timed re-tries");
                }
            });
        }
        // Not connected (yet): the listener subscribes this channel when it connects, then
        // wakes every waiter and leaves each channel a permit, as above.
        (sub, live)
    }
}

impl Inner {
    /// Since when every server has had `channel` confirmed on its current connection; `None`
    /// unless all have.
    fn confirmed_since(&self, channel: &str) -> Option<Instant> {
        let each = self.servers.iter().map(|server| {
            let st = server.state.lock().unwrap_or_else(|e| e.into_inner());
            st.sink.as_ref().and(st.confirmed.get(channel).copied())
        });
        each.collect::<Option<Vec<Instant>>>()?.into_iter().max()
    }

    /// Wakes every observer of `channel`.
    fn changed(&self, channel: &str) {
        let hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hub) = hubs.get(channel) {
            hub.changed(channel);
        }
    }

    /// Wakes one waiter of `channel` registered as `key` (the channel itself for waiters that
    /// did not register an owner).
    fn wake(&self, channel: &str, key: &str) -> bool {
        let hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        hubs.get(channel).is_some_and(|h| h.wake(key))
    }

    /// Wakes the waiter of `channel` registered as `owner`, or keeps the wake-up for it: it
    /// may arrive between that wait's attempt and its registration.
    fn wake_owner(&self, channel: &str, owner: &str) {
        let hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = hubs.get(channel) {
            h.wake_or_keep(owner);
        }
    }

    /// Leaves every waiter of `channel` one wake-up (each owner, and one of the unnamed ones).
    fn wake_each(&self, channel: &str) {
        let hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hub) = hubs.get(channel) {
            hub.wake_each();
        }
    }

    /// Wakes every waiter, and leaves a wake-up for each that is between two waits.
    fn wake_all(&self) {
        let hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        for hub in hubs.values() {
            hub.wake_all();
            hub.wake_each();
        }
    }

    fn live_channels(&self) -> Vec<String> {
        let hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        hubs.iter().filter(|(_, h)| !h.is_empty()).map(|(c, _)| c.clone()).collect()
    }
}

/// A future polled once already (see [`enqueue`]).
enum Enqueued<F: Future> {
    Done(F::Output),
    Pending(std::pin::Pin<Box<F>>),
}

impl<F: Future> Enqueued<F> {
    /// The output, awaiting the rest if needed (a finished future is never polled again).
    async fn finish(self) -> F::Output {
        match self {
            Enqueued::Done(out) => out,
            Enqueued::Pending(fut) => fut.await,
        }
    }
}

/// Polls `fut` once, right now: a sink command's first poll puts it on the connection's queue.
/// Doing that while holding `ops` keeps SUBSCRIBE and UNSUBSCRIBE in the order they were
/// decided, without holding `ops` while the server answers.
fn enqueue<F: Future>(fut: F) -> Enqueued<F> {
    let mut fut = Box::pin(fut);
    match fut.as_mut().poll(&mut std::task::Context::from_waker(futures::task::noop_waker_ref())) {
        std::task::Poll::Ready(out) => Enqueued::Done(out),
        std::task::Poll::Pending => Enqueued::Pending(fut),
    }
}

/// Keeps one pub/sub connection to `servers[index]` alive and forwards its messages to the hubs.
async fn listen(inner: Weak<Inner>, index: usize, stop: CancellationToken) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let Some(strong) = inner.upgrade() else { return };
        let connected = tokio::select! {
            _ = stop.cancelled() => return,
            r = connect_and_resubscribe(&strong, index) => r,
        };
        match connected {
            Ok((sink, stream)) => {
                backoff = Duration::from_millis(50);
                // Releases may have been published while we were not listening.
                strong.wake_all();
                drop(strong);
                pump(&inner, index, sink, stream, &stop).await;
                if let Some(strong) = inner.upgrade() {
                    let server = &strong.servers[index];
                    let mut st = server.state.lock().unwrap_or_else(|e| e.into_inner());
                    st.disconnect();
                    drop(st);
                    tracing::debug!(server = %server.label, "pub/sub connection lost; reconnecting");
                    strong.wake_all();
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "pub/sub connect failed; retrying");
                drop(strong);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

async fn connect_and_resubscribe(
    inner: &Inner,
    index: usize,
) -> Result<(PubSubSink, redis::aio::PubSubStream), LockError> {
    let server = &inner.servers[index];
    // A Sentinel endpoint names the current primary: after a failover the subscriber follows it.
    let connect = async { server.endpoint.resolve().await?.get_async_pubsub().await };
    let pubsub = match timeout(inner.connect_timeout, connect).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return Err(LockError::unavailable("redis", format!("pub/sub to {}: {e}", server.label))),
        Err(_) => return Err(LockError::unavailable("redis", format!("pub/sub to {} timed out", server.label))),
    };
    let (sink, stream) = pubsub.split();
    let confirm = {
        let _ops = inner.ops.lock().await;
        let channels = inner.live_channels();
        let mut st = server.state.lock().unwrap_or_else(|e| e.into_inner());
        st.disconnect();
        st.sink = Some(sink.clone());
        st.generation += 1;
        st.subscribed = channels.iter().cloned().collect();
        let generation = st.generation;
        drop(st);
        (!channels.is_empty()).then(|| {
            let (bound, mut sink) = (inner.request_timeout, sink.clone());
            let sent = channels.clone();
            (sent, generation, enqueue(async move { timeout(bound, sink.subscribe(&channels)).await }))
        })
    };
    if let Some((channels, generation, confirm)) = confirm {
        let failed = match confirm.finish().await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("SUBSCRIBE on {}: {e}", server.label)),
            Err(_) => Some(format!("SUBSCRIBE on {} timed out", server.label)),
        };
        let mut st = server.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(reason) = failed {
            st.disconnect();
            return Err(LockError::unavailable("redis", reason));
        }
        if st.generation == generation {
            let now = Instant::now();
            let st = &mut *st;
            for c in channels.into_iter().filter(|c| st.subscribed.contains(c)) {
                st.confirmed.insert(c, now);
            }
        }
    }
    Ok((sink, stream))
}

/// Forwards messages until the connection ends or stops answering pings.
async fn pump(
    inner: &Weak<Inner>,
    index: usize,
    mut sink: PubSubSink,
    mut stream: redis::aio::PubSubStream,
    stop: &CancellationToken,
) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            msg = stream.next() => {
                let Some(msg) = msg else { return };
                let Some(strong) = inner.upgrade() else { return };
                let channel = msg.get_channel_name().to_owned();
                // Every message may mean a new holder: observers look again.
                strong.changed(&channel);
                // `+` (a grant) and `-` (a release nobody waits for) are for observers only.
                // Anything else wakes one waiter: a hint, which sends it to ask the server.
                let payload = msg.get_payload_bytes();
                match payload {
                    b"+" | b"-" => {}
                    _ => match payload.strip_prefix(b"@") {
                        // A hand-off to one queued owner: only its waiter, if it is ours.
                        Some(owner) => {
                            if let Ok(owner) = std::str::from_utf8(owner) {
                                strong.wake_owner(&channel, owner);
                            }
                        }
                        None if !strong.wake(&channel, &channel) => {
                            tracing::trace!(%channel, "release published with no local waiter");
                        }
                        None => {}
                    },
                }
            }
            _ = tick.tick() => {
                let Some(strong) = inner.upgrade() else { return };
                let bound = strong.request_timeout.max(Duration::from_millis(500));
                let given_up = strong.servers[index].state.lock().unwrap_or_else(|e| e.into_inner()).sink.is_none();
                drop(strong);
                if given_up {
                    // A SUBSCRIBE on this connection failed: start afresh.
                    return;
                }
                // A cut network leaves the socket open: only an unanswered ping tells. Any answer
                // will do: with a channel subscribed, RESP2 answers `["pong", ""]`, not a string
                // (asked for as a `String`, every ping of a connection with a waiter failed, and
                // the listener reconnected every SWEEP_EVERY, losing what was published meanwhile).
                let pong: Result<Result<redis::Value, _>, _> = timeout(bound, sink.ping()).await;
                if !matches!(pong, Ok(Ok(_))) {
                    if let Some(strong) = inner.upgrade() {
                        tracing::debug!(server = %strong.servers[index].label, "pub/sub ping failed");
                    }
                    return;
                }
            }
        }
    }
}

/// Unsubscribes channels that no waiter of this client needs any more.
async fn sweep(inner: Weak<Inner>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(strong) = inner.upgrade() else { return };
        let _ops = strong.ops.lock().await;
        let idle: Vec<String> = {
            let mut hubs = strong.hubs.lock().unwrap_or_else(|e| e.into_inner());
            let idle: Vec<String> = hubs.iter().filter(|(_, h)| h.is_empty()).map(|(c, _)| c.clone()).collect();
            for c in &idle {
                hubs.remove(c);
            }
            idle
        };
        if idle.is_empty() {
            continue;
        }
        for server in &strong.servers {
            let sink = {
                let mut st = server.state.lock().unwrap_or_else(|e| e.into_inner());
                for c in &idle {
                    st.subscribed.remove(c);
                    st.confirmed.remove(c);
                }
                st.sink.clone()
            };
            if let Some(mut sink) = sink {
                let (idle, bound) = (idle.clone(), strong.request_timeout);
                let confirm = enqueue(async move { timeout(bound, sink.unsubscribe(&idle)).await });
                // Whatever the answer: a channel left subscribed only costs a message nobody reads.
                tokio::spawn(confirm.finish());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiter registering on a channel the server had confirmed is told since when (so its
    /// wait skips the re-try), and a hand-off to it published before it registered still wakes
    /// it; nobody else gets that wake-up.
    #[tokio::test]
    async fn a_confirmed_channel_is_live_and_keeps_an_early_wake_up() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let secs = Duration::from_secs(2);
        let notifier = Notifier::new(vec![(Endpoint::Fixed(client.clone()), "test".into())], "nt", secs, secs);
        let first = notifier.subscribe_waiter("A").await.unwrap().unwrap();
        assert!(first.live_since().is_none(), "nothing was confirmed before the first waiter");
        timeout(Duration::from_secs(5), first.woken()).await.expect("the confirmation leaves a wake-up");
        let confirmed = Instant::now();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let heard: i64 =
            redis::cmd("PUBLISH").arg(notifier.wake_channel()).arg("@B").query_async(&mut c).await.unwrap();
        assert_eq!(heard, 1, "the wake channel is subscribed");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let b = notifier.subscribe_waiter("B").await.unwrap().unwrap();
        let since = b.live_since().expect("the channel was confirmed and the connection is up");
        assert!(since <= confirmed, "live since the confirmation, not since the registration");
        timeout(Duration::from_secs(1), b.woken()).await.expect("B's hand-off, published before it registered");
        let other = notifier.subscribe_waiter("C").await.unwrap().unwrap();
        let quiet = timeout(Duration::from_millis(50), other.woken()).await;
        assert!(quiet.is_err(), "another waiter does not get B's wake-up");
    }

    /// A connection with a channel subscribed passes its health pings (the server answers them
    /// `["pong", ""]` then): it is not dropped and re-made, which would wake every waiter for
    /// nothing and lose what is published meanwhile.
    #[tokio::test]
    async fn a_subscribed_connection_passes_its_health_pings() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let secs = Duration::from_secs(2);
        let notifier = Notifier::new(vec![(Endpoint::Fixed(client), "test".into())], "nt", secs, secs);
        let a = notifier.subscribe_waiter("A").await.unwrap().unwrap();
        timeout(Duration::from_secs(5), a.woken()).await.expect("the confirmation leaves a wake-up");
        // The connect's own wake-up too (the listener wakes every waiter once it is connected).
        while timeout(Duration::from_millis(200), a.woken()).await.is_ok() {}
        let generation = || notifier.inner.servers[0].state.lock().unwrap_or_else(|e| e.into_inner()).generation;
        let before = generation();
        let spurious = timeout(SWEEP_EVERY * 2 + Duration::from_millis(500), a.woken()).await;
        assert!(spurious.is_err(), "woken with nothing published: the listener reconnected");
        assert_eq!(generation(), before, "the listener reconnected: a health ping of a subscribed connection failed");
    }
}
