//! The single-instance backend: [`RedisStore`], its connection and its grants.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    backend::{Claim, LeaseStore, ReleaseOutcome, RenewOutcome, TryLock, WakeSubscription},
    Capabilities, ChangeFeed, FencingToken, HolderInfo, LockError, LockName, OwnerId,
};

use crate::acl::Needs;
use crate::blocking::Blocking;
use crate::boot::Boot;
use crate::cluster::{Conn, UNCOUNTED};
use crate::conn::Node;
use crate::endpoint::{is_sentinel, Endpoint};
use crate::handoff::CLAIM_MS;
use crate::options::{min_ttl, queued_capabilities};
use crate::pubsub::Notifier;
use crate::reply::{parse_pair, remaining_from, token_from, too_many_waiters, ttl_ms};
use crate::scripts::{Acquire, ClaimPushed, HandOff, HandOffScript, Keys, LeaseEnd, Renew, Try};
use crate::RedisOptions;
use redis::RedisResult;

pub(crate) const BACKEND: &str = "redis";

/// How long the head of the waiter queue has, once the lock is free, to take it (ms): a woken
/// waiter answers within a round trip or two, and a head that vanished keeps the lock from the
/// others no longer than this (docs/contract.md §4, `crate::scripts::queue`).
pub(crate) const RESERVE_MS: u64 = 250;

/// One Redis server (or a Redis Cluster node set reached through one endpoint) as a
/// [`LeaseStore`]; use it through [`RedisLock`](crate::RedisLock).
pub struct RedisStore {
    /// Shared with the observers' mark refreshers (`super::observe`).
    pub(crate) node: Arc<Node>,
    pub(crate) notifier: Notifier,
    pub(crate) prefix: String,
    pub(crate) boot: Boot,
    max_ttl: Duration,
    /// `RedisOptions::min_replicas_ack` and the `WAIT` bound in ms.
    pub(crate) min_replicas_ack: u32,
    pub(crate) ack_wait_ms: u64,
    /// `RedisOptions::idle_gc_after` in ms (0: the names' hashes never expire).
    idle_ms: u64,
    /// `RedisOptions::max_clock_offset` where a failover can hand the leases to another
    /// node's clock (Sentinel, Cluster); zero for a fixed server.
    max_clock_offset: Duration,
    /// `RedisOptions::max_waiters`.
    pub(crate) max_waiters: u32,
    /// Blocking delivery of grants in the release (crate::blocking): one server (single or
    /// Sentinel), `RedisOptions::blocking_handoff`, no replica acknowledgements.
    blocking: Option<Arc<Blocking>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("server", &self.node.label).field("key_prefix", &self.prefix).finish()
    }
}

/// What kind of deployment a store talks to, as far as clocks go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndpointKind {
    /// One server, whose clock alone judges its keys.
    Fixed,
    /// A primary whose replicas may take over (Sentinel) or a Cluster's masters and replicas.
    Failover,
}

impl EndpointKind {
    fn of(endpoint: &Endpoint) -> EndpointKind {
        match endpoint {
            Endpoint::Fixed(_) => EndpointKind::Fixed,
            Endpoint::Sentinel(_) | Endpoint::Cluster(_) => EndpointKind::Failover,
        }
    }
}

/// The clock-offset allowance added to every lease's drift: a failover moves the leases to a
/// replica that times them by its own clock (Redis ≥ 7 replicates expiries as absolute times).
fn clock_offset_allowance(kind: &EndpointKind, options: &RedisOptions) -> Duration {
    match kind {
        EndpointKind::Fixed => Duration::ZERO,
        EndpointKind::Failover => options.max_clock_offset,
    }
}

impl RedisStore {
    /// Opens the client, checks the server answers (bounded by `connect_timeout`) and that
    /// its user may run everything `needs` will run.
    pub(crate) async fn connect(url: &str, options: &RedisOptions, needs: Needs) -> Result<RedisStore, LockError> {
        options.validate()?;
        let ca = options.read_ca().await?;
        let endpoint = if is_sentinel(url) {
            crate::endpoint::sentinel(url, ca.as_deref())?
        } else if has_scheme(url, crate::cluster::SCHEME) {
            Endpoint::Cluster(crate::cluster::ClusterEndpoint::parse(url, &options.cluster_node_map, ca.as_deref())?)
        } else {
            Endpoint::Fixed(crate::url::open_client_with_ca(url, ca.as_deref())?)
        };
        RedisStore::open(endpoint, url, options, needs).await
    }

    /// Over the application's own `redis::Client` (its address, credentials, database and TLS).
    pub(crate) async fn from_client(client: redis::Client, options: &RedisOptions) -> Result<RedisStore, LockError> {
        options.validate()?;
        let label = format!("redis://{}", client.get_connection_info().addr());
        RedisStore::open(Endpoint::Fixed(client), &label, options, Needs::Exclusive).await
    }

    /// Checks the server answers (bounded by `connect_timeout`) and that its user may run
    /// everything `needs` will run.
    async fn open(
        endpoint: Endpoint,
        url: &str,
        options: &RedisOptions,
        needs: Needs,
    ) -> Result<RedisStore, LockError> {
        let db = endpoint.settings().db();
        // A script may touch one slot only on a cluster: one boot marker per name from the start.
        let per_name = matches!(endpoint, Endpoint::Cluster(_));
        let endpoint_kind = EndpointKind::of(&endpoint);
        let node = Node::new(endpoint.clone(), url, BACKEND, options.connect_timeout, options.request_timeout);
        node.ping(options.connect_timeout + options.request_timeout).await?;
        crate::acl::check(&node, &options.key_prefix, db, needs).await?;
        // A Cluster's commands go through its client, whose node connections a blocked `BLPOP`
        // would hold up; a grant that must reach replicas waits for their acknowledgement anyway.
        let blocks = options.blocking_handoff && !per_name && options.min_replicas_ack == 0;
        let blocking = blocks.then(|| {
            let label = node.label.clone();
            Arc::new(Blocking::new(endpoint.clone(), label, options.connect_timeout, options.request_timeout))
        });
        let notifier = Notifier::new(
            vec![(endpoint, node.label.clone())],
            &options.key_prefix,
            options.connect_timeout,
            options.request_timeout,
        );
        Ok(RedisStore {
            node: Arc::new(node),
            notifier,
            prefix: options.key_prefix.clone(),
            boot: Boot::new(&options.key_prefix, options.quiet_period(), per_name),
            max_ttl: options.max_ttl,
            min_replicas_ack: options.min_replicas_ack,
            ack_wait_ms: options.replica_ack_wait_ms(),
            idle_ms: options.idle_gc_after.map_or(0, ttl_ms),
            max_clock_offset: clock_offset_allowance(&endpoint_kind, options),
            max_waiters: options.max_waiters,
            blocking,
        })
    }

    /// After how long (ms) the name's hash may expire once a lease of `ttl_ms` was granted or
    /// renewed: `idle_gc_after` past it, 0 (never) without that option.
    fn fence_ms(&self, ttl_ms: u64) -> u64 {
        if self.idle_ms > 0 {
            ttl_ms.saturating_add(self.idle_ms)
        } else {
            0
        }
    }

    pub(crate) fn keys(&self, name: &LockName) -> Keys {
        Keys::new(&self.prefix, name)
    }

    /// How long a waiter's place in the queue lasts without a re-try (ms). `StoreLock` re-tries
    /// a notified wait at least every 4 × `max_poll_interval` (the fallback) plus one attempt
    /// (at most `request_timeout`): twice that, so one late re-try does not cost the place.
    pub(crate) fn registration(&self, ttl: Duration) -> u64 {
        let retry = self.max_poll_interval(ttl).saturating_mul(4) + self.node.request_timeout();
        ttl_ms(retry.saturating_mul(2))
    }

    /// Runs a script that may hand the lock to the queue's head (release, abandon). Sent once,
    /// as a release always was: a retry could not tell "released" from "not ours".
    async fn hand_off(&self, script: HandOffScript, name: &LockName, owner: OwnerId) -> Result<i64, LockError> {
        let (keys, owner) = (self.keys(name), owner.to_hex());
        let wake = self.notifier.wake_channel();
        let call = HandOff { script, keys: &keys, owner: &owner, reserve_ms: RESERVE_MS, wake, claim_ms: CLAIM_MS };
        self.node.run(self.node.request_timeout(), |mut c| async move { call.invoke(&mut c).await }).await
    }

    /// Runs an acquire script (`call`, given the boot marker of `name`) and, when it granted and
    /// `min_replicas_ack` asks for it, `WAIT`s on the node and connection that wrote: it counts
    /// the replicas that have this write (`written`, a key the grant wrote, routes it on a
    /// cluster, where the script's node is checked: `Conn::tagged`). The script's reply, and how
    /// many replicas acknowledged (`i64::MAX`: not asked; `UNCOUNTED`: not countable there).
    pub(crate) async fn acquire_acked<F, Fut>(
        &self,
        name: &LockName,
        written: &str,
        call: F,
    ) -> Result<(Vec<i64>, i64), LockError>
    where
        F: Fn(String, Conn) -> Fut,
        Fut: Future<Output = RedisResult<Vec<i64>>>,
    {
        let (boot, call) = (&self.boot, &call);
        let (acks, ack_ms) = (self.min_replicas_ack, self.ack_wait_ms);
        self.node
            .run_idempotent(self.node.request_timeout(), |c| async move {
                let c = if acks > 0 { c.tagged(written) } else { c };
                let reply = boot.with_marker(name, |marker| call(marker, c.clone())).await?;
                let acked = if acks > 0 && reply.first() == Some(&1) {
                    c.clone().wait_replicas(acks, ack_ms).await?
                } else {
                    i64::MAX
                };
                Ok((reply, acked))
            })
            .await
    }

    /// Runs a renew script (`call`) and, when it renewed and `min_replicas_ack` asks for it,
    /// `WAIT`s on the connection that wrote, in the same attempt: a `WAIT` sent again alone,
    /// after a reconnect (to a new primary, say), would count another connection's writes.
    /// Whether it renewed; a renewal not on enough replicas is `Unavailable`.
    pub(crate) async fn renew_acked<F, Fut>(&self, written: &str, call: F) -> Result<bool, LockError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = RedisResult<i64>>,
    {
        let call = &call;
        let (acks, ack_ms) = (self.min_replicas_ack, self.ack_wait_ms);
        let (renewed, acked): (i64, i64) = self
            .node
            .run_idempotent(self.node.request_timeout(), |c| async move {
                let c = if acks > 0 { c.tagged(written) } else { c };
                let renewed = call(c.clone()).await?;
                let acked =
                    if acks > 0 && renewed == 1 { c.clone().wait_replicas(acks, ack_ms).await? } else { i64::MAX };
                Ok((renewed, acked))
            })
            .await?;
        if renewed == 1 && acked < i64::from(acks) {
            return Err(self.not_acknowledged(acked, "renewal"));
        }
        Ok(renewed == 1)
    }

    pub(crate) fn not_acknowledged(&self, acked: i64, what: &str) -> LockError {
        if acked == UNCOUNTED {
            return LockError::unavailable(
                BACKEND,
                format!(
                    "the {what} was written on a Redis Cluster node that is not its slot's master in this client's \
                     slot map (the slot is being migrated, or has just moved), so min_replicas_ack could not count \
                     its acknowledgement there: a grant is given back and a renewal counts as failed; waiters and \
                     the watchdog retry, and succeed once the slot has settled"
                ),
            );
        }
        LockError::unavailable(
            BACKEND,
            format!(
                "the {what} reached {} but only {acked} of the {} replicas min_replicas_ack asks for acknowledged it \
                 within {} ms; check the replicas' link to the primary (INFO replication) or lower min_replicas_ack",
                self.node.label, self.min_replicas_ack, self.ack_wait_ms
            ),
        )
    }
}

/// The acquire script's holder and metadata arguments (`crate::scripts::Acquire`).
fn who_args(claim: &Claim<'_>) -> (String, String) {
    let holder = claim.holder_id().unwrap_or_default().to_owned();
    let metadata = claim.metadata().map(|m| format!("+{m}")).unwrap_or_default();
    (holder, metadata)
}

/// Whether `url` starts with `<scheme>://` (any case).
fn has_scheme(url: &str, scheme: &str) -> bool {
    url.get(..scheme.len() + 3).is_some_and(|s| s.eq_ignore_ascii_case(&format!("{scheme}://")))
}

#[async_trait]
impl LeaseStore for RedisStore {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // The waiter queue (crate::scripts::queue) serves the exclusive lock in arrival order.
        let mut caps = queued_capabilities(min_ttl(self.max_clock_offset), self.max_ttl);
        // Read-write locks and semaphores: `RedisRwLock` / `RedisSemaphore` (crate::kinds).
        caps.rw_lock = true;
        caps.semaphore = true;
        caps.inspect = true;
        caps.list = true;
        // Grants and releases publish on the name's channel (crate::scripts), Sentinel and
        // Cluster included (a cluster forwards every PUBLISH to every node).
        caps.notify_changes = true;
        caps.max_clock_offset = self.max_clock_offset;
        caps
    }

    async fn try_lock(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        let (name, owner, ttl) = (claim.name, claim.owner, claim.ttl);
        let keys = self.keys(name);
        let owner_id = owner;
        let owner = owner.to_hex();
        let ms = ttl_ms(ttl);
        let who = who_args(claim);
        let fence_ms = self.fence_ms(ms);
        // Only a waiting attempt takes a place in the queue; a single try must not.
        let reg_ms = if waiting { self.registration(ttl) } else { 0 };
        // A release may grant a queued waiter the lock provisionally, which its next attempt
        // claims (crate::handoff), unless the grant must reach replicas (the waiter's own WAIT)
        // or carry a holder id or metadata.
        let takes_grants = waiting && self.min_replicas_ack == 0 && who.0.is_empty() && who.1.is_empty();
        let grant = if takes_grants { ms.to_string() } else { String::new() };
        let call = Acquire {
            keys: &keys,
            owner: &owner,
            ttl_ms: ms,
            quiet_ms: self.boot.quiet_ms(),
            holder: &who.0,
            metadata: &who.1,
            fence_ms,
            registration_ms: reg_ms,
            reserve_ms: RESERVE_MS,
            wake: self.notifier.wake_channel(),
            grant: &grant,
            max_waiters: self.max_waiters,
        };
        // A single try runs the lean script first (the free path in fewer keys and arguments)
        // and the full one only when that answers `{4}`; a waiting attempt, which registers
        // when refused, runs the full one at once (crate::scripts, `TRY_SRC`).
        let lean = (!waiting).then_some(Try { acquire: call });
        let (reply, acked) = self
            .acquire_acked(name, &keys.lock, |marker, mut c| async move {
                if let Some(lean) = lean {
                    let reply = lean.invoke(&mut c).await?;
                    if reply != [4] {
                        return Ok(reply);
                    }
                }
                call.invoke(&marker, &mut c).await
            })
            .await?;
        let acks = self.min_replicas_ack;
        if let [2, left] = reply.as_slice() {
            let remaining = remaining_from(*left).unwrap_or_default();
            self.boot.announce_quiet(remaining);
            return Ok(TryLock::Quiet { remaining });
        }
        if let [3, cap] = reply.as_slice() {
            return Err(too_many_waiters(name, *cap));
        }
        match parse_pair(BACKEND, reply)? {
            (true, _) if acked < i64::from(acks) => {
                // Not on enough replicas: a failover now could forget this grant. Give it back.
                let _ = self.release(name, owner_id).await;
                Err(self.not_acknowledged(acked, "grant"))
            }
            (true, token) => Ok(TryLock::Acquired { token: token_from(BACKEND, token)? }),
            (false, pttl) => Ok(TryLock::Held { remaining: remaining_from(pttl) }),
        }
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let (keys, owner) = (self.keys(name), owner.to_hex());
        let ms = ttl_ms(ttl);
        // The name's hash outlives the lease it carries: its idle expiry moves with the renewal.
        let fence_ms = self.fence_ms(ms);
        let call = Renew { lock: &keys.lock, owner: &owner, ttl_ms: ms, end: LeaseEnd::Hash { fence_ms } };
        let renewed = self.renew_acked(&keys.lock, |mut c| async move { call.invoke(&mut c).await }).await?;
        Ok(if renewed { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    /// One request, owner- and token-checked (`ClaimPushed`): it never grants, so a claim that
    /// arrives after the lease's release changes nothing.
    async fn claim(
        &self,
        name: &LockName,
        owner: OwnerId,
        token: FencingToken,
        ttl: Duration,
    ) -> Result<RenewOutcome, LockError> {
        let (keys, owner) = (self.keys(name), owner.to_hex());
        let ms = ttl_ms(ttl);
        let fence_ms = self.fence_ms(ms);
        let call = ClaimPushed { lock: &keys.lock, owner: &owner, ttl_ms: ms, fence_ms, token: token.0 };
        let claimed = self.renew_acked(&keys.lock, |mut c| async move { call.invoke(&mut c).await }).await?;
        Ok(if claimed { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let released = self.hand_off(HandOffScript::Release, name, owner).await?;
        Ok(if released == 1 { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    /// Also releases a grant in the release that the wait never claimed, and hands it on
    /// (crate::handoff).
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.hand_off(HandOffScript::Abandon, name, owner).await.map(drop)
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.notifier.subscribe(&self.keys(name).channel, None).await
    }

    /// A release wakes the queue's head only, on the head's client's own wake channel
    /// (`PUBLISH <wake channel> @<owner>`, crate::scripts::queue): each waiter listens there for
    /// its own owner id, and a client none of whose waiters is at the head hears nothing. With
    /// blocking delivery the wait also arms its own connection, and a release that grants it
    /// pushes the grant there instead (crate::blocking).
    async fn subscribe_waiter(&self, name: &LockName, owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        let sub = self.notifier.subscribe_waiter(&owner.to_hex()).await?;
        Ok(match (sub, &self.blocking) {
            (Some(sub), Some(blocking)) => Some(blocking.arm(sub, &self.keys(name), &owner.to_hex())),
            (sub, _) => sub,
        })
    }

    /// Grants publish `+` and releases `-` or the hand-off (crate::scripts): every one wakes
    /// the feed, whichever process made it. The free path publishes only for a name marked
    /// observed, so the name is marked (after subscribing, before the feed is handed out) and
    /// kept marked while the feed lives (`super::observe`).
    async fn watch_changes(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        let keys = self.keys(name);
        let refresher = Arc::new(std::sync::OnceLock::new());
        let feed = self.notifier.observe(&keys.channel, Arc::clone(&refresher)).await;
        // Only this call sets it: `set` cannot fail.
        let _ = refresher.set(super::observe::mark_observed(&self.node, keys.lock).await?);
        Ok(Some(feed))
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        self.read_holder(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        self.scan_holders(prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        self.free_whoever_holds(name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_deployment_with_failover_adds_the_clock_offset() {
        let options = RedisOptions { max_clock_offset: Duration::from_millis(40), ..RedisOptions::default() };
        assert_eq!(clock_offset_allowance(&EndpointKind::Fixed, &options), Duration::ZERO);
        assert_eq!(clock_offset_allowance(&EndpointKind::Failover, &options), Duration::from_millis(40));
    }

    #[test]
    fn min_ttl_leaves_room_beyond_the_allowance() {
        assert_eq!(min_ttl(Duration::ZERO), Duration::from_millis(10));
        for offset in [1, 50, 400, 59_000].map(Duration::from_millis) {
            let ttl = min_ttl(offset);
            assert!(ttl > lock_core::clock_drift(ttl) + offset, "{offset:?}: {ttl:?}");
        }
    }
}
