//! The lease of a granted node: its renew and release. Watching the node for the lost signal,
//! and gathering renewals into rounds, is the session's [`Keeper`]'s.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    backend::{Backoff, LeaseGrant, LeaseHandle, ReleaseOutcome, RenewOutcome},
    AcquireOptions, FencingToken, Lease, LockError, LockName, OwnerId,
};
use tokio::time::{sleep, Instant};

use crate::keeper::{Keeper, Session};
use crate::node::Node;
use crate::session::{classify, connected, Failure, BACKEND};

/// What the acquire proved of its node when it found it holding.
pub(crate) struct Granted {
    pub(crate) owner: OwnerId,
    /// The fencing token: the node's czxid, or a permit's grant mark's mzxid.
    pub(crate) zxid: i64,
    /// When the request that proved our node holding was sent.
    pub(crate) confirmed: Instant,
}

/// The lease of a node the acquire found holding: runs on the session-bound options (with the
/// servers' `tick_time`, see [`server_bound`]) and is handed to the session's keeper to watch.
pub(crate) fn grant(
    session: &Session,
    name: &LockName,
    node: Node,
    granted: Granted,
    opts: &AcquireOptions,
    tick_time: Duration,
) -> Lease {
    let Granted { owner, zxid, confirmed } = granted;
    let node = Arc::new(node);
    let handle = Arc::new(ZkHandle { keeper: Arc::clone(&session.keeper), node: Arc::clone(&node) });
    // zxids are positive; the cast cannot change their order.
    let token = FencingToken(zxid.max(0) as u64);
    let opts = session_bound(opts, session.client.session_timeout(), tick_time);
    let lease = Lease::new(LeaseGrant::new(name.clone(), token, owner, confirmed, handle), &opts);
    session.keeper.hold(node, lease.loss_trigger(), lease.lost());
    lease
}

/// The options the `Lease` runs on: the caller's, with the ttl cut to what the leader is sure
/// to keep of our session after a request it answered ([`server_bound`], docs/contract.md §3).
/// The server keeps our node only while it keeps the session: counting `valid_until` from the
/// caller's longer ttl would let `is_valid()` claim a lock the server already gave away, for
/// instance after a process stall during which no task ran. Renewals extend by the same bound.
/// A renewal interval the shorter lease could not survive is cut to a third of it.
fn session_bound(opts: &AcquireOptions, session_timeout: Duration, tick_time: Duration) -> AcquireOptions {
    let mut bounded = opts.clone();
    let bound = server_bound(session_timeout, tick_time);
    if bounded.ttl > bound {
        bounded.ttl = bound;
        bounded.renew_every = bounded.renew_every.map(|every| every.min(bound / 3));
    }
    bounded
}

/// How long after sending a request that the quorum answered (a create, or a `sync` and the
/// read behind it) the leader is sure to keep our session: the session timeout less how much
/// earlier than that request the leader may last have heard from us.
///
/// Only the leader expires sessions, `session_timeout` after it last heard of them (rounded up
/// to a tick: never sooner). Through a follower it hears of a session only from the follower's
/// answers to its pings, every `tickTime/2`, which list the sessions the follower heard from
/// since the previous answer; the forwarded create or `sync` itself refreshes nothing. If the
/// follower is cut off from the leader right after our request, the answer that would have
/// reported it never arrives, and the leader's last news of us is the last request of ours that
/// reached the follower before the last answer it did get. That answer left at most
/// `tickTime/2` before our request reached the follower (its link carried our request, so it
/// carried the answers sent before it). Before it, the follower heard from us at the latest
/// when our client last got a request through, and while our client keeps its connection that
/// is never more than 9/20 of the session ago: it pings after 3/20 without sending, checks
/// every 1/20, and drops a connection that answered nothing for 2/5 (the connection timeout of
/// the sessions `connect` makes) — a link that stalls our requests for less than that goes
/// unnoticed, and a reconnection tells the leader of us at once (the follower revalidates the
/// session with it).
///
/// So the bound is `session_timeout − tick/2 − 9/20 · session_timeout`, with `tick` the
/// configured [`ZkOptions::tick_time`](crate::ZkOptions::tick_time) but never more than half
/// the session (ZooKeeper's default `minSessionTimeout` is two ticks): at least 3/10 of the
/// session; 4.5 s of a 10 s session at the default 2 s tick. Measured in `tests/ensemble.rs`:
/// with the old ¾ of the session, a grant through a follower whose client link had stalled
/// before the create outlived the leader's view of the session by seconds. A server with a
/// longer tick than configured, a `minSessionTimeout` below two ticks, or (with
/// [`from_client`](crate::from_client)) a client whose connection timeout exceeds 2/5 of the
/// session breaks this assumption. Against a standalone server every request refreshes the
/// session directly; the bound is then merely conservative.
pub fn server_bound(session_timeout: Duration, tick_time: Duration) -> Duration {
    let half_tick = tick_time.min(session_timeout / 2) / 2;
    let silence = session_timeout * 9 / 20;
    session_timeout.saturating_sub(half_tick + silence)
}

/// Renew and release of one granted node.
struct ZkHandle {
    keeper: Arc<Keeper>,
    node: Arc<Node>,
}

#[async_trait]
impl LeaseHandle for ZkHandle {
    async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
        let state = self.keeper.client.state();
        if state.is_terminated() {
            return Ok(RenewOutcome::NotOwner);
        }
        if !connected(state) {
            // Requests would queue until the connection is back; answer now instead.
            return Err(LockError::unavailable(BACKEND, "the connection to ZooKeeper is suspended"));
        }
        match self.keeper.check(&self.node).await {
            Some(Ok(true)) => Ok(RenewOutcome::Renewed),
            Some(Ok(false)) => Ok(RenewOutcome::NotOwner),
            Some(Err(e)) => match classify(e) {
                Failure::SessionGone => Ok(RenewOutcome::NotOwner),
                Failure::Transient(e) => Err(e),
                Failure::Server(e) => Err(LockError::backend(BACKEND, e)),
            },
            None => Err(LockError::unavailable(BACKEND, "the renewal round ended without an answer; it is retried")),
        }
    }

    /// The delete is sent at once; the `Lease` keeps the release going if its caller stops
    /// waiting for it.
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.node.released.store(true, Ordering::SeqCst);
        self.node.delete(&self.keeper.client).await
    }

    /// The lease is the session, so a shorter ttl means nothing to the server: keep the node
    /// (confirmed ours first) and delete it `after` from now from a background task. If the
    /// process or its session ends first, the node goes when the session does — possibly
    /// before `t0 + hold_at_least` (docs/contract.md §3).
    async fn release_after(&self, after: Duration) -> Result<ReleaseOutcome, LockError> {
        if self.renew(after).await? == RenewOutcome::NotOwner {
            return Ok(ReleaseOutcome::NotOwner);
        }
        self.node.released.store(true, Ordering::SeqCst);
        tokio::spawn(delete_later(Arc::clone(&self.keeper), Arc::clone(&self.node), after));
        Ok(ReleaseOutcome::Released)
    }
}

/// Deletes our node `after` from now (`hold_at_least`), retrying until the server answers or
/// the session is gone (which deletes the node anyway).
async fn delete_later(keeper: Arc<Keeper>, node: Arc<Node>, after: Duration) {
    sleep(after).await;
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        match node.delete(&keeper.client).await {
            Ok(_) => return,
            Err(_) if keeper.client.state().is_terminated() => return,
            Err(e) => {
                tracing::debug!(node = %node.path, error = %e, "hold_at_least: deleting the node failed; retrying");
                sleep(backoff.next_delay()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_never_outlasts_the_session() {
        let (session, tick) = (Duration::from_secs(10), Duration::from_secs(2));
        // The bound is the session less half a tick and 9/20 of the session (`server_bound`):
        // 10 − 1 − 4.5 = 4.5 s.
        // (asked ttl, asked renew_every) → (ttl, renew_every) the Lease runs on, in ms.
        let table = [
            ((30_000, None), (4_500, None)),
            ((30_000, Some(20_000)), (4_500, Some(1_500))),
            ((30_000, Some(1_000)), (4_500, Some(1_000))),
            ((10_000, Some(5_000)), (4_500, Some(1_500))),
            ((4_000, Some(1_000)), (4_000, Some(1_000))),
        ];
        for ((ttl, every), (want_ttl, want_every)) in table {
            let mut opts = AcquireOptions::new(Duration::from_millis(ttl));
            opts.renew_every = every.map(Duration::from_millis);
            let got = session_bound(&opts, session, tick);
            assert_eq!(got.ttl, Duration::from_millis(want_ttl), "ttl {ttl}");
            assert_eq!(got.renew_every, want_every.map(Duration::from_millis), "ttl {ttl}, renew_every {every:?}");
            assert_eq!((got.wait, got.auto_renew, got.max_hold), (opts.wait, opts.auto_renew, opts.max_hold));
        }
    }

    #[test]
    fn the_bound_allows_for_the_leaders_lag() {
        let ms = Duration::from_millis;
        // (session, tick) → bound, in ms. A tick above half the session is taken as half of it.
        let table = [
            ((10_000, 2_000), 4_500),
            ((4_000, 2_000), 1_200),
            ((60_000, 2_000), 32_000),
            ((2_000, 2_000), 600),
            ((2_000, 200), 1_000),
            ((400, 200), 120),
        ];
        for ((session, tick), want) in table {
            assert_eq!(server_bound(ms(session), ms(tick)), ms(want), "session {session} ms, tick {tick} ms");
        }
    }
}
