//! Change feeds for election observers (docs/contract.md §5.8): a watch on the exclusive lock's
//! queue prefix. Any put or delete under it (a grant, a release, a waiter joining or leaving)
//! fires the feed: a hint, which the observer checks by reading the holder. The watch is created
//! (the server confirmed it) before `watch_changes` returns, so nothing after the registration
//! is missed; after a broken stream the feed fires once and the watch resumes from the last
//! revision seen, so no change in between is lost either (unless compacted away, which also
//! fires the feed).

use std::time::Duration;

use etcd_client::{WatchOptions, WatchStream};
use lock_core::{backend::ChangeSignal, ChangeFeed, LockError, LockName};
use tokio::sync::oneshot;

use crate::client::EtcdLock;
use crate::error::{malformed, timed};

/// The pause before watching again after a failure.
const RETRY: Duration = Duration::from_millis(200);

impl EtcdLock {
    /// A watch on `queue` from revision `from` (0: from now), once the server confirmed it;
    /// returns the stream and the revision it starts after.
    async fn watch_queue(&self, queue: &str, from: i64) -> Result<(WatchStream, i64), LockError> {
        let mut c = self.client();
        let mut opts = WatchOptions::new().with_prefix();
        if from > 0 {
            opts = opts.with_start_revision(from);
        }
        let bound = self.request_timeout();
        let created = async {
            let mut stream = c.watch(queue, Some(opts)).await?;
            let first = stream.message().await?;
            Ok((stream, first))
        };
        match timed(bound, "watching the lock's queue", created).await? {
            (stream, Some(resp)) if resp.created() => {
                Ok((stream, resp.header().map(|h| h.revision()).unwrap_or(from.saturating_sub(1))))
            }
            _ => Err(malformed("a watch confirmation")),
        }
    }

    pub(crate) async fn watch_changes_now(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        let queue = self.keys().queue(name);
        let (stream, seen) = self.watch_queue(&queue, 0).await?;
        let signal = ChangeSignal::new();
        // The feed keeps `stop`'s sender: dropping the feed ends the task.
        let (keep, stop) = oneshot::channel::<()>();
        let feed = signal.feed(keep);
        tokio::spawn(follow(self.clone(), queue, stream, seen, signal, stop));
        Ok(Some(feed))
    }
}

/// Fires the feed on every change under `queue`, watching again after a failure.
async fn follow(
    lock: EtcdLock,
    queue: String,
    mut stream: WatchStream,
    mut seen: i64,
    signal: ChangeSignal,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let msg = tokio::select! {
            _ = &mut stop => return,
            msg = stream.message() => msg,
        };
        match msg {
            Ok(Some(resp)) if !resp.canceled() => {
                if let Some(h) = resp.header() {
                    seen = seen.max(h.revision());
                }
                if !resp.events().is_empty() {
                    signal.changed();
                }
                continue;
            }
            _ => signal.changed(),
        }
        stream = loop {
            tokio::select! {
                _ = &mut stop => return,
                () = tokio::time::sleep(RETRY) => {}
            }
            match lock.watch_queue(&queue, seen + 1).await {
                Ok((s, _)) => break s,
                Err(e) => tracing::debug!(queue, error = %e, "observe: watching the queue failed; retrying"),
            }
        };
    }
}
