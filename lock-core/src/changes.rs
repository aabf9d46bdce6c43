//! Change feeds (docs/contract.md §5.8): how a backend that hears of grants and releases (Redis
//! pub/sub, PostgreSQL NOTIFY, ZooKeeper watches, the in-memory server) tells an
//! [`Election`](crate::Election) observer that a name's holder **may** have changed, so that it
//! reads the holder again at once instead of at its next poll.
//!
//! A feed is a hint, never the truth: it may fire when nothing changed (the observer reads the
//! same holder and stays quiet) and it may miss a lease that merely expired, which is why
//! observers keep polling as a backstop. What it must not do is stay silent about a grant or a
//! release that the backend notifies: a change made after the feed was registered wakes it,
//! even one made before the observer first waits on it (changes are latched until seen).

use std::any::Any;

use tokio::sync::watch;

/// Wakes whoever holds a [`ChangeFeed`] of it: the sending side, kept by the backend's listener.
#[derive(Debug)]
pub struct ChangeSignal {
    tx: watch::Sender<()>,
}

impl Default for ChangeSignal {
    fn default() -> Self {
        ChangeSignal { tx: watch::channel(()).0 }
    }
}

impl ChangeSignal {
    /// A signal nobody watches yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks a change: every feed of this signal wakes (now, or at its next wait).
    pub fn changed(&self) {
        self.tx.send_replace(());
    }

    /// A feed that sees every change marked after this call. `keep` lives as long as the feed
    /// (a subscription guard, a task's drop guard): what makes the backend keep notifying.
    pub fn feed(&self, keep: impl Any + Send + Sync) -> ChangeFeed {
        ChangeFeed { rx: self.tx.subscribe(), _keep: Box::new(keep) }
    }

    /// Whether no feed of this signal is alive.
    pub fn is_unwatched(&self) -> bool {
        self.tx.receiver_count() == 0
    }
}

/// Fires whenever the holder of one name may have changed; see the module docs. Dropping it
/// ends the registration.
pub struct ChangeFeed {
    rx: watch::Receiver<()>,
    _keep: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for ChangeFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeFeed").finish_non_exhaustive()
    }
}

impl ChangeFeed {
    /// Waits for the next change not seen yet. `false`: the backend stopped notifying (its
    /// listener is gone); the caller should register again or poll.
    pub async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }

    /// Forgets the changes marked so far (call it right before reading the holder: whatever
    /// the read misses wakes the next [`ChangeFeed::changed`]).
    pub fn mark_seen(&mut self) {
        self.rx.mark_unchanged();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_change_is_latched_until_seen_and_wakes_every_feed() {
        let signal = ChangeSignal::new();
        let (mut a, mut b) = (signal.feed(()), signal.feed(()));
        signal.changed();
        signal.changed();
        // Marked before anyone waited: still seen, once.
        assert!(a.changed().await);
        assert!(b.changed().await);
        let again = tokio::time::timeout(Duration::from_millis(20), a.changed()).await;
        assert!(again.is_err(), "two marks before a wait wake it once");
        signal.changed();
        a.mark_seen();
        let seen = tokio::time::timeout(Duration::from_millis(20), a.changed()).await;
        assert!(seen.is_err(), "a change marked seen does not wake it");
        drop(b);
        assert!(!signal.is_unwatched());
        drop(a);
        assert!(signal.is_unwatched());
        let mut orphan = ChangeSignal::new().feed(());
        assert!(!orphan.changed().await, "a feed whose signal is gone says so");
    }
}
