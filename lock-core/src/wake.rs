//! Per-name wake-up hints for one client: a backend that hears "released" (Redis pub/sub,
//! PostgreSQL NOTIFY, …) calls [`WakeHub::wake`], which wakes **one** local waiter of that name
//! (FIFO), not all of them. Observers of a name (elections' `observe`) register apart
//! ([`WakeHub::observe`]): [`WakeHub::changed`] wakes every one of them and never takes a
//! waiter's wake-up.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::changes::ChangeSignal;
use crate::{ChangeFeed, FencingToken};

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
    /// The latest keys [`WakeHub::wake_or_keep`] found nobody waiting on (at most [`MISSED`],
    /// oldest first): a waiter that registers just after its own wake-up arrived still gets it.
    missed: VecDeque<String>,
    /// Since when every wake-up for this hub's keys reaches it ([`WakeHub::set_live_since`]).
    live_since: Option<Instant>,
}

impl Subscribers {
    fn wake(&self, key: &str) -> bool {
        self.waiters.get(key).map(|(notify, _)| notify.notify_one()).is_some()
    }
}

/// How many wake-ups of unregistered keys are kept. A waiter registers within one round trip
/// of the attempt that made it wait, so only the latest few can still be claimed.
const MISSED: usize = 128;

impl WakeHub {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Subscribers> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers interest in `key` until the returned subscription is dropped. A wake-up of
    /// `key` kept by [`WakeHub::wake_or_keep`] is left to this subscription: it was sent for
    /// a wait that had not registered yet.
    pub fn subscribe(&self, key: &str) -> WakeSubscription {
        let mut map = self.lock();
        let missed = map.missed.iter().position(|k| k == key).and_then(|i| map.missed.remove(i)).is_some();
        let entry = map.waiters.entry(key.to_owned()).or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        if missed {
            entry.0.notify_one();
        }
        let notify = Arc::clone(&entry.0);
        WakeSubscription { notify, hub: self.clone(), key: key.to_owned(), live_since: map.live_since, pushed: None }
    }

    /// Declares that every wake-up sent from `since` on reaches this hub, and that its feeder
    /// wakes through [`WakeHub::wake_or_keep`] (a listener whose connection had confirmed its
    /// LISTEN then); `None` once that connection is lost. New subscriptions carry it as their
    /// [`WakeSubscription::live_since`].
    pub fn set_live_since(&self, since: Option<Instant>) {
        self.lock().live_since = since;
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
        self.lock().wake(key)
    }

    /// [`WakeHub::wake`], but a wake-up nobody was subscribed for is kept for the next
    /// [`WakeHub::subscribe`] of `key` (among the latest few). For keys that name one wait
    /// (an owner id): its wake-up may arrive before the wait registers.
    pub fn wake_or_keep(&self, key: &str) -> bool {
        // One lock for both: a subscription registered in between would miss the kept wake-up.
        let mut map = self.lock();
        if map.wake(key) {
            return true;
        }
        if !map.missed.iter().any(|k| k == key) {
            if map.missed.len() == MISSED {
                map.missed.pop_front();
            }
            map.missed.push_back(key.to_owned());
        }
        false
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

/// A grant the server pushed to one wait alone, over a channel of that wait's own that no
/// other client can write to (Redis's blocking delivery: the release pushes the token onto a
/// list the waiter blocks on). Unlike a hint it is taken without another request: the wait
/// returns a lease with this token at once, believed for `window` from `armed_at`, and the
/// lease's first renewal is the claim that confirms it for a whole ttl
/// ([`LeaseGrant::provisional`](crate::backend::LeaseGrant::provisional)): sent at once, or a
/// third into the window when the store says its claim may wait ([`PushedGrant::claim_deferred`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushedGrant {
    /// The grant's fencing token, as the server issued it.
    pub token: FencingToken,
    /// The instant before the request that armed the delivery was sent: the server ran it, and
    /// so granted, after this instant.
    pub armed_at: Instant,
    /// How long the server's grant lasts at least, counted from when it was made, unless the
    /// waiter claims it (the claim window).
    pub window: Duration,
    /// The claim may wait a third of the window ([`PushedGrant::claim_deferred`]).
    pub deferred_claim: bool,
}

impl PushedGrant {
    /// A pushed grant (see the type's docs for each field), claimed at once.
    pub fn new(token: FencingToken, armed_at: Instant, window: Duration) -> Self {
        PushedGrant { token, armed_at, window, deferred_claim: false }
    }

    /// The claim is sent a third into the window rather than at once, as a renewal comes a
    /// third into a ttl, so that a hold shorter than that never claims (a hand-off then costs
    /// the server no claim at all). Only for a store whose claim does nothing but extend the
    /// holder's own lease, and whose release frees or hands on an unclaimed grant as it does a
    /// claimed one: a release may now come first, and the claim is then never sent.
    pub fn claim_deferred(mut self) -> Self {
        self.deferred_claim = true;
        self
    }
}

/// The sending side of a wait's pushed grants ([`WakeSubscription::with_pushes`]): `Some`, a
/// grant; `None`, a hint (the wait attempts at once). Closed once the wait ends.
pub type PushSender = mpsc::UnboundedSender<Option<PushedGrant>>;

/// Interest in one key; dropping it unsubscribes.
pub struct WakeSubscription {
    notify: Arc<Notify>,
    hub: WakeHub,
    key: String,
    live_since: Option<Instant>,
    /// The wait's own delivery channel, if the backend gave it one; `None` inside once closed.
    pushed: Option<tokio::sync::Mutex<Option<mpsc::UnboundedReceiver<Option<PushedGrant>>>>>,
}

impl WakeSubscription {
    /// Resolves at the next wake-up hint for this key.
    pub async fn woken(&self) {
        self.notify.notified().await
    }

    /// Gives this wait a delivery channel of its own besides the hub's hints: what the backend
    /// sends on the returned sender reaches only this subscription, and the sender sees the
    /// channel closed once the subscription is dropped (the wait ended).
    pub fn with_pushes(mut self) -> (Self, PushSender) {
        let (tx, rx) = mpsc::unbounded_channel();
        self.pushed = Some(tokio::sync::Mutex::new(Some(rx)));
        (self, tx)
    }

    /// The next wake-up hint (`None`) or pushed grant (`Some`) for this wait.
    pub(crate) async fn next(&self) -> Option<PushedGrant> {
        let Some(pushed) = &self.pushed else {
            self.woken().await;
            return None;
        };
        let mut rx = pushed.lock().await;
        let Some(feed) = rx.as_mut() else {
            drop(rx);
            self.woken().await;
            return None;
        };
        tokio::select! {
            () = self.notify.notified() => None,
            item = feed.recv() => match item {
                Some(item) => item,
                // The backend's delivery ended: hints only from now on (a wake-up, so the wait
                // attempts once rather than miss what that delivery would have brought).
                None => {
                    *rx = None;
                    None
                }
            },
        }
    }

    /// Since when every hint for this key reaches this subscription: a backend sets it when the
    /// server had confirmed the channel (on a connection still up) before that instant. A
    /// waiter whose busy answer was sent after it needs no second attempt before waiting: the
    /// release it waits for cannot have been missed. `None`: not known, try once more.
    pub fn live_since(&self) -> Option<Instant> {
        self.live_since
    }

    /// Declares [`WakeSubscription::live_since`] (see there for what it promises).
    pub fn with_live_since(mut self, since: Option<Instant>) -> Self {
        self.live_since = since;
        self
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

    #[tokio::test]
    async fn a_wake_up_before_the_wait_registers_is_kept_for_it() {
        let hub = WakeHub::new();
        let soon = Duration::from_millis(200);
        assert!(!hub.wake_or_keep("owner-a"), "nobody waits on owner-a yet");
        assert!(!hub.wake("owner-b"), "a plain wake-up is not kept");
        let a = hub.subscribe("owner-a");
        tokio::time::timeout(soon, a.woken()).await.expect("owner-a's early wake-up is not lost");
        let b = hub.subscribe("owner-b");
        let quiet = tokio::time::timeout(Duration::from_millis(20), b.woken()).await;
        assert!(quiet.is_err(), "owner-b got no wake-up to keep");
        drop((a, b));
        let again = hub.subscribe("owner-a");
        let quiet = tokio::time::timeout(Duration::from_millis(20), again.woken()).await;
        assert!(quiet.is_err(), "a kept wake-up is handed out once");
        drop(again);
        for i in 0..=MISSED {
            hub.wake_or_keep(&format!("k{i}"));
        }
        let oldest = hub.subscribe("k0");
        let quiet = tokio::time::timeout(Duration::from_millis(20), oldest.woken()).await;
        assert!(quiet.is_err(), "only the latest {MISSED} are kept");
        let newest = hub.subscribe(&format!("k{MISSED}"));
        tokio::time::timeout(soon, newest.woken()).await.expect("the newest is kept");
    }
}
