//! Leases a released grant leaves behind for the client's next acquisition.
//!
//! A release deletes its key and keeps the lease, instead of revoking it, so that the next
//! acquisition with the same ttl queues its key on that lease rather than granting a new one:
//! the free path is then the queueing transaction and the release's delete, the same two
//! durable writes as a bare put-if-absent + delete. The lease carries nothing while it waits
//! here (its only key was deleted, and the delete's answer said so), and it is never shared:
//! taking it removes it from the pool. Nobody keeps a spare alive; one older than half its ttl
//! is dropped (the server then expires it on its own, with nothing attached).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::keepalive::KeepAlive;

/// How many leases one client keeps: enough for a few locks taken and released side by side;
/// a release beyond it revokes its lease as before.
const KEEP: usize = 8;

/// One lease with no key, ready for the next acquisition.
pub(crate) struct Spare {
    pub(crate) id: i64,
    /// The lease's ttl in whole seconds, as granted (a keep-alive restarts this ttl).
    pub(crate) secs: i64,
    /// The server (re)started the lease's ttl at or after this instant.
    pub(crate) refreshed: Instant,
    /// The lease's keep-alive stream, if one was opened while it was held.
    pub(crate) keep_alive: KeepAlive,
}

/// The client's spare leases.
#[derive(Default)]
pub(crate) struct Spares {
    slots: Mutex<Vec<Spare>>,
}

impl Spares {
    /// The freshest spare granted with `secs` whole seconds, if it is younger than half of
    /// `ttl`; older ones are dropped on the way.
    pub(crate) fn take(&self, secs: i64, ttl: Duration) -> Option<Spare> {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.retain(|s| now.saturating_duration_since(s.refreshed) < Duration::from_secs(s.secs.unsigned_abs()) / 2);
        let young = |s: &Spare| now.saturating_duration_since(s.refreshed) < ttl / 2;
        let best = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.secs == secs && young(s))
            .max_by_key(|(_, s)| s.refreshed)
            .map(|(i, _)| i)?;
        Some(slots.swap_remove(best))
    }

    /// Keeps `spare` for a later acquisition; gives it back when the pool is full (the caller
    /// then revokes it).
    pub(crate) fn put(&self, spare: Spare) -> Option<Spare> {
        let mut slots = self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() >= KEEP {
            return Some(spare);
        }
        slots.push(spare);
        None
    }
}

impl std::fmt::Debug for Spares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.slots.lock().map_or(0, |s| s.len());
        f.debug_struct("Spares").field("leases", &n).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spare(id: i64, secs: i64, age: Duration) -> Spare {
        Spare { id, secs, refreshed: Instant::now() - age, keep_alive: KeepAlive::new() }
    }

    #[tokio::test]
    async fn takes_the_freshest_of_the_same_ttl_and_drops_old_ones() {
        let s = Duration::from_secs;
        let spares = Spares::default();
        assert!(spares.put(spare(1, 10, s(1))).is_none());
        assert!(spares.put(spare(2, 10, s(0))).is_none());
        assert!(spares.put(spare(3, 30, s(0))).is_none());
        assert!(spares.put(spare(4, 10, s(6))).is_none());
        assert_eq!(spares.take(10, s(10)).map(|s| s.id), Some(2));
        assert_eq!(spares.take(10, s(10)).map(|s| s.id), Some(1));
        // Lease 4 is past half its ttl: dropped, never handed out.
        assert!(spares.take(10, s(10)).is_none());
        // A ttl that rounds to another number of seconds does not take lease 3.
        assert!(spares.take(31, s(31)).is_none());
        assert_eq!(spares.take(30, s(30)).map(|s| s.id), Some(3));
        for i in 0..KEEP {
            assert!(spares.put(spare(i as i64, 10, s(0))).is_none());
        }
        assert_eq!(spares.put(spare(99, 10, s(0))).map(|s| s.id), Some(99), "a full pool gives the lease back");
    }
}
