//! The lease of a granted node: its renew and release. Watching the node for the lost signal,
//! and gathering renewals into rounds, is the session's [`Keeper`]'s.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Backoff, FencingToken, Lease, LeaseGrant, LeaseHandle, LockError, LockName, OwnerId,
    ReleaseOutcome, RenewOutcome,
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

/// The lease of a node the acquire found holding: runs on the session-bound options and is
/// handed to the session's keeper to watch.
pub(crate) fn grant(session: &Session, name: &LockName, node: Node, granted: Granted, opts: &AcquireOptions) -> Lease {
    let Granted { owner, zxid, confirmed } = granted;
    let node = Arc::new(node);
    let handle = Arc::new(ZkHandle { keeper: Arc::clone(&session.keeper), node: Arc::clone(&node) });
    // zxids are positive; the cast cannot change their order.
    let token = FencingToken(zxid.max(0) as u64);
    let opts = session_bound(opts, session.client.session_timeout());
    let lease = Lease::new(LeaseGrant::new(name.clone(), token, owner, confirmed, handle), &opts);
    session.keeper.hold(node, lease.loss_trigger(), lease.lost());
    lease
}

/// The options the `Lease` runs on: the caller's, with the ttl cut to the negotiated session
/// timeout (docs/contract.md §3). The server keeps our node only while it keeps the session, and it may
/// expire a session it has not heard from for `session_timeout`: counting `valid_until` from the
/// caller's longer ttl would let `is_valid()` claim a lock the server already gave away, for
/// instance after a process stall during which no task ran. Renewals extend by the same bound.
/// A renewal interval the shorter lease could not survive is cut to a third of it.
fn session_bound(opts: &AcquireOptions, session_timeout: Duration) -> AcquireOptions {
    let mut bounded = opts.clone();
    let bound = server_bound(session_timeout);
    if bounded.ttl > bound {
        bounded.ttl = bound;
        bounded.renew_every = bounded.renew_every.map(|every| every.min(bound / 3));
    }
    bounded
}

/// How long after a request it answered the quorum may still keep our session: the session
/// timeout less what the leader may not have heard yet. Through a follower, the leader learns
/// of a session's requests only from the follower's answers to its pings (every `tickTime/2`),
/// so the last requests before a partition may never reach it and it expires the session up to
/// a ping interval earlier than the client counts (measured in `tests/ensemble.rs`: 64 ms of
/// overlap with tickTime 200 ms before this allowance). ZooKeeper negotiates no session shorter
/// than two ticks (its default `minSessionTimeout`), so a quarter of the session covers half a
/// tick; a server configured with a smaller `minSessionTimeout` breaks this assumption.
fn server_bound(session_timeout: Duration) -> Duration {
    session_timeout - session_timeout / 4
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
        let session = Duration::from_secs(10);
        // The bound is the session less a quarter (the leader's lag, `server_bound`): 7.5 s.
        // (asked ttl, asked renew_every) → (ttl, renew_every) the Lease runs on, in ms.
        let table = [
            ((30_000, None), (7_500, None)),
            ((30_000, Some(20_000)), (7_500, Some(2_500))),
            ((30_000, Some(2_000)), (7_500, Some(2_000))),
            ((10_000, Some(5_000)), (7_500, Some(2_500))),
            ((4_000, Some(1_000)), (4_000, Some(1_000))),
        ];
        for ((ttl, every), (want_ttl, want_every)) in table {
            let mut opts = AcquireOptions::new(Duration::from_millis(ttl));
            opts.renew_every = every.map(Duration::from_millis);
            let got = session_bound(&opts, session);
            assert_eq!(got.ttl, Duration::from_millis(want_ttl), "ttl {ttl}");
            assert_eq!(got.renew_every, want_every.map(Duration::from_millis), "ttl {ttl}, renew_every {every:?}");
            assert_eq!((got.wait, got.auto_renew, got.max_hold), (opts.wait, opts.auto_renew, opts.max_hold));
        }
    }
}
