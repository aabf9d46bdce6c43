//! The `Lease` guard: fencing token, validity, renewal watchdog, lost signal, release on drop
//! (docs/contract.md §3). Backends only supply a [`LeaseHandle`]; everything else lives here, once.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::driver::{self, Ticket};
use super::handle::LeaseGrant;
use super::observer::{LeaseObserver, LossTrigger};
use super::release;
use super::renew::renew_once;
use super::shared::{ReleaseState, Shared};
use super::signal::LostSignal;
use super::watchdog::Watch;
use crate::{AcquireOptions, FencingToken, LockError, LockName, OwnerId};

/// A held lock. Carries the fencing token; renews itself in the background (unless turned off);
/// fires its [`LostSignal`] once if the lock is lost; releases on [`Lease::release`] or, in the
/// background, on drop.
///
/// ```
/// # async fn demo(lock: &dyn lock_core::DistributedLock) -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, LockName};
/// let lease = lock.acquire(&LockName::new("jobs/nightly")?, &AcquireOptions::new(Duration::from_secs(10))).await?;
/// println!("token {}", lease.token());
/// tokio::select! {
///     _ = lease.lost().fired() => println!("lost it: stop writing"),
///     _ = tokio::time::sleep(Duration::from_millis(10)) => {}
/// }
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a lease dropped at once releases the lock at once; bind it (`let lease = …`) for as long as the work runs"]
pub struct Lease {
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Handle>,
    /// This lease's place in its runtime's watchdog driver.
    ticket: Option<Ticket>,
}

impl Lease {
    /// Builds the guard for a fresh grant and hands it to its runtime's watchdog driver
    /// (renewal when `options.auto_renew`, and in every case the loss timer at `valid_until`).
    pub fn new(grant: LeaseGrant, options: &AcquireOptions) -> Lease {
        let started = grant.started;
        let provisional = grant.provisional.is_some();
        let shared = Arc::new(Shared::new(grant, options));
        let runtime = tokio::runtime::Handle::try_current().ok();
        // A provisional grant's first renewal is its claim: the watchdog sends it at once (its
        // validity is shorter than a renewal's cadence assumes; a third into the window when the
        // claim may wait), unless it renews nothing, or stops at `max_hold` (then a task of its
        // own claims, at the same moment; a second claim is harmless).
        let watchdog_claims = options.auto_renew && options.max_hold.is_none();
        if let (true, false, Some(rt)) = (provisional, watchdog_claims, &runtime) {
            rt.spawn(claim(Arc::clone(&shared)));
        }
        let ticket = runtime.as_ref().and_then(|rt| {
            let renew_every = options.auto_renew.then(|| options.renew_interval());
            let hold_until = options.max_hold.and_then(|m| started.checked_add(m));
            driver::watch(rt, Watch::new(Arc::clone(&shared), renew_every, hold_until))
        });
        Lease { shared, runtime, ticket }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.shared.name
    }

    /// The fencing token: pass it to the protected resource with every write.
    pub fn token(&self) -> FencingToken {
        self.shared.token
    }

    /// The owner id stored on the server.
    pub fn owner(&self) -> OwnerId {
        self.shared.owner
    }

    /// The lease time asked for.
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// Until when the holder may rely on exclusivity: `t0 + ttl − drift`, moved forward by
    /// each successful renewal.
    pub fn valid_until(&self) -> Instant {
        self.shared.valid_until()
    }

    /// True while the lease is neither lost, released, nor past `valid_until`.
    pub fn is_valid(&self) -> bool {
        self.shared.is_valid()
    }

    /// The signal that fires once when the lease is lost.
    pub fn lost(&self) -> LostSignal {
        self.shared.lost.clone()
    }

    /// A cheap, clonable read-only view (token, validity, lost signal) to hand to tasks.
    pub fn observer(&self) -> LeaseObserver {
        LeaseObserver::new(&self.shared)
    }

    /// A handle a backend keeps to declare this lease lost from outside (session events).
    pub fn loss_trigger(&self) -> LossTrigger {
        LossTrigger::new(&self.shared)
    }

    /// Extends the lease now. `Err(Lost)` if it is no longer ours (the lost signal fires).
    pub async fn renew(&self) -> Result<(), LockError> {
        renew_once(&self.shared).await
    }

    /// Releases the lock if it is still ours. Idempotent: once the server has answered, later
    /// calls return the same (`Ok(())`, or `Err(Lost)` for a lost lease). Releasing a lost lease
    /// never frees someone else's lock.
    ///
    /// A release that failed (`Unavailable`: the server did not answer) is tried again by the
    /// next call, and by `Drop`: `Ok` only once the server no longer holds the lock for us.
    /// Cancel-safe: once polled, the release runs to its end on the runtime the lease was made
    /// on, even if this future is dropped (a `select!`, an aborted task).
    pub async fn release(&self) -> Result<(), LockError> {
        let shared = Arc::clone(&self.shared);
        shared.released.store(true, Ordering::SeqCst);
        self.stop_watch();
        shared.end(None);
        let span = shared.release_span();
        let runtime = self.runtime.clone().or_else(|| tokio::runtime::Handle::try_current().ok());
        match runtime {
            // Moved to a task if this future is dropped mid-request (release::Detached).
            Some(rt) => release::Detached::new(release::release_once(shared).instrument(span), rt).await,
            None => release::release_once(shared).instrument(span).await,
        }
    }
}

/// The claim of a provisional grant ([`LeaseGrant::provisional`]) when the watchdog does not
/// send it: its first renewal, at once (a third into the window when the claim may wait, as the
/// watchdog's), and again after a failure while the grant's window lasts. A loss, a release or
/// the window's end stop it (the watchdog then tells of the loss).
async fn claim(shared: Arc<Shared>) {
    if let Some(due) = shared.deferred_claim_due() {
        tokio::time::sleep_until(due).await;
    }
    let mut pause = Duration::from_millis(5);
    while !shared.is_over() && Instant::now() < shared.valid_until() {
        match renew_once(&shared).await {
            Ok(()) | Err(LockError::Lost { .. }) => return,
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
        }
    }
}

impl Lease {
    /// Makes a later release (or drop) free the lock at once, whatever `hold_at_least` said.
    pub(crate) fn waive_hold(&self) {
        self.shared.hold_waived.store(true, Ordering::SeqCst);
    }

    /// Takes the lease off its driver's schedule and stops a renewal in flight (after
    /// `released` is set, which the driver also checks, so a lease the driver holds at this
    /// moment is dropped by it).
    fn stop_watch(&self) {
        if let Some(ticket) = &self.ticket {
            ticket.cancel();
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.shared.name)
            .field("token", &self.shared.token)
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let shared = Arc::clone(&self.shared);
        shared.released.store(true, Ordering::SeqCst);
        self.stop_watch();
        shared.end(None);
        // A lost lease needs nothing here: the server said it is not ours, the backend saw the
        // session end, or (lost by time) the watchdog already sends the release.
        if shared.lost.is_fired() {
            return;
        }
        if shared.release_state.try_lock().is_ok_and(|s| *s == ReleaseState::Done) {
            return;
        }
        // Release in the background (retrying until the server answers); without a runtime
        // the lock simply expires after its ttl.
        let runtime = self.runtime.clone().or_else(|| tokio::runtime::Handle::try_current().ok());
        if let Some(rt) = runtime {
            let span = shared.release_span();
            rt.spawn(release::release_until_answered(shared).instrument(span));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use async_trait::async_trait;

    use super::*;
    use crate::lease::{LeaseHandle, ReleaseOutcome, RenewOutcome};

    /// A server whose renewals are slow: a renewal that arrives after the release finds no entry.
    struct SlowRenew {
        released: AtomicBool,
    }

    #[async_trait]
    impl LeaseHandle for SlowRenew {
        async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
            // Long against the 5 ms before the release, so a loaded machine keeps the overlap.
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok(if self.released.load(Ordering::SeqCst) { RenewOutcome::NotOwner } else { RenewOutcome::Renewed })
        }
        async fn release(&self) -> Result<ReleaseOutcome, LockError> {
            self.released.store(true, Ordering::SeqCst);
            Ok(ReleaseOutcome::Released)
        }
    }

    #[tokio::test]
    async fn release_overtaking_an_inflight_renewal_is_not_a_loss() {
        for _ in 0..10 {
            let handle = Arc::new(SlowRenew { released: AtomicBool::new(false) });
            let opts = AcquireOptions::new(Duration::from_secs(3)).renew_every(Duration::from_millis(5));
            let name = LockName::new("race").expect("valid");
            let lease =
                Lease::new(LeaseGrant::new(name, FencingToken(1), OwnerId::random(), Instant::now(), handle), &opts);
            // Let a background renewal start, and a manual one too, then release while both
            // are in flight.
            tokio::time::sleep(Duration::from_millis(12)).await;
            let lost = lease.lost();
            let (renewed, released) = tokio::join!(lease.renew(), async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                lease.release().await
            });
            released.expect("a release of our own lease is not Lost");
            assert!(matches!(renewed, Err(LockError::Lost { .. })), "a renewal after release answers Lost");
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!lost.is_fired(), "the lost signal fired after a clean release: {:?}", lost.reason());
        }
    }

    #[tokio::test]
    async fn lost_fires_once_at_valid_until_without_renewal() {
        let handle = Arc::new(SlowRenew { released: AtomicBool::new(false) });
        let opts = AcquireOptions::new(Duration::from_millis(100)).auto_renew(false);
        let lease = Lease::new(
            LeaseGrant::new(
                LockName::new("x").expect("valid"),
                FencingToken(7),
                OwnerId::random(),
                Instant::now(),
                handle,
            ),
            &opts,
        );
        assert!(lease.is_valid());
        tokio::time::timeout(Duration::from_secs(2), lease.lost().fired()).await.expect("fired");
        assert!(!lease.is_valid());
        assert!(matches!(lease.renew().await, Err(LockError::Lost { .. })));
        assert!(matches!(lease.release().await, Err(LockError::Lost { .. })));
    }

    /// After a failover the new primary times the lease by its own clock, which may run ahead
    /// of the old one's by up to `max_clock_offset`: the holder stops relying on the lease that
    /// much earlier, at the grant and after every renewal.
    #[tokio::test]
    async fn the_clock_offset_shortens_validity_at_grant_and_renewal() {
        let ttl = Duration::from_secs(10);
        let opts = AcquireOptions::new(ttl).auto_renew(false);
        let offset = Duration::from_millis(50);
        let t0 = Instant::now();
        let grant = |offset| {
            let handle = Arc::new(SlowRenew { released: AtomicBool::new(false) });
            LeaseGrant::new(LockName::new("skew").expect("valid"), FencingToken(1), OwnerId::random(), t0, handle)
                .with_clock_offset(offset)
        };
        let plain = Lease::new(grant(Duration::ZERO), &opts);
        let skewed = Lease::new(grant(offset), &opts);
        assert_eq!(plain.valid_until(), t0 + ttl - opts.drift());
        assert_eq!(skewed.valid_until(), t0 + ttl - opts.drift() - offset);
        let sent = Instant::now();
        skewed.renew().await.expect("renewed");
        let vu = skewed.valid_until();
        assert!(vu <= Instant::now() + ttl - opts.drift() - offset, "a renewal forgot the offset: {vu:?}");
        assert!(vu >= sent + ttl - opts.drift() - offset, "the renewal did not extend: {vu:?}");
        plain.release().await.expect("released");
        skewed.release().await.expect("released");
    }
}
