//! An election observer's row (docs/contract.md §5.8, `watch_changes`), kept alive over the
//! [`Dialect`] that notifies.
//!
//! The feed is registered first, so that no notification is missed, then the row that makes
//! grants and releases of the name notify (its SQL: `dialect/postgres/observers.rs`). The row
//! lives [`LIFETIME`], is refreshed three times per lifetime while the feed lives, and is
//! deleted when the feed is dropped: a crashed observer's row costs a notification per change
//! only until it lapses, and a live one never lapses between two refreshes.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{ChangeFeed, LockError, OwnerId};
use tokio::sync::oneshot;
use tokio::time::timeout;

use super::run::Runner;
use crate::dialect::Dialect;
use crate::millis::ttl_ms;

/// How long an observer's row lives without a refresh.
const LIFETIME: Duration = Duration::from_secs(30);

/// Registers an observer of `name`: the feed first (so no notification is missed), then the
/// row that makes grants and releases notify; a task refreshes the row until the feed is
/// dropped. `None` where the dialect does not notify.
pub(crate) async fn watch(
    runner: &Runner,
    dialect: &Arc<dyn Dialect>,
    name: &str,
) -> Result<Option<ChangeFeed>, LockError> {
    let owner = format!("observer-{}", OwnerId::random().to_hex());
    let (keep, stop) = oneshot::channel::<()>();
    let Some(feed) = dialect.change_feed(name, keep) else { return Ok(None) };
    let ms = ttl_ms(LIFETIME);
    runner.run("register an election observer", || dialect.observe(name, &owner, ms)).await?;
    let row = Row { dialect: Arc::clone(dialect), name: name.to_owned(), owner, ms };
    tokio::spawn(row.refresh(stop, runner.request_timeout()));
    Ok(Some(feed))
}

/// One observer's row.
struct Row {
    dialect: Arc<dyn Dialect>,
    name: String,
    owner: String,
    ms: i64,
}

impl Row {
    async fn refresh(self, mut stop: oneshot::Receiver<()>, bound: Duration) {
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(LIFETIME / 3) => {}
            }
            // A failed refresh only costs notifications once the row lapses: the poll remains.
            match timeout(bound, self.dialect.observe(&self.name, &self.owner, self.ms)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(lock = self.name, error = %e, "refreshing an observer's row failed"),
                Err(_) => tracing::debug!(lock = self.name, "refreshing an observer's row timed out"),
            }
        }
        let _ = timeout(bound, self.dialect.leave_queue(&self.name, &self.owner)).await;
    }
}
