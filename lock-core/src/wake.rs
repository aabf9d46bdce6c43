//! Per-name wake-up hints for waiters in one client: a backend that hears "released" (Redis
//! pub/sub, PostgreSQL NOTIFY, …) calls [`WakeHub::wake`], which wakes **one** local waiter of
//! that name (FIFO), not all of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Reference-counted per-key notifiers.
#[derive(Default, Clone)]
pub struct WakeHub {
    inner: Arc<Mutex<Subscribers>>,
}

/// Per key: the notifier and how many subscriptions hold it.
type Subscribers = HashMap<String, (Arc<Notify>, usize)>;

impl WakeHub {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers interest in `key` until the returned subscription is dropped.
    pub fn subscribe(&self, key: &str) -> WakeSubscription {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(key.to_owned()).or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        WakeSubscription { notify: Arc::clone(&entry.0), hub: self.clone(), key: key.to_owned() }
    }

    /// Wakes one waiter of `key`, if any is subscribed. Returns whether anyone was subscribed.
    pub fn wake(&self, key: &str) -> bool {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(key) {
            Some((notify, _)) => {
                notify.notify_one();
                true
            }
            None => false,
        }
    }

    /// Wakes one waiter of every key, or leaves each key a wake-up for its next wait (after a
    /// subscription is confirmed: a hint published before may have been missed).
    pub fn wake_each(&self) {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (notify, _) in map.values() {
            notify.notify_one();
        }
    }

    /// Wakes every waiter of every key (after a reconnect, when notifications may have been missed).
    pub fn wake_all(&self) {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (notify, _) in map.values() {
            notify.notify_waiters();
        }
    }

    /// Number of keys with at least one subscriber.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nobody is subscribed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Interest in one key; dropping it unsubscribes.
pub struct WakeSubscription {
    notify: Arc<Notify>,
    hub: WakeHub,
    key: String,
}

impl WakeSubscription {
    /// Resolves at the next wake-up hint for this key.
    pub async fn woken(&self) {
        self.notify.notified().await
    }
}

impl Drop for WakeSubscription {
    fn drop(&mut self) {
        let mut map = self.hub.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = map.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(&self.key);
            }
        }
    }
}
