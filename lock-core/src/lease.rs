//! The `Lease` guard: fencing token, validity, renewal watchdog, lost signal, release on drop
//! (docs/contract.md §3). Backends only supply a [`LeaseHandle`]; everything else lives here, once.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::driver::{self, Ticket};
use crate::release::{self, ReleaseState};
use crate::watchdog::Watch;
use crate::{AcquireOptions, FencingToken, LeaseEvents, LockError, LockName, OwnerId};

/// The answer of a renewal on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// Still ours (on per-lock backends the lease now runs until `now + ttl`, server clock).
    Renewed,
    /// Another owner holds it, or no entry exists: the lease is lost.
    NotOwner,
}

/// The answer of a release on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// It was ours and is now free.
    Released,
    /// It was no longer ours; nothing was changed.
    NotOwner,
}

/// The backend-specific part of a lease: an owner-checked renew and release of one grant.
#[async_trait]
pub trait LeaseHandle: Send + Sync + 'static {
    /// Confirms this grant still owns the lock and, on per-lock backends, extends its server-side
    /// lease to `now + ttl` (server clock). Per-session backends (ZooKeeper) ignore `ttl`: the
    /// session, kept alive by the client, is the lease (docs/contract.md §3).
    async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError>;
    /// Frees the lock if this grant still owns it.
    async fn release(&self) -> Result<ReleaseOutcome, LockError>;

    /// Frees the lock `after` from now if this grant still owns it (`hold_at_least`,
    /// docs/contract.md §3); `Released` means it is ours and will be free then. By default an
    /// owner-checked renewal for `after`, which on per-lock backends makes the server-side lease
    /// end then. Per-session backends (ZooKeeper), whose renewal ignores the ttl, override it.
    async fn release_after(&self, after: Duration) -> Result<ReleaseOutcome, LockError> {
        Ok(match self.renew(after).await? {
            RenewOutcome::Renewed => ReleaseOutcome::Released,
            RenewOutcome::NotOwner => ReleaseOutcome::NotOwner,
        })
    }
}

/// What a backend hands to [`Lease::new`] after the server granted a lock.
#[derive(Clone)]
#[non_exhaustive]
pub struct LeaseGrant {
    /// The lock's name.
    pub name: LockName,
    /// The fencing token of this acquisition.
    pub token: FencingToken,
    /// The owner id stored on the server.
    pub owner: OwnerId,
    /// The monotonic instant taken before the successful request was sent.
    pub started: Instant,
    /// Owner-checked renew and release.
    pub handle: Arc<dyn LeaseHandle>,
    /// Added to the options' drift allowance ([`Capabilities::max_clock_offset`](crate::Capabilities::max_clock_offset));
    /// zero unless set with [`LeaseGrant::with_clock_offset`].
    pub max_clock_offset: Duration,
}

impl LeaseGrant {
    /// Bundles a grant.
    pub fn new(
        name: LockName,
        token: FencingToken,
        owner: OwnerId,
        started: Instant,
        handle: Arc<dyn LeaseHandle>,
    ) -> Self {
        LeaseGrant { name, token, owner, started, handle, max_clock_offset: Duration::ZERO }
    }

    /// Shortens the lease's validity by `offset` beyond the drift allowance: the servers'
    /// clocks may disagree by that much ([`Capabilities::max_clock_offset`](crate::Capabilities::max_clock_offset)).
    pub fn with_clock_offset(mut self, offset: Duration) -> Self {
        self.max_clock_offset = offset;
        self
    }
}

/// Fires once when a lease is lost. Clone it freely; await [`LostSignal::fired`] in a `select!`.
#[derive(Clone)]
pub struct LostSignal {
    token: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl LostSignal {
    fn new() -> Self {
        LostSignal { token: CancellationToken::new(), reason: Arc::new(OnceLock::new()) }
    }

    /// Resolves when the lease is lost (immediately if it already was). The future owns what
    /// it needs, so `lease.lost().fired()` can go straight into a `select!`.
    pub fn fired(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.token.clone().cancelled_owned()
    }

    /// Whether the lease has been lost.
    pub fn is_fired(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Why the lease was lost, once it was.
    pub fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }

    /// Fires the signal; returns false if it had fired before (it fires exactly once).
    fn fire(&self, reason: &str) -> bool {
        if self.reason.set(reason.to_owned()).is_err() {
            return false;
        }
        self.token.cancel();
        true
    }
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal").field("fired", &self.is_fired()).field("reason", &self.reason()).finish()
    }
}

/// Lets a backend declare a lease lost from outside the watchdog (e.g. a ZooKeeper session
/// expired or a lock node was deleted).
#[derive(Clone)]
pub struct LossTrigger {
    shared: Arc<Shared>,
}

impl LossTrigger {
    /// Fires the lease's lost signal with this reason (once; later calls do nothing).
    pub fn fire(&self, reason: &str) {
        self.shared.declare_lost(reason);
    }

    /// Whether the lease is already lost or released (a backend can stop watching then).
    pub fn is_done(&self) -> bool {
        self.shared.lost.is_fired() || self.shared.released.load(Ordering::SeqCst)
    }
}

pub(crate) struct Shared {
    pub(crate) name: LockName,
    pub(crate) token: FencingToken,
    owner: OwnerId,
    pub(crate) ttl: Duration,
    pub(crate) drift: Duration,
    pub(crate) request_timeout: Duration,
    valid_until: Mutex<Instant>,
    /// The holder asked for a release (or dropped the lease): stop renewing, no longer valid.
    pub(crate) released: AtomicBool,
    pub(crate) lost: LostSignal,
    pub(crate) handle: Arc<dyn LeaseHandle>,
    /// Where the owner-checked release stands on the server; held across each attempt so
    /// attempts (a caller's, a cancelled caller's, `Drop`'s, the loss-by-time one) never overlap.
    pub(crate) release_state: tokio::sync::Mutex<ReleaseState>,
    /// A renewal went unanswered: the server may hold the lease beyond our `valid_until`.
    renew_unanswered: AtomicBool,
    /// `t0 + hold_at_least`: a release before it leaves the lock taken until then.
    pub(crate) hold_until: Option<Instant>,
    /// `hold_until` no longer applies: the lease was part of a set that was never all held
    /// (`acquire_all`), so no job ran under it.
    pub(crate) hold_waived: AtomicBool,
    /// `AcquireOptions::events`, told once when the hold ends (`ended`) and of each renewal.
    events: Option<Arc<dyn LeaseEvents>>,
    granted: Instant,
    ended: AtomicBool,
}

impl Shared {
    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn extend(&self, sent: Instant) {
        let mut vu = self.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(new) = sent.checked_add(self.ttl).and_then(|t| t.checked_sub(self.drift)) {
            if new > *vu {
                *vu = new;
            }
        }
    }

    fn is_valid(&self) -> bool {
        !self.lost.is_fired() && !self.released.load(Ordering::SeqCst) && Instant::now() < self.valid_until()
    }

    pub(crate) fn declare_lost(&self, reason: &str) {
        if self.lost.fire(reason) {
            let _span = tracing::warn_span!("dlock.lost", lock = %self.name, token = self.token.0).entered();
            tracing::warn!(lock = %self.name, token = self.token.0, reason, "lease lost");
            self.end(Some(reason));
        }
    }

    /// The hold ended (lost with a reason, or released): tells the observer, once. A panic of
    /// that hook changes nothing more: the hold has ended already.
    fn end(&self, lost: Option<&str>) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        let held = self.granted.elapsed();
        match lost {
            Some(reason) => drop(self.tell("lost", |events| events.lost(reason, held))),
            None => drop(self.tell("released", |events| events.released(held))),
        }
    }

    /// Calls one hook of the observer, if there is one; the panic's message if it panicked. It is
    /// caught here, where the calls come from the runtime's one watchdog driver: unwinding
    /// there would end every lease's renewals (docs/contract.md §3, faults stay local).
    fn tell(&self, hook: &'static str, call: impl FnOnce(&dyn LeaseEvents)) -> Result<(), String> {
        let Some(events) = &self.events else { return Ok(()) };
        std::panic::catch_unwind(AssertUnwindSafe(|| call(events.as_ref()))).map_err(|payload| {
            let panic = panic_message(payload.as_ref());
            tracing::error!(lock = %self.name, token = self.token.0, hook, panic, "a LeaseEvents hook panicked");
            panic
        })
    }

    /// A panic in this lease's renewal or in one of its hooks: the lease is lost (nobody can
    /// say what it left behind) and no other lease is touched. The lock is released on the
    /// server in the background, so it does not stay taken by a holder that was told it lost it.
    pub(crate) fn lose_to_panic(self: &Arc<Self>, what: &str, panic: &str) {
        let reason = format!("{what} panicked: {panic}");
        if self.lost.fire(&reason) {
            tracing::error!(lock = %self.name, token = self.token.0, "lease lost: {reason}");
            self.end(Some(&reason));
            if self.released.load(Ordering::SeqCst) {
                return;
            }
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(release::release_until_answered(Arc::clone(self)));
            }
        }
    }

    /// The span of a release of this lease.
    fn release_span(&self) -> tracing::Span {
        tracing::debug_span!("dlock.release", lock = %self.name, token = self.token.0)
    }

    /// The lease ran out by the clock without a successful renewal. When a renewal went
    /// unanswered the server may still hold it (the renewal was applied, its answer lost), so
    /// the owner-checked release is sent in the background until the server answers (docs/contract.md §3).
    /// A holder that simply stopped renewing sends nothing: its lease ends on the server too.
    pub(crate) fn expire_by_time(self: &Arc<Self>) {
        let reason = "valid_until passed without a successful renewal";
        if self.lost.fire(reason) {
            let _span = tracing::warn_span!("dlock.lost", lock = %self.name, token = self.token.0).entered();
            tracing::warn!(lock = %self.name, token = self.token.0, "lease lost: {reason}");
            self.end(Some(reason));
            if !self.renew_unanswered.load(Ordering::SeqCst) {
                return;
            }
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(release::release_until_answered(Arc::clone(self)));
            }
        }
    }

    /// A renewal was sent and not answered before `valid_until`: the server may hold the lease
    /// beyond it, so a loss by time sends the owner-checked release.
    pub(crate) fn mark_renew_unanswered(&self) {
        self.renew_unanswered.store(true, Ordering::SeqCst);
    }

    /// One renewal: bounded by the request timeout and by the lease's own validity.
    pub(crate) async fn renew_once(self: &Arc<Self>) -> Result<(), LockError> {
        let span = tracing::debug_span!("dlock.renew", lock = %self.name, token = self.token.0);
        let result = self.renew_attempt().instrument(span).await;
        let told = match &result {
            Ok(()) => self.tell("renewed", |events| events.renewed()),
            // A loss is told once, by `end`.
            Err(LockError::Lost { .. }) => Ok(()),
            Err(e) => self.tell("renew_failed", |events| events.renew_failed(e)),
        };
        if let Err(panic) = told {
            self.lose_to_panic("its LeaseEvents hook", &panic);
            return Err(self.lost_error());
        }
        result
    }

    async fn renew_attempt(self: &Arc<Self>) -> Result<(), LockError> {
        if self.lost.is_fired() || self.released.load(Ordering::SeqCst) {
            return Err(self.lost_error());
        }
        let sent = Instant::now();
        let vu = self.valid_until();
        if sent >= vu {
            self.expire_by_time();
            return Err(self.lost_error());
        }
        let bound = self.request_timeout.min(vu - sent);
        match timeout(bound, self.handle.renew(self.ttl)).await {
            Ok(Ok(RenewOutcome::Renewed)) => {
                if self.lost.is_fired() {
                    return Err(self.lost_error());
                }
                self.extend(sent);
                tracing::trace!(lock = %self.name, "lease renewed");
                Ok(())
            }
            Ok(Ok(RenewOutcome::NotOwner)) => {
                // A renewal overtaken by our own release finds no entry: that is not a loss.
                if !self.released.load(Ordering::SeqCst) {
                    self.declare_lost("renewal found another owner or no entry");
                }
                Err(self.lost_error())
            }
            Ok(Err(e)) => {
                if e.outcome_unknown() {
                    self.renew_unanswered.store(true, Ordering::SeqCst);
                }
                Err(e)
            }
            Err(_) => {
                self.renew_unanswered.store(true, Ordering::SeqCst);
                Err(LockError::unavailable("lease", format!("renewal did not answer within {bound:?}")))
            }
        }
    }

    pub(crate) fn lost_error(&self) -> LockError {
        LockError::Lost { name: self.name.as_str().to_owned() }
    }
}

/// The message of a caught panic, when it has one.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".to_owned(),
    }
}

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
        let drift = options.drift().saturating_add(grant.max_clock_offset);
        let valid_until =
            grant.started.checked_add(options.ttl).and_then(|t| t.checked_sub(drift)).unwrap_or(grant.started);
        let shared = Arc::new(Shared {
            name: grant.name,
            token: grant.token,
            owner: grant.owner,
            ttl: options.ttl,
            drift,
            request_timeout: options.request_timeout,
            valid_until: Mutex::new(valid_until),
            released: AtomicBool::new(false),
            lost: LostSignal::new(),
            handle: grant.handle,
            release_state: tokio::sync::Mutex::new(ReleaseState::NotSent),
            renew_unanswered: AtomicBool::new(false),
            hold_until: options.hold_at_least.and_then(|d| grant.started.checked_add(d)),
            hold_waived: AtomicBool::new(false),
            events: options.events.as_ref().map(|e| Arc::clone(&e.0)),
            granted: grant.started,
            ended: AtomicBool::new(false),
        });
        let runtime = tokio::runtime::Handle::try_current().ok();
        let ticket = runtime.as_ref().and_then(|rt| {
            let renew_every = options.auto_renew.then(|| options.renew_interval());
            let hold_until = options.max_hold.and_then(|m| grant.started.checked_add(m));
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
        LeaseObserver { shared: Arc::clone(&self.shared) }
    }

    /// A handle a backend keeps to declare this lease lost from outside (session events).
    pub fn loss_trigger(&self) -> LossTrigger {
        LossTrigger { shared: Arc::clone(&self.shared) }
    }

    /// Extends the lease now. `Err(Lost)` if it is no longer ours (the lost signal fires).
    pub async fn renew(&self) -> Result<(), LockError> {
        self.shared.renew_once().await
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

/// A read-only view of a [`Lease`]: token, validity and lost signal.
#[derive(Clone)]
pub struct LeaseObserver {
    shared: Arc<Shared>,
}

impl LeaseObserver {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.shared.name
    }
    /// The fencing token.
    pub fn token(&self) -> FencingToken {
        self.shared.token
    }
    /// See [`Lease::is_valid`].
    pub fn is_valid(&self) -> bool {
        self.shared.is_valid()
    }
    /// See [`Lease::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.shared.valid_until()
    }
    /// See [`Lease::lost`].
    pub fn lost(&self) -> LostSignal {
        self.shared.lost.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

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
