//! The metrics layer, read back with `metrics-util`'s `DebuggingRecorder`: acquisitions by
//! outcome, wait and hold times, renewals and their failures, losses by reason, and the gauge of
//! leases held, for the exclusive lock and the other kinds.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dlock::metrics::Metered;
use dlock::{
    AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName, MemoryLock,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::CompositeKey;

/// What the recorder has seen so far. A `DebuggingRecorder` snapshot drains what it reports
/// (counters and gauges are swapped to 0, histograms emptied), so every read folds the new
/// snapshot into running totals: counters and gauges add up, histograms append.
struct Seen {
    snap: Snapshotter,
    totals: RefCell<HashMap<CompositeKey, DebugValue>>,
}

impl Seen {
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<DebugValue> {
        let mut totals = self.totals.borrow_mut();
        for (key, _, _, new) in self.snap.snapshot().into_vec() {
            let merged = match (totals.remove(&key), new) {
                (Some(DebugValue::Counter(a)), DebugValue::Counter(b)) => DebugValue::Counter(a + b),
                (Some(DebugValue::Gauge(a)), DebugValue::Gauge(b)) => DebugValue::Gauge(a + b),
                (Some(DebugValue::Histogram(mut a)), DebugValue::Histogram(b)) => {
                    a.extend(b);
                    DebugValue::Histogram(a)
                }
                (_, new) => new,
            };
            totals.insert(key, merged);
        }
        totals.iter().find_map(|(key, v)| {
            let key = key.key();
            let matches = key.name() == name
                && labels.iter().all(|(k, want)| key.labels().any(|l| l.key() == *k && l.value() == *want));
            matches.then(|| match v {
                DebugValue::Counter(n) => DebugValue::Counter(*n),
                DebugValue::Gauge(g) => DebugValue::Gauge(*g),
                DebugValue::Histogram(h) => DebugValue::Histogram(h.clone()),
            })
        })
    }
}

fn counter(snap: &Seen, name: &str, labels: &[(&str, &str)]) -> u64 {
    match snap.value(name, labels) {
        Some(DebugValue::Counter(n)) => n,
        None => 0,
        other => panic!("{name} is not a counter: {other:?}"),
    }
}

fn gauge(snap: &Seen, name: &str, labels: &[(&str, &str)]) -> f64 {
    match snap.value(name, labels) {
        Some(DebugValue::Gauge(g)) => g.into_inner(),
        other => panic!("{name} is not a gauge: {other:?}"),
    }
}

fn histogram(snap: &Seen, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    match snap.value(name, labels) {
        Some(DebugValue::Histogram(h)) => h.into_iter().map(|v| v.into_inner()).collect(),
        None => Vec::new(),
        other => panic!("{name} is not a histogram: {other:?}"),
    }
}

/// Runs `test` on a current-thread runtime under a recorder of its own (the watchdog tasks run
/// on this thread too, so they record into it).
fn with_recorder(test: impl AsyncFnOnce(&Seen)) {
    let recorder = DebuggingRecorder::new();
    let snap = Seen { snap: recorder.snapshotter(), totals: RefCell::default() };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    metrics::with_local_recorder(&recorder, || rt.block_on(test(&snap)));
}

/// `N` metered clients of the memory server `server`.
fn metered_clients<const N: usize>(server: &str) -> [Metered<MemoryLock>; N] {
    let server = MemoryLock::named(server);
    std::array::from_fn(|_| Metered::new(Arc::new(server.client())))
}

#[test]
fn acquisitions_by_outcome_wait_and_hold_times() {
    with_recorder(async |snap| {
        let [a, b] = metered_clients("metrics-outcomes");
        let name = LockName::new("jobs/a").expect("valid");
        let opts = AcquireOptions::new(Duration::from_secs(5));
        let lease = a.acquire(&name, &opts).await.expect("granted");
        let lock = [("backend", "memory"), ("kind", "lock")];
        assert_eq!(gauge(snap, "dlock_leases_held", &lock), 1.0);
        assert!(b.try_acquire(&name, &opts).await.expect("answered").is_none());
        let e = b.acquire(&name, &opts.clone().wait(Duration::from_millis(30))).await.expect_err("busy");
        assert!(matches!(e, LockError::Timeout { .. }), "{e}");
        let e = b.acquire(&name, &AcquireOptions::new(Duration::ZERO)).await.expect_err("zero ttl");
        assert!(!matches!(e, LockError::Timeout { .. }), "{e}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        lease.release().await.expect("released");

        let outcome = |o: &'static str| counter(snap, "dlock_acquisitions_total", &[lock[0], lock[1], ("outcome", o)]);
        assert_eq!((outcome("granted"), outcome("busy"), outcome("timeout"), outcome("error")), (1, 1, 1, 1));
        let waited = histogram(snap, "dlock_acquire_wait_seconds", &[("outcome", "timeout")]);
        assert_eq!(waited.len(), 1);
        assert!(waited[0] >= 0.025, "the timed-out wait took {}s", waited[0]);
        let held = histogram(snap, "dlock_hold_seconds", &lock);
        assert_eq!(held.len(), 1, "one hold ended");
        assert!(held[0] >= 0.015, "held {}s", held[0]);
        assert_eq!(gauge(snap, "dlock_leases_held", &lock), 0.0);
        assert_eq!(counter(snap, "dlock_losses_total", &lock), 0, "a release is not a loss");
    });
}

#[test]
fn renewals_failures_and_losses_by_reason() {
    with_recorder(async |snap| {
        let server = MemoryLock::named("metrics-losses");
        let client = server.client();
        let lock = Metered::new(Arc::new(client.clone()));
        let name = LockName::new("jobs/b").expect("valid");
        let opts = AcquireOptions::new(Duration::from_secs(5)).auto_renew(false);
        let lease = lock.acquire(&name, &opts).await.expect("granted");
        lease.renew().await.expect("renewed");
        lease.renew().await.expect("renewed");
        client.set_partitioned(true);
        assert!(lease.renew().await.is_err(), "a cut link fails the renewal");
        client.set_partitioned(false);
        let labels = [("backend", "memory"), ("kind", "lock")];
        assert_eq!(counter(snap, "dlock_renewals_total", &labels), 2);
        assert_eq!(counter(snap, "dlock_renewal_failures_total", &labels), 1);
        // The server forgets the lease: the next renewal finds no entry and the lease is lost.
        assert!(server.evict(&name));
        assert!(matches!(lease.renew().await, Err(LockError::Lost { .. })));
        assert_eq!(counter(snap, "dlock_losses_total", &[labels[0], labels[1], ("reason", "not_owner")]), 1);
        assert_eq!(counter(snap, "dlock_renewal_failures_total", &labels), 1, "a loss is not a renewal failure");
        assert_eq!(gauge(snap, "dlock_leases_held", &labels), 0.0);
        drop(lease);
        tokio::task::yield_now().await;
        assert_eq!(histogram(snap, "dlock_hold_seconds", &labels).len(), 1, "the hold ended once, at the loss");
        assert_eq!(gauge(snap, "dlock_leases_held", &labels), 0.0, "dropping a lost lease changes nothing");
    });
}

#[test]
fn read_write_and_permit_kinds_are_labelled() {
    with_recorder(async |snap| {
        let [rw, sem] = metered_clients("metrics-kinds");
        let name = LockName::new("catalog").expect("valid");
        let opts = AcquireOptions::new(Duration::from_secs(5));
        let r1 = rw.acquire_read(&name, &opts).await.expect("read");
        let r2 = rw.try_acquire_read(&name, &opts).await.expect("answered").expect("shared");
        assert!(rw.try_acquire_write(&name, &opts).await.expect("answered").is_none());
        let p = sem.acquire_permit(&LockName::new("slots").expect("valid"), 2, &opts).await.expect("permit");
        assert_eq!(gauge(snap, "dlock_leases_held", &[("kind", "read")]), 2.0);
        assert_eq!(gauge(snap, "dlock_leases_held", &[("kind", "permit")]), 1.0);
        assert_eq!(counter(snap, "dlock_acquisitions_total", &[("kind", "write"), ("outcome", "busy")]), 1);
        for l in [r1, r2, p] {
            l.release().await.expect("released");
        }
        assert_eq!(gauge(snap, "dlock_leases_held", &[("kind", "read")]), 0.0);
        assert_eq!(histogram(snap, "dlock_hold_seconds", &[("kind", "read")]).len(), 2);
    });
}

#[test]
fn a_callers_own_observer_is_still_told() {
    use std::sync::atomic::{AtomicU32, Ordering};
    struct Count(AtomicU32);
    impl dlock::LeaseEvents for Count {
        fn released(&self, _held: Duration) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    with_recorder(async |snap| {
        let own = Arc::new(Count(AtomicU32::new(0)));
        let lock = Metered::new(Arc::new(MemoryLock::named("metrics-chain")));
        let opts = AcquireOptions::new(Duration::from_secs(5)).events(own.clone());
        let lease = lock.acquire(&LockName::new("x").expect("valid"), &opts).await.expect("granted");
        lease.release().await.expect("released");
        assert_eq!(own.0.load(Ordering::SeqCst), 1);
        assert_eq!(histogram(snap, "dlock_hold_seconds", &[("kind", "lock")]).len(), 1);
    });
}
