//! A granted node: what its lease's handle and its session's keeper share, and the one lease
//! the keeper is handed to watch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lock_core::{
    backend::{LossTrigger, ReleaseOutcome},
    LockError, LostSignal,
};
use zookeeper_client::Client;

use crate::session::{delete_every, delete_with_retry};

/// A granted node, shared by its lease's handle and the session's keeper.
pub(crate) struct Node {
    /// The node's full path. Its first `prefix_len` bytes are the acquisition's unique prefix
    /// (one string for both: the node is kept for as long as the lease is held).
    pub(crate) path: Box<str>,
    prefix_len: usize,
    /// Set before the release's delete is sent: the node going is then no loss.
    pub(crate) released: AtomicBool,
    /// Exactly one create was sent for this acquisition, and it was answered: no other node
    /// with its prefix can exist, so a release deletes `path` alone (no lookup).
    pub(crate) clean: bool,
}

impl Node {
    /// `path` starts with `prefix` (both come from the create); if it did not, the node would
    /// count as the only one of its prefix, so that a release deletes nothing but it.
    pub(crate) fn new(prefix: &str, path: String, clean: bool) -> Node {
        let prefix_len = if path.starts_with(prefix) { prefix.len() } else { path.len() };
        // Boxed: exactly as long as the path (the formatted `String` may have twice the room).
        Node { path: path.into_boxed_str(), prefix_len, released: AtomicBool::new(false), clean }
    }

    fn prefix(&self) -> &str {
        self.path.get(..self.prefix_len).unwrap_or(&self.path)
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    /// Deletes the node and, unless the acquisition was clean, every other node of its prefix
    /// (see [`delete_every`]).
    pub(crate) async fn delete(&self, client: &Client) -> Result<ReleaseOutcome, LockError> {
        if self.clean {
            return delete_with_retry(client, &self.path).await;
        }
        let parent = self.path.rsplit_once('/').map_or("", |(parent, _)| parent);
        delete_every(client, parent, self.prefix(), Some(&self.path)).await
    }
}

/// One lease for the keeper to watch.
pub(crate) struct Held {
    pub(crate) node: Arc<Node>,
    pub(crate) trigger: LossTrigger,
    pub(crate) lost: LostSignal,
}
