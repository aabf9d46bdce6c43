//! Metrics through the [`metrics`] facade (feature `metrics`): [`Metered`] wraps any
//! [`DistributedLock`], [`DistributedRwLock`] or [`DistributedSemaphore`], so the backends stay
//! free of it. Install any `metrics` recorder (Prometheus, StatsD, …) and these appear:
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `dlock_acquisitions_total` | counter | backend, kind, outcome | every acquire / try_acquire: `granted`, `busy` (try: held elsewhere), `timeout` (the wait ended), `error` |
//! | `dlock_acquire_wait_seconds` | histogram | backend, kind, outcome | how long the call took |
//! | `dlock_hold_seconds` | histogram | backend, kind | grant to release, drop or loss |
//! | `dlock_renewals_total` | counter | backend, kind | successful renewals (watchdog or `Lease::renew`) |
//! | `dlock_renewal_failures_total` | counter | backend, kind | renewals that failed (the watchdog retries while the lease is valid) |
//! | `dlock_losses_total` | counter | backend, kind, reason | leases lost: `not_owner` (the server has another owner or none), `expired` (no renewal in time), `session` (ZooKeeper session ended), `other` |
//! | `dlock_leases_held` | gauge | backend, kind | leases of this process held now |
//!
//! `kind` is `lock`, `read`, `write` or `permit`. The lease events come from the lease itself
//! ([`AcquireOptions::events`]); an observer the caller set there is still called.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), dlock::LockError> {
//! use std::time::Duration;
//! use dlock::{AcquireOptions, DistributedLock, LockName};
//! let lock = dlock::metrics::Metered::new(dlock::connect("memory://metrics-doc").await?);
//! let lease = lock.acquire(&LockName::new("jobs/nightly")?, &AcquireOptions::new(Duration::from_secs(5))).await?;
//! lease.release().await?; // dlock_acquisitions_total{outcome="granted"} 1, dlock_hold_seconds …
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    backend::async_trait, AcquireOptions, Capabilities, ChangeFeed, DistributedLock, DistributedRwLock,
    DistributedSemaphore, EventsRef, FencingToken, HolderInfo, Lease, LeaseEvents, LockError, LockName, LockService,
};
use tokio::time::Instant;

/// A lock client whose acquisitions and leases are counted and timed; see the module docs.
pub struct Metered<L: ?Sized> {
    inner: Arc<L>,
}

impl<L: ?Sized> Clone for Metered<L> {
    fn clone(&self) -> Self {
        Metered { inner: Arc::clone(&self.inner) }
    }
}

impl<L: ?Sized> Metered<L> {
    /// Wraps a client.
    pub fn new(inner: Arc<L>) -> Self {
        Metered { inner }
    }

    /// The wrapped client.
    pub fn inner(&self) -> &Arc<L> {
        &self.inner
    }
}

/// Records one lease's events under its labels.
struct Recorder {
    backend: String,
    kind: &'static str,
    /// The caller's own observer, still told everything.
    chained: Option<EventsRef>,
}

impl Recorder {
    fn held(&self, held: Duration) {
        let (b, k) = (self.backend.clone(), self.kind);
        ::metrics::histogram!("dlock_hold_seconds", "backend" => b.clone(), "kind" => k).record(held.as_secs_f64());
        ::metrics::gauge!("dlock_leases_held", "backend" => b, "kind" => k).decrement(1.0);
    }
}

impl LeaseEvents for Recorder {
    fn renewed(&self) {
        ::metrics::counter!("dlock_renewals_total", "backend" => self.backend.clone(), "kind" => self.kind)
            .increment(1);
        if let Some(c) = &self.chained {
            c.0.renewed();
        }
    }

    fn renew_failed(&self, error: &LockError) {
        ::metrics::counter!("dlock_renewal_failures_total", "backend" => self.backend.clone(), "kind" => self.kind)
            .increment(1);
        if let Some(c) = &self.chained {
            c.0.renew_failed(error);
        }
    }

    fn lost(&self, reason: &str, held: Duration) {
        let reason = loss_reason(reason);
        ::metrics::counter!("dlock_losses_total", "backend" => self.backend.clone(), "kind" => self.kind, "reason" => reason)
            .increment(1);
        self.held(held);
        if let Some(c) = &self.chained {
            c.0.lost(reason, held);
        }
    }

    fn released(&self, held: Duration) {
        self.held(held);
        if let Some(c) = &self.chained {
            c.0.released(held);
        }
    }
}

/// A lost signal's reason as a label of few values.
fn loss_reason(reason: &str) -> &'static str {
    let r = reason.to_ascii_lowercase();
    if r.contains("another owner") || r.contains("no entry") || r.contains("is gone") {
        "not_owner"
    } else if r.contains("session") {
        "session"
    } else if r.contains("valid_until") || r.contains("not answered") {
        "expired"
    } else {
        "other"
    }
}

impl<L: ?Sized> Metered<L> {
    /// The options with our recorder as the lease observer.
    fn options(&self, backend: &str, kind: &'static str, opts: &AcquireOptions) -> AcquireOptions {
        let recorder = Recorder { backend: backend.to_owned(), kind, chained: opts.events.clone() };
        opts.clone().events(Arc::new(recorder))
    }
}

/// Counts and times one call; `granted` leases raise the gauge.
fn record<T: AsLease>(backend: &str, kind: &'static str, begun: Instant, result: &Result<T, LockError>) {
    let outcome = match result {
        Ok(t) if t.granted() => "granted",
        Ok(_) => "busy",
        Err(LockError::Timeout { .. }) => "timeout",
        Err(_) => "error",
    };
    let (b, elapsed) = (backend.to_owned(), begun.elapsed().as_secs_f64());
    ::metrics::counter!("dlock_acquisitions_total", "backend" => b.clone(), "kind" => kind, "outcome" => outcome)
        .increment(1);
    ::metrics::histogram!("dlock_acquire_wait_seconds", "backend" => b.clone(), "kind" => kind, "outcome" => outcome)
        .record(elapsed);
    if outcome == "granted" {
        ::metrics::gauge!("dlock_leases_held", "backend" => b, "kind" => kind).increment(1.0);
    }
}

/// `Lease` (granted) or `Option<Lease>` (granted or busy).
trait AsLease {
    fn granted(&self) -> bool;
}

impl AsLease for Lease {
    fn granted(&self) -> bool {
        true
    }
}

impl AsLease for Option<Lease> {
    fn granted(&self) -> bool {
        self.is_some()
    }
}

/// Runs one acquire call with our options and records it.
macro_rules! metered {
    ($self:ident, $kind:expr, $opts:ident, |$o:ident| $call:expr) => {{
        let backend = $self.inner.backend().to_owned();
        let $o = &$self.options(&backend, $kind, $opts);
        let begun = Instant::now();
        let result = $call;
        record(&backend, $kind, begun, &result);
        result
    }};
}

impl<L: LockService + ?Sized> LockService for Metered<L> {
    fn backend(&self) -> &str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[async_trait]
impl<L: DistributedLock + ?Sized> DistributedLock for Metered<L> {
    async fn try_acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        metered!(self, "lock", opts, |o| self.inner.try_acquire(name, o).await)
    }
    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        metered!(self, "lock", opts, |o| self.inner.acquire(name, o).await)
    }
    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        self.inner.inspect(name).await
    }
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        self.inner.list(prefix, limit).await
    }
    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        self.inner.force_release(name).await
    }
    async fn watch_changes(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        self.inner.watch_changes(name).await
    }
}

#[async_trait]
impl<L: DistributedRwLock + ?Sized> DistributedRwLock for Metered<L> {
    async fn try_acquire_read(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        metered!(self, "read", opts, |o| self.inner.try_acquire_read(name, o).await)
    }
    async fn acquire_read(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        metered!(self, "read", opts, |o| self.inner.acquire_read(name, o).await)
    }
    async fn try_acquire_write(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        metered!(self, "write", opts, |o| self.inner.try_acquire_write(name, o).await)
    }
    async fn acquire_write(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        metered!(self, "write", opts, |o| self.inner.acquire_write(name, o).await)
    }
}

#[async_trait]
impl<L: DistributedSemaphore + ?Sized> DistributedSemaphore for Metered<L> {
    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        metered!(self, "permit", opts, |o| self.inner.try_acquire_permit(name, permits, o).await)
    }
    async fn acquire_permit(&self, name: &LockName, permits: u32, opts: &AcquireOptions) -> Result<Lease, LockError> {
        metered!(self, "permit", opts, |o| self.inner.acquire_permit(name, permits, o).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_reasons_map_to_few_labels() {
        for (reason, label) in [
            ("renewal found another owner or no entry", "not_owner"),
            ("our lock node is gone or belongs to another session", "not_owner"),
            ("valid_until passed without a successful renewal", "expired"),
            ("the ZooKeeper session ended (Expired)", "session"),
            ("a test said so", "other"),
        ] {
            assert_eq!(loss_reason(reason), label, "{reason}");
        }
    }
}
