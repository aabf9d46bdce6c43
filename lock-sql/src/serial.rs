//! One-at-a-time renew and release per lease (its owner id), and nothing shared between leases.
//!
//! A release sent while the same lease's renewal is still in flight could be applied first; the
//! renewal then finds the row freed and answers NotOwner, which the lease watchdog would report
//! as a lost lease although the holder itself released it. Waiting lets the renewal finish first
//! (or be cancelled by the release, before its answer is read). The lock is per owner id, so a
//! renewal that hangs (a row locked by someone else's transaction) delays no other lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lock_core::OwnerId;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// The per-owner locks in use; an entry lives while someone holds or waits for it.
#[derive(Default)]
pub(crate) struct OwnerLocks {
    map: Mutex<HashMap<u128, Arc<AsyncMutex<()>>>>,
}

/// Held while one renew or release of an owner runs.
pub(crate) struct OwnerGuard<'a> {
    locks: &'a OwnerLocks,
    owner: u128,
    guard: Option<OwnedMutexGuard<()>>,
}

impl OwnerLocks {
    /// Waits until no other renew or release of `owner` runs.
    pub(crate) async fn lock(&self, owner: OwnerId) -> OwnerGuard<'_> {
        let key = owner.as_u128();
        let mutex = Arc::clone(self.map.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default());
        // Registered before waiting: a cancelled wait still removes the entry when dropped.
        let mut g = OwnerGuard { locks: self, owner: key, guard: None };
        g.guard = Some(mutex.lock_owned().await);
        g
    }

    /// The turn of `owner` when nobody else has it; `None` without waiting otherwise.
    pub(crate) fn try_lock(&self, owner: OwnerId) -> Option<OwnerGuard<'_>> {
        let key = owner.as_u128();
        let mutex = Arc::clone(self.map.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default());
        let mut g = OwnerGuard { locks: self, owner: key, guard: None };
        g.guard = Some(mutex.try_lock_owned().ok()?);
        Some(g)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for OwnerGuard<'_> {
    fn drop(&mut self) {
        let mut map = self.locks.map.lock().unwrap_or_else(|e| e.into_inner());
        drop(self.guard.take());
        // Nobody else holds or waits for it (only the map's own reference is left): forget it.
        if map.get(&self.owner).is_some_and(|m| Arc::strong_count(m) == 1) {
            map.remove(&self.owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn owner(n: u128) -> OwnerId {
        OwnerId::from_hex(&format!("{n:032x}")).expect("32 hex digits")
    }

    #[tokio::test]
    async fn owners_never_wait_for_each_other_and_entries_go() {
        let locks = OwnerLocks::default();
        // 1 and 65 shared one of the 64 stripes this replaced.
        let held = locks.lock(owner(1)).await;
        let other = tokio::time::timeout(Duration::from_millis(100), locks.lock(owner(65))).await;
        assert!(other.is_ok(), "another owner waited behind owner 1");
        drop(other);
        let same = tokio::time::timeout(Duration::from_millis(50), locks.lock(owner(1))).await;
        assert!(same.is_err(), "the same owner must wait");
        assert!(locks.try_lock(owner(1)).is_none(), "taken: no turn without waiting");
        assert!(locks.try_lock(owner(2)).is_some(), "free: the turn at once");
        drop(held);
        assert_eq!(locks.len(), 0, "entries are forgotten once unused");
        let _again = locks.lock(owner(1)).await;
        assert_eq!(locks.len(), 1);
    }
}
