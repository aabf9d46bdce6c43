//! The state one lease shares between its guard, its observers, its watchdog and its release:
//! identity, validity, the flags that say how it ended, and the hooks told about it. A leaf of
//! `lease/`: the files that act on a lease (renewal, loss, release, the driver) import it, it
//! imports none of them.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::handle::{LeaseGrant, LeaseHandle};
use super::signal::LostSignal;
use crate::{AcquireOptions, FencingToken, LeaseEvents, LockError, LockName, OwnerId};

/// Where a lease's release stands on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReleaseState {
    /// No release was sent.
    NotSent,
    /// A release was sent but not answered (it failed, timed out, or is in flight): it may or
    /// may not have been applied.
    Unknown,
    /// The server answered: the lock is no longer held for us.
    Done,
}

pub(super) struct Shared {
    pub(super) name: LockName,
    pub(super) token: FencingToken,
    pub(super) owner: OwnerId,
    pub(super) ttl: Duration,
    pub(super) drift: Duration,
    pub(super) request_timeout: Duration,
    valid_until: Mutex<Instant>,
    /// The holder asked for a release (or dropped the lease): stop renewing, no longer valid.
    pub(super) released: AtomicBool,
    pub(super) lost: LostSignal,
    pub(super) handle: Arc<dyn LeaseHandle>,
    /// Where the owner-checked release stands on the server; held across each attempt so
    /// attempts (a caller's, a cancelled caller's, `Drop`'s, the loss-by-time one) never overlap.
    pub(super) release_state: tokio::sync::Mutex<ReleaseState>,
    /// A renewal went unanswered: the server may hold the lease beyond our `valid_until`.
    renew_unanswered: AtomicBool,
    /// `t0 + hold_at_least`: a release before it leaves the lock taken until then.
    pub(super) hold_until: Option<Instant>,
    /// `hold_until` no longer applies: the lease was part of a set that was never all held
    /// (`acquire_all`), so no job ran under it.
    pub(super) hold_waived: AtomicBool,
    /// `AcquireOptions::events`, told once when the hold ends (`ended`) and of each renewal.
    events: Option<Arc<dyn LeaseEvents>>,
    granted: Instant,
    ended: AtomicBool,
    /// A provisional grant whose claim may wait ([`LeaseGrant::claim_deferred`]): the validity
    /// its window gives (`min(window, ttl) − drift`), which sets when the claim falls due.
    deferred_claim: Option<Duration>,
    /// A renewal succeeded (for a provisional grant: it was claimed).
    renewed: AtomicBool,
}

/// How long after its grant a deferred claim waits, given the validity the grant's window gave:
/// a third of it, as a lease is renewed a third into its ttl. The one rule, for the watchdog and
/// for the claim task of a lease without one.
pub(super) fn claim_delay(validity: Duration) -> Duration {
    validity / 3
}

/// Until when a lease answered to a request sent at `sent` may be relied on: `sent + ttl −
/// drift`, counted from the send, never from the answer (`None` past the clock's range).
pub fn valid_until(sent: Instant, ttl: Duration, drift: Duration) -> Option<Instant> {
    sent.checked_add(ttl)?.checked_sub(drift)
}

impl Shared {
    /// The state of a fresh grant: valid until `t0 + ttl − drift` (a provisional grant's:
    /// `t0 + min(window, ttl) − drift`), where the drift allowance includes the grant's clock
    /// offset.
    pub(super) fn new(grant: LeaseGrant, options: &AcquireOptions) -> Shared {
        let drift = options.drift().saturating_add(grant.max_clock_offset);
        let first = grant.provisional.map_or(options.ttl, |window| window.min(options.ttl));
        let valid_until = valid_until(grant.started, first, drift).unwrap_or(grant.started);
        Shared {
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
            deferred_claim: (grant.provisional.is_some() && grant.deferred_claim).then(|| first.saturating_sub(drift)),
            renewed: AtomicBool::new(false),
        }
    }

    pub(super) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A renewal sent at `sent` succeeded: the lease is valid until `sent + ttl − drift` (never
    /// moved back).
    pub(super) fn extend(&self, sent: Instant) {
        self.renewed.store(true, Ordering::SeqCst);
        let mut vu = self.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(new) = valid_until(sent, self.ttl, self.drift) {
            if new > *vu {
                *vu = new;
            }
        }
    }

    /// A provisional grant whose deferred claim has not succeeded yet: the validity its window
    /// gave (the watchdog claims it a third into that, not at once).
    pub(super) fn unclaimed_deferred(&self) -> Option<Duration> {
        self.deferred_claim.filter(|_| !self.renewed.load(Ordering::SeqCst))
    }

    /// When a deferred claim falls due: [`claim_delay`] into the validity its window gave
    /// (`None`: the claim is not deferred, or was made).
    pub(super) fn deferred_claim_due(&self) -> Option<Instant> {
        self.unclaimed_deferred().and_then(|validity| self.granted.checked_add(claim_delay(validity)))
    }

    pub(super) fn is_valid(&self) -> bool {
        !self.lost.is_fired() && !self.released.load(Ordering::SeqCst) && Instant::now() < self.valid_until()
    }

    /// Released, dropped or lost: nothing left to renew or watch.
    pub(super) fn is_over(&self) -> bool {
        self.lost.is_fired() || self.released.load(Ordering::SeqCst)
    }

    pub(super) fn declare_lost(&self, reason: &str) {
        if self.lost.fire(reason) {
            let _span = tracing::warn_span!("dlock.lost", lock = %self.name, token = self.token.0).entered();
            tracing::warn!(lock = %self.name, token = self.token.0, reason, "lease lost");
            self.end(Some(reason));
        }
    }

    /// The hold ended (lost with a reason, or released): tells the observer, once. A panic of
    /// that hook changes nothing more: the hold has ended already.
    pub(super) fn end(&self, lost: Option<&str>) {
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
    pub(super) fn tell(&self, hook: &'static str, call: impl FnOnce(&dyn LeaseEvents)) -> Result<(), String> {
        let Some(events) = &self.events else { return Ok(()) };
        std::panic::catch_unwind(AssertUnwindSafe(|| call(events.as_ref()))).map_err(|payload| {
            let panic = panic_message(payload.as_ref());
            tracing::error!(lock = %self.name, token = self.token.0, hook, panic, "a LeaseEvents hook panicked");
            panic
        })
    }

    /// The span of a release of this lease.
    pub(super) fn release_span(&self) -> tracing::Span {
        tracing::debug_span!("dlock.release", lock = %self.name, token = self.token.0)
    }

    /// A renewal was sent and not answered before `valid_until`: the server may hold the lease
    /// beyond it, so a loss by time sends the owner-checked release.
    pub(super) fn mark_renew_unanswered(&self) {
        self.renew_unanswered.store(true, Ordering::SeqCst);
    }

    /// Whether a renewal went unanswered (see [`Shared::mark_renew_unanswered`]).
    pub(super) fn renew_unanswered(&self) -> bool {
        self.renew_unanswered.load(Ordering::SeqCst)
    }

    pub(super) fn lost_error(&self) -> LockError {
        LockError::Lost { name: self.name.as_str().to_owned() }
    }
}

/// The message of a caught panic, when it has one.
pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".to_owned(),
    }
}
