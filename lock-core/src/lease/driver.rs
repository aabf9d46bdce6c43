//! The watchdog driver: one task per tokio runtime holds the schedule of every lease made on that
//! runtime (renewals and `valid_until`) and runs their renewals, instead of a task, two timers
//! and a `select!` per lease. Thousands of held leases then cost one timer, one ordered set entry
//! and one small record each; renewals still go through the lease's own handle, and so through
//! the store's batched rounds (`renewals.rs`) where it has them.
//!
//! Per runtime, not per store, because [`Lease::new`](crate::Lease::new) knows no store (Redlock,
//! ZooKeeper and the kinds build leases from bare handles) and a lease's renewals must run on the
//! runtime it was made on: a driver on another runtime would die with that runtime while this
//! lease is still held (a test harness runs one runtime per test, in parallel).
//!
//! Assumptions: the tokio timer wakes at or after an instant, never before, and no later than a
//! per-lease `sleep_until` would (both have the timer wheel's millisecond granularity); a lease's
//! lost signal is therefore never later than with a task per lease. A renewal may start a little
//! early (`watchdog::renewal_slack`), never late. What runs here must not block: the renewal
//! futures and `LeaseEvents` calls are the ones that ran in those tasks, but a blocking one now
//! holds back every lease of the runtime (said on `LeaseEvents`). A panic in them is caught
//! where it is called and loses that one lease (its lost signal fires); a renewal that never
//! answers is one future among the others and is dropped at `valid_until`.

use std::collections::{BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::runtime::{Handle, Id};
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

use super::loss::lose_to_panic;
use super::renew::renew_once;
use super::shared::panic_message;
use super::watchdog::{Step, Watch, MAX_SLACK};
use crate::LockError;

/// The drivers of the runtimes that have leases: few entries, one per runtime.
static DRIVERS: Mutex<Vec<(Id, Arc<Driver>)>> = Mutex::new(Vec::new());

/// A lease's place in a driver; [`Ticket::cancel`] takes it off the schedule.
pub(crate) struct Ticket {
    driver: Arc<Driver>,
    id: u64,
}

impl Ticket {
    /// Stops watching the lease and ends a renewal in flight (idempotent). Its `released` flag
    /// must be set first: an entry the driver holds outside its table at this moment is ended
    /// when the driver sees that flag.
    pub(crate) fn cancel(&self) {
        let removed = self.driver.take(self.id);
        // Ended outside the lock: dropping the lease's state may run its handle's drop.
        if let Some(entry) = removed {
            entry.end();
        }
    }
}

/// Puts a lease on the schedule of `runtime`'s driver, starting that driver if it has none
/// (or its task has ended). `None` when the runtime is shutting down: the lease then has no
/// renewals, as it would have had no task.
pub(crate) fn watch(runtime: &Handle, watch: Watch) -> Option<Ticket> {
    let driver = driver_of(runtime);
    let id = driver.insert(Entry { watch, renewal: None }, Instant::now())?;
    Some(Ticket { driver, id })
}

fn driver_of(runtime: &Handle) -> Arc<Driver> {
    let id = runtime.id();
    let mut drivers = DRIVERS.lock().unwrap_or_else(|e| e.into_inner());
    drivers.retain(|(_, d)| !d.lock().closed);
    if let Some((_, d)) = drivers.iter().find(|(rt, _)| *rt == id) {
        return Arc::clone(d);
    }
    let driver = Arc::new(Driver { state: Mutex::new(State::default()), wake: Notify::new() });
    drop(runtime.spawn(run(Arc::clone(&driver))));
    drivers.push((id, Arc::clone(&driver)));
    driver
}

/// One lease on the schedule.
struct Entry {
    watch: Watch,
    /// Ends its renewal in flight, if one is.
    renewal: Option<AbortHandle>,
}

impl Entry {
    /// The lease is off the schedule for good: a renewal still in flight has no one to answer.
    fn end(self) {
        if let Some(renewal) = self.renewal {
            renewal.abort();
        }
    }
}

#[derive(Default)]
struct State {
    /// Every lease with its key in `queue`.
    entries: HashMap<u64, (Instant, Entry)>,
    /// Every lease's next wake, in order.
    queue: BTreeSet<(Instant, u64)>,
    /// What the driver sleeps until; a lease due earlier wakes it.
    armed: Option<Instant>,
    next_id: u64,
    /// The driver's task has ended (its runtime shut down): it takes no more leases.
    closed: bool,
}

struct Driver {
    state: Mutex<State>,
    wake: Notify,
}

type Renewal = BoxFuture<'static, (u64, Result<Result<(), LockError>, futures::future::Aborted>)>;

impl Driver {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a lease; its id, or `None` if the driver has closed.
    fn insert(&self, entry: Entry, now: Instant) -> Option<u64> {
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        let id = state.next_id;
        state.next_id += 1;
        self.schedule(&mut state, id, entry, now);
        Some(id)
    }

    /// (Re)inserts an entry at its next wake, waking the driver if it sleeps past that.
    fn schedule(&self, state: &mut State, id: u64, entry: Entry, now: Instant) {
        let wake = entry.watch.next_wake(now);
        state.queue.insert((wake, id));
        state.entries.insert(id, (wake, entry));
        if state.armed.is_none_or(|armed| wake < armed) {
            state.armed = Some(wake);
            self.wake.notify_one();
        }
    }

    /// Takes out every entry due at `now`, and those whose renewal may start early to share
    /// this round (their steps run outside the lock).
    fn take_due(&self, now: Instant) -> Vec<(u64, Entry)> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let horizon = now.checked_add(MAX_SLACK).unwrap_or(now);
        let keys: Vec<(Instant, u64)> = state
            .queue
            .range(..=(horizon, u64::MAX))
            .filter(|&&(wake, id)| wake <= now || state.entries.get(&id).is_some_and(|(_, e)| e.watch.renews_by(now)))
            .copied()
            .collect();
        let mut due = Vec::with_capacity(keys.len());
        for key in keys {
            state.queue.remove(&key);
            if let Some((_, entry)) = state.entries.remove(&key.1) {
                due.push((key.1, entry));
            }
        }
        due
    }

    /// Puts back the entries that go on and arms the next wake; the ones released meanwhile
    /// are returned, to be ended outside the lock.
    fn put_back(&self, entries: Vec<(u64, Entry)>, now: Instant) -> (Option<Instant>, Vec<Entry>) {
        let mut over = Vec::new();
        let mut state = self.lock();
        for (id, entry) in entries {
            match entry.watch.is_over() {
                true => over.push(entry),
                false => self.schedule(&mut state, id, entry, now),
            }
        }
        state.armed = state.queue.first().map(|&(wake, _)| wake);
        (state.armed, over)
    }

    /// Takes one entry out.
    fn take(&self, id: u64) -> Option<Entry> {
        let mut state = self.lock();
        let (wake, entry) = state.entries.remove(&id)?;
        state.queue.remove(&(wake, id));
        Some(entry)
    }

    fn close(&self) -> Vec<Entry> {
        let mut state = self.lock();
        state.closed = true;
        state.queue.clear();
        state.entries.drain().map(|(_, (_, entry))| entry).collect()
    }
}

/// Ends the driver when its task is dropped (the runtime shut down): later leases start a new
/// one, and the held leases' state is freed.
struct Closing(Arc<Driver>);

impl Drop for Closing {
    fn drop(&mut self) {
        let entries = self.0.close();
        // Unwinding despite the guards in `run`: nothing renews these leases or watches their
        // `valid_until` any more, so their holders are told now rather than never.
        if std::thread::panicking() {
            for entry in &entries {
                entry.watch.shared.declare_lost("the watchdog driver of its runtime panicked");
            }
        }
        drop(entries);
    }
}

async fn run(driver: Arc<Driver>) {
    let _closing = Closing(Arc::clone(&driver));
    let mut renewals: FuturesUnordered<Renewal> = FuturesUnordered::new();
    let timer = sleep_until(Instant::now());
    tokio::pin!(timer);
    loop {
        let now = Instant::now();
        let mut going_on = Vec::new();
        let mut ended = Vec::new();
        for (id, mut entry) in driver.take_due(now) {
            // A panic here (a hook called on a loss by time) must not unwind out of the one
            // task that keeps every lease of the runtime: it loses this lease only.
            let step = std::panic::catch_unwind(AssertUnwindSafe(|| entry.watch.on_wake(now))).unwrap_or_else(|p| {
                lose_to_panic(&entry.watch.shared, "its watchdog step", &panic_message(p.as_ref()));
                Step::Done
            });
            match step {
                Step::Done => ended.push(entry),
                Step::Wait(_) => going_on.push((id, entry)),
                Step::Renew => {
                    renewals.push(renewal(id, &mut entry));
                    going_on.push((id, entry));
                }
            }
        }
        let (next, over) = driver.put_back(going_on, now);
        ended.into_iter().chain(over).for_each(Entry::end);
        if let Some(at) = next {
            timer.as_mut().reset(at);
        }
        tokio::select! {
            _ = driver.wake.notified() => {}
            _ = timer.as_mut(), if next.is_some() => {}
            Some((id, outcome)) = renewals.next(), if !renewals.is_empty() => {
                answered(&driver, id, outcome);
                // Whatever else has answered by now, without another turn of the loop.
                while let Some(Some((id, outcome))) = renewals.next().now_or_never() {
                    answered(&driver, id, outcome);
                }
            }
        }
    }
}

/// Starts a lease's renewal; the entry keeps the handle that ends it (on release, drop, or
/// loss by time), as the end of a task per lease ended its renewal.
fn renewal(id: u64, entry: &mut Entry) -> Renewal {
    let shared = Arc::clone(&entry.watch.shared);
    let (stop, registration) = AbortHandle::new_pair();
    entry.renewal = Some(stop);
    let renew = async move {
        // A renewal that panics (a backend's handle, a hook) loses its own lease; unwinding
        // would end the driver, and with it every lease of the runtime.
        match AssertUnwindSafe(renew_once(&shared)).catch_unwind().await {
            Ok(outcome) => outcome,
            Err(panic) => {
                lose_to_panic(&shared, "its renewal", &panic_message(panic.as_ref()));
                Err(shared.lost_error())
            }
        }
    };
    Abortable::new(renew, registration).map(move |outcome| (id, outcome)).boxed()
}

fn answered(driver: &Driver, id: u64, outcome: Result<Result<(), LockError>, futures::future::Aborted>) {
    // Ended: its entry is gone already.
    let Ok(outcome) = outcome else { return };
    // Gone already: released, dropped, or lost by time while the renewal was in flight.
    let Some(mut entry) = driver.take(id) else { return };
    entry.renewal = None;
    if entry.watch.renewed(outcome) {
        let now = Instant::now();
        let mut state = driver.lock();
        if !entry.watch.is_over() {
            driver.schedule(&mut state, id, entry, now);
        }
    }
}

#[cfg(test)]
mod tests;
