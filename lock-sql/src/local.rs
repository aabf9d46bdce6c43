//! Release hints within one process, for the databases that cannot notify (MySQL/MariaDB,
//! SQLite): a release answered "released" wakes the waiter of the same name that waits in this
//! process, on the same database and table, with the earliest place in the queue; it attempts
//! at once instead of at its next poll (queue.rs, `queued_poll`: up to 10 ms for the queue's
//! head). Waiters of other processes poll as before; a waiter woken here polls at its own pace
//! too.
//!
//! A hint is only that: the woken waiter's attempt is the ordinary one, which the queue checks
//! (queue.rs), so a waiter that is not the queue's head (the head waits in another process) is
//! refused and waits on; a hint that comes late, twice, or to a waiter that left costs one
//! attempt at most. One registry per process, keyed by the database and the table, because an
//! application may open several backends on one database (and `dlock bench` does, one per
//! client), from URLs or over its own pools: the dialect names the database
//! ([`Profile::database`](crate::dialect::Profile): MySQL's user, host, port and database,
//! SQLite's file), never with a password.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use lock_core::backend::{WakeHub, WakeSubscription};
use tokio::time::Instant;

/// The registries of this process, by database and table; a handful of entries.
static LOCALS: OnceLock<Mutex<HashMap<String, Local>>> = OnceLock::new();

/// Per name, its subscribed waits by place: (place, owner id).
type Waits = HashMap<String, BTreeSet<(i64, String)>>;

/// The waiters of one database and table in this process.
#[derive(Clone)]
pub(crate) struct Local {
    /// One key per wait: its owner id.
    hub: WakeHub,
    /// Per name, the waits that subscribed, by queue place (place, owner id); the store forgets
    /// a wait when it ends, and a release drops one it finds no longer subscribed.
    places: Arc<Mutex<Waits>>,
    /// Every release of this process on this table since this instant reaches the hub.
    since: Instant,
}

impl Local {
    /// The registry of `database` (its [`Profile::database`](crate::dialect::Profile)) and
    /// `table`.
    pub(crate) fn of(database: &str, table: &str) -> Local {
        let key = format!("{database}\n{table}");
        let mut locals = LOCALS.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner());
        let local = locals.entry(key).or_insert_with(|| Local {
            hub: WakeHub::new(),
            places: Arc::default(),
            since: Instant::now(),
        });
        local.clone()
    }

    /// The wait of `owner` for `name`, queued at `place` (`i64::MAX`: not known). Every release
    /// of this process since the registry was made reaches it (`live_since`), so the wait needs
    /// no second attempt after subscribing; releases elsewhere send no hint, and its polls find
    /// them.
    pub(crate) fn subscribe(&self, name: &str, owner: &str, place: i64) -> WakeSubscription {
        let sub = self.hub.subscribe(owner).with_live_since(Some(self.since));
        self.lock().entry(name.to_owned()).or_default().insert((place, owner.to_owned()));
        sub
    }

    /// `name` was released: wakes the subscribed wait with the earliest place, if any.
    pub(crate) fn released(&self, name: &str) {
        let mut places = self.lock();
        let Some(waits) = places.get_mut(name) else { return };
        while let Some(first) = waits.pop_first() {
            if self.hub.wake(&first.1) {
                // Still waiting: it stays first until its wait ends.
                waits.insert(first);
                break;
            }
        }
        if waits.is_empty() {
            places.remove(name);
        }
    }

    /// The wait of `owner` for `name` ended (granted, or given up).
    pub(crate) fn forget(&self, name: &str, owner: &str) {
        let mut places = self.lock();
        let Some(waits) = places.get_mut(name) else { return };
        waits.retain(|(_, o)| o != owner);
        if waits.is_empty() {
            places.remove(name);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waits> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }
}
