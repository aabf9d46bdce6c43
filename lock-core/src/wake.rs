//! Per-name wake-up hints for one client: a backend that hears "released" (Redis pub/sub,
//! PostgreSQL NOTIFY, …) calls [`WakeHub::wake`], which wakes **one** local waiter of that name
//! (FIFO), not all of them. Observers of a name (elections' `observe`) register apart
//! ([`WakeHub::observe`]): [`WakeHub::changed`] wakes every one of them and never takes a
//! waiter's wake-up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::{ChangeFeed, ChangeSignal};

/// Reference-counted per-key notifiers.
#[derive(Default, Clone)]
pub struct WakeHub {
    inner: Arc<Mutex<Subscribers>>,
}

#[derive(Default)]
struct Subscribers {
    /// Per key: the waiters' notifier and how many subscriptions hold it.
    waiters: HashMap<String, (Arc<Notify>, usize)>,
    /// Per key: the observers' signal (its feeds are the reference count).
    observers: HashMap<String, ChangeSignal>,
}

impl WakeHub {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Subscribers> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers interest in `key` until the returned subscription is dropped.
    pub fn subscribe(&self, key: &str) -> WakeSubscription {
        let mut map = self.lock();
        let entry = map.waiters.entry(key.to_owned()).or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        WakeSubscription { notify: Arc::clone(&entry.0), hub: self.clone(), key: key.to_owned() }
    }

    /// Registers an observer of `key`: the feed fires at every [`WakeHub::changed`] of `key` and
    /// at every [`WakeHub::wake_all`] / [`WakeHub::wake_each`] (hints may have been missed).
    /// `keep` lives as long as the feed.
    pub fn observe(&self, key: &str, keep: impl std::any::Any + Send + Sync) -> ChangeFeed {
        let mut map = self.lock();
        map.observers.retain(|_, s| !s.is_unwatched());
        map.observers.entry(key.to_owned()).or_default().feed(keep)
    }

    /// Wakes every observer of `key`; whether anyone observes it.
    pub fn changed(&self, key: &str) -> bool {
        let map = self.lock();
        match map.observers.get(key) {
            Some(s) if !s.is_unwatched() => {
                s.changed();
                true
            }
            _ => false,
        }
    }

    /// Wakes one waiter of `key`, if any is subscribed. Returns whether anyone was subscribed.
    pub fn wake(&self, key: &str) -> bool {
        let map = self.lock();
        match map.waiters.get(key) {
            Some((notify, _)) => {
                notify.notify_one();
                true
            }
            None => false,
        }
    }

    /// Wakes one waiter of every key, or leaves each key a wake-up for its next wait (after a
    /// subscription is confirmed: a hint published before may have been missed), and every
    /// observer.
    pub fn wake_each(&self) {
        let map = self.lock();
        for (notify, _) in map.waiters.values() {
            notify.notify_one();
        }
        map.observers.values().for_each(ChangeSignal::changed);
    }

    /// Wakes every waiter and observer of every key (after a reconnect, when notifications may
    /// have been missed).
    pub fn wake_all(&self) {
        let map = self.lock();
        for (notify, _) in map.waiters.values() {
            notify.notify_waiters();
        }
        map.observers.values().for_each(ChangeSignal::changed);
    }

    /// Number of keys with at least one waiter or observer.
    pub fn len(&self) -> usize {
        let map = self.lock();
        let observed = map.observers.iter().filter(|(k, s)| !s.is_unwatched() && !map.waiters.contains_key(*k));
        map.waiters.len() + observed.count()
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
        let mut map = self.hub.lock();
        if let Some(entry) = map.waiters.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.waiters.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn observers_do_not_take_a_waiters_wake_up() {
        let hub = WakeHub::new();
        let waiter = hub.subscribe("n");
        let (mut a, mut b) = (hub.observe("n", ()), hub.observe("n", ()));
        let mut other = hub.observe("m", ());
        assert_eq!(hub.len(), 2);
        assert!(hub.changed("n"));
        assert!(a.changed().await && b.changed().await, "every observer of the name wakes");
        let quiet = tokio::time::timeout(Duration::from_millis(20), waiter.woken()).await;
        assert!(quiet.is_err(), "a change wakes no waiter");
        assert!(hub.wake("n"));
        tokio::time::timeout(Duration::from_millis(200), waiter.woken()).await.expect("the waiter keeps its wake-up");
        let none = tokio::time::timeout(Duration::from_millis(20), other.changed()).await;
        assert!(none.is_err(), "another name's observer stays asleep");
        hub.wake_all();
        assert!(other.changed().await, "a reconnect wakes every observer");
        drop((a, b, other, waiter));
        assert!(hub.is_empty());
        assert!(!hub.changed("n"));
    }
}
