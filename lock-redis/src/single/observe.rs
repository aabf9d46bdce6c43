//! Election observers on the server (docs/contract.md §5.8): the free path publishes its `+` and
//! `-` only while the name's hash carries an observer mark (`w`, `crate::scripts::Observe`), so
//! that an unobserved lock costs no `PUBLISH`. An observer marks the name before its feed is
//! handed out — a change after that is published — and refreshes the mark while the feed lives.
//!
//! A mark the server lost (an empty restart, a failover to a replica that missed it) silences
//! the free path's messages for at most one refresh ([`REFRESH`]); the observers' own polling,
//! which also covers a lease that merely expired, bounds what that costs.

use std::sync::Arc;
use std::time::Duration;

use lock_core::LockError;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::conn::Node;
use crate::reply::ttl_ms;
use crate::scripts::Observe;

/// How long one mark lasts on the server.
const PERIOD: Duration = Duration::from_secs(30);
/// How often a live feed renews its mark: three times per period, so a refresh that fails once
/// (a time-out, a reconnect) does not let the mark lapse.
const REFRESH: Duration = Duration::from_secs(10);

/// Marks `lock` (a name's hash) observed now and every [`REFRESH`] until the returned guard is
/// dropped (with the feed that keeps it). Fails when the first mark cannot be written: the
/// caller then has no feed and polls.
pub(super) async fn mark_observed(node: &Arc<Node>, lock: String) -> Result<DropGuard, LockError> {
    mark(node, &lock).await?;
    let stop = CancellationToken::new();
    let (node, done) = (Arc::downgrade(node), stop.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = done.cancelled() => return,
                () = tokio::time::sleep(REFRESH) => {}
            }
            let Some(node) = node.upgrade() else { return };
            if let Err(e) = mark(&node, &lock).await {
                tracing::debug!(error = %e, "observer mark not renewed; the next refresh tries again");
            }
        }
    });
    Ok(stop.drop_guard())
}

async fn mark(node: &Node, lock: &str) -> Result<i64, LockError> {
    let call = Observe { lock, period_ms: ttl_ms(PERIOD) };
    node.run_idempotent(node.request_timeout(), |mut c| async move { call.invoke(&mut c).await }).await
}
