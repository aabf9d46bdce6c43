//! The lease of a granted node: its renew and release, and the monitor that fires the lost
//! signal when the session ends, the node goes, or the server may have expired the session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Backoff, FencingToken, Lease, LeaseGrant, LeaseHandle, LockError, LockName, LossTrigger,
    LostSignal, OwnerId, ReleaseOutcome, RenewOutcome,
};
use tokio::time::{sleep, sleep_until, Instant};
use zookeeper_client::{Client, EventType, SessionState};

use crate::client::ZkLock;
use crate::session::{classify, connected, delete_every, Failure, Session, ZkError, BACKEND};

impl ZkLock {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn grant(
        &self,
        session: &Session,
        name: &LockName,
        owner: OwnerId,
        prefix: String,
        path: String,
        zxid: i64,
        confirmed: Instant,
        opts: &AcquireOptions,
    ) -> Lease {
        let released = Arc::new(AtomicBool::new(false));
        let confirmed = Arc::new(Mutex::new(confirmed));
        let handle = Arc::new(ZkHandle {
            client: session.client.clone(),
            session_id: session.id,
            prefix: prefix.clone(),
            path: path.clone(),
            released: Arc::clone(&released),
            confirmed: Arc::clone(&confirmed),
        });
        // zxids are positive; the cast cannot change their order.
        let token = FencingToken(zxid.max(0) as u64);
        let opts = session_bound(opts, session.client.session_timeout());
        let lease = Lease::new(LeaseGrant::new(name.clone(), token, owner, confirmed_at(&confirmed), handle), &opts);
        let monitor = Monitor {
            client: session.client.clone(),
            session_id: session.id,
            prefix,
            path,
            trigger: lease.loss_trigger(),
            lost: lease.lost(),
            released,
            confirmed,
        };
        tokio::spawn(monitor.run());
        lease
    }
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

/// Whether our node is still ours, asked through the leader: `sync` goes first, so that the
/// answer is not the stale memory of a follower cut off from the leader (which keeps answering
/// reads after the leader stopped hearing from our session). Both requests leave at once; one
/// session's requests are served in order.
async fn confirm(client: &Client, path: &str, session_id: i64) -> Result<bool, ZkError> {
    let (synced, stat) = tokio::join!(client.sync(path), client.check_stat(path));
    match synced {
        Ok(()) | Err(ZkError::NoNode) => {}
        Err(e) => return Err(e),
    }
    Ok(stat?.is_some_and(|s| s.ephemeral_owner == session_id))
}

/// Deletes a granted node and every other node of its acquisition (see [`delete_every`]).
async fn delete_node_of(client: &Client, prefix: &str, path: &str) -> Result<ReleaseOutcome, LockError> {
    let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
    delete_every(client, parent, prefix, Some(path)).await
}

fn confirmed_at(c: &Mutex<Instant>) -> Instant {
    *c.lock().unwrap_or_else(|e| e.into_inner())
}

/// Renew and release of one granted node.
struct ZkHandle {
    client: Client,
    session_id: i64,
    /// Our acquisition's unique node prefix (a full path): release deletes every node with it.
    prefix: String,
    path: String,
    released: Arc<AtomicBool>,
    /// When the last request that proved our node alive was sent (the server heard from our
    /// session no earlier than this).
    confirmed: Arc<Mutex<Instant>>,
}

#[async_trait]
impl LeaseHandle for ZkHandle {
    async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
        let state = self.client.state();
        if state.is_terminated() {
            return Ok(RenewOutcome::NotOwner);
        }
        if !connected(state) {
            // Requests would queue until the connection is back; answer now instead.
            return Err(LockError::unavailable(BACKEND, "the connection to ZooKeeper is suspended"));
        }
        let sent = Instant::now();
        match confirm(&self.client, &self.path, self.session_id).await {
            Ok(true) => {
                let mut c = self.confirmed.lock().unwrap_or_else(|e| e.into_inner());
                *c = (*c).max(sent);
                Ok(RenewOutcome::Renewed)
            }
            Ok(false) => Ok(RenewOutcome::NotOwner),
            Err(e) => match classify(e) {
                Failure::SessionGone => Ok(RenewOutcome::NotOwner),
                Failure::Transient(e) => Err(e),
                Failure::Server(e) => Err(LockError::backend(BACKEND, e)),
            },
        }
    }

    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.released.store(true, Ordering::SeqCst);
        // In a task, so the deletion goes on if the caller stops waiting for it.
        let (client, prefix, path) = (self.client.clone(), self.prefix.clone(), self.path.clone());
        match tokio::spawn(async move { delete_node_of(&client, &prefix, &path).await }).await {
            Ok(r) => r,
            Err(e) => Err(LockError::backend(BACKEND, e)),
        }
    }

    /// The lease is the session, so a shorter ttl means nothing to the server: keep the node
    /// (confirmed ours first) and delete it `after` from now from a background task. If the
    /// process or its session ends first, the node goes when the session does — possibly
    /// before `t0 + hold_at_least` (docs/contract.md §3).
    async fn release_after(&self, after: Duration) -> Result<ReleaseOutcome, LockError> {
        if self.renew(after).await? == RenewOutcome::NotOwner {
            return Ok(ReleaseOutcome::NotOwner);
        }
        self.released.store(true, Ordering::SeqCst);
        tokio::spawn(delete_later(self.client.clone(), self.prefix.clone(), self.path.clone(), after));
        Ok(ReleaseOutcome::Released)
    }
}

/// Deletes our node `after` from now (`hold_at_least`), retrying until the server answers or
/// the session is gone (which deletes the node anyway).
async fn delete_later(client: Client, prefix: String, path: String, after: Duration) {
    sleep(after).await;
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        match delete_node_of(&client, &prefix, &path).await {
            Ok(_) => return,
            Err(_) if client.state().is_terminated() => return,
            Err(e) => {
                tracing::debug!(node = %path, error = %e, "hold_at_least: deleting the node failed; retrying");
                sleep(backoff.next_delay()).await;
            }
        }
    }
}

/// Fires a lease's lost signal when its session ends, its node is deleted, or the connection
/// stays suspended until the server may have expired the session; and deletes the node of a
/// lease that was lost but not released, so that nobody waits on a lock we no longer claim.
struct Monitor {
    client: Client,
    session_id: i64,
    prefix: String,
    path: String,
    trigger: LossTrigger,
    lost: LostSignal,
    released: Arc<AtomicBool>,
    confirmed: Arc<Mutex<Instant>>,
}

enum NodeEnd {
    Deleted,
    SessionEnded(SessionState),
    NotOurs,
}

impl Monitor {
    async fn run(self) {
        let session_timeout = server_bound(self.client.session_timeout());
        let drift = lock_core::clock_drift(session_timeout);
        // The server keeps the session at least `session_timeout` after it last heard from us,
        // and it heard from us no earlier than when we sent a request it answered. Probing a few
        // times per session timeout keeps that instant fresh, and stopping to claim the lock at
        // `confirmed + session_timeout - drift` needs no assumption about round trips or about
        // when the client library notices a dead connection.
        let probe_every = (session_timeout / 5).max(Duration::from_millis(20));
        let mut next_probe = Instant::now() + probe_every;
        let mut states = self.client.state_watcher();
        let node_end = self.node_end();
        tokio::pin!(node_end);
        let lost = self.lost.fired();
        tokio::pin!(lost);
        loop {
            let expiry_risk =
                (confirmed_at(&self.confirmed) + session_timeout).checked_sub(drift).unwrap_or_else(Instant::now);
            tokio::select! {
                _ = &mut lost => break,
                end = &mut node_end => {
                    let reason = match end {
                        NodeEnd::Deleted => "our lock node was deleted".to_owned(),
                        NodeEnd::NotOurs => "our lock node belongs to another session".to_owned(),
                        NodeEnd::SessionEnded(s) => format!("the ZooKeeper session ended ({s})"),
                    };
                    self.fire(&reason);
                    return;
                }
                state = states.changed() => {
                    if state.is_terminated() {
                        self.fire(&format!("the ZooKeeper session ended ({state})"));
                        return;
                    }
                }
                _ = sleep_until(next_probe) => {
                    next_probe = Instant::now() + probe_every;
                    if !connected(self.client.state()) {
                        // The request would only queue until the connection is back.
                        continue;
                    }
                    let sent = Instant::now();
                    let probe = tokio::select! {
                        r = confirm(&self.client, &self.path, self.session_id) => Some(r),
                        _ = sleep_until(expiry_risk.min(sent + probe_every)) => None,
                    };
                    match probe.map(|r| r.map_err(classify)) {
                        Some(Ok(true)) => {
                            let mut c = self.confirmed.lock().unwrap_or_else(|e| e.into_inner());
                            *c = (*c).max(sent);
                        }
                        Some(Ok(false)) => {
                            self.fire("our lock node is gone or belongs to another session");
                            break;
                        }
                        Some(Err(Failure::SessionGone)) => {
                            self.fire("the ZooKeeper session ended");
                            return;
                        }
                        // No answer (yet): the deadline below decides.
                        _ => {}
                    }
                }
                _ = sleep_until(expiry_risk) => {
                    if Instant::now() >= (confirmed_at(&self.confirmed) + session_timeout).checked_sub(drift).unwrap_or_else(Instant::now) {
                        self.fire("ZooKeeper has not answered for so long that the session may have expired");
                        break;
                    }
                }
            }
        }
        if !self.released.load(Ordering::SeqCst) {
            // A lost lease is dropped without a release: free the node ourselves once the
            // server is reachable again (if the session survived).
            let _ = delete_node_of(&self.client, &self.prefix, &self.path).await;
        }
    }

    fn fire(&self, reason: &str) {
        // A release deletes the node itself: that is no loss.
        if !self.released.load(Ordering::SeqCst) {
            self.trigger.fire(reason);
        }
    }

    /// Resolves when our node is gone or no longer ours.
    async fn node_end(&self) -> NodeEnd {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
        loop {
            match self.client.get_and_watch_data(&self.path).await {
                Ok((_, stat, watcher)) => {
                    if stat.ephemeral_owner != self.session_id {
                        return NodeEnd::NotOurs;
                    }
                    let event = watcher.changed().await;
                    match event.event_type {
                        EventType::NodeDeleted => return NodeEnd::Deleted,
                        EventType::Session => return NodeEnd::SessionEnded(event.session_state),
                        _ => continue,
                    }
                }
                Err(e) => match classify(e) {
                    Failure::Server(ZkError::NoNode) => return NodeEnd::Deleted,
                    Failure::SessionGone => return NodeEnd::SessionEnded(self.client.state()),
                    _ => sleep(backoff.next_delay()).await,
                },
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
