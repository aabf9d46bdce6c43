//! One lease's watchdog policy: when it renews, and when it is lost — a renewal finds another
//! owner, or `valid_until` passes without a successful renewal. The timing and the running of
//! renewals for every lease of a runtime is the shared driver's (`driver.rs`); this module
//! only decides, per lease, what is due.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::loss::expire_by_time;
use super::shared::{claim_delay, Shared};
use crate::LockError;

/// When the next renewal is due, given the lease's current `valid_until` and the validity one
/// successful request gives (`ttl − drift`): `every` after the instant that request was sent
/// (`valid_until − validity`), but never later than halfway through what is left of the
/// validity, and never in the past. Counting from the request, not from when its answer came,
/// keeps a slow grant (two Redlock rounds, a slow link) from being lost right after it came.
pub fn renewal_due(now: Instant, valid_until: Instant, validity: Duration, every: Duration) -> Instant {
    let sent = valid_until.checked_sub(validity).unwrap_or(now);
    let by_cadence = sent.checked_add(every).unwrap_or(valid_until);
    let half_left = now.checked_add(valid_until.saturating_duration_since(now) / 2).unwrap_or(valid_until);
    by_cadence.min(half_left).max(now)
}

/// How long to wait after a failed renewal before the next try (well before `valid_until`).
fn retry_gap(every: Duration) -> Duration {
    (every / 4).clamp(Duration::from_millis(5), Duration::from_millis(250))
}

/// The most a renewal starts before it is due (see [`renewal_slack`]).
pub(crate) const MAX_SLACK: Duration = Duration::from_millis(50);

/// How early a renewal may start so that it shares a round with others due soon after: a 16th
/// of its cadence, at most [`MAX_SLACK`]. Early costs no safety (validity counts from the send)
/// and at most a 16th more renewals; for 10,000 leases it turns ~3,000 renewals a second, each
/// trickling into its own 5 ms round, into ~20 rounds a second (one statement or transaction
/// each on SQL).
pub(crate) fn renewal_slack(every: Duration) -> Duration {
    (every / 16).min(MAX_SLACK)
}

/// What a lease's watch asks of the driver when it comes due.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing now; come back at this instant (always later than the `now` it was given).
    Wait(Instant),
    /// Start a renewal now (the watch waits for its outcome, and for `valid_until` meanwhile).
    Renew,
    /// Stopped: released, dropped, lost, or just declared lost by time.
    Done,
}

/// The schedule state of one lease.
pub(crate) struct Watch {
    pub(crate) shared: Arc<Shared>,
    renew_every: Option<Duration>,
    /// `max_hold`: no renewal starts at or after it.
    hold_until: Option<Instant>,
    /// After a failed renewal: not before this instant.
    not_before: Option<Instant>,
    /// A renewal was started and has not answered yet.
    renewing: bool,
}

impl Watch {
    pub(crate) fn new(shared: Arc<Shared>, renew_every: Option<Duration>, hold_until: Option<Instant>) -> Watch {
        Watch { shared, renew_every, hold_until, not_before: None, renewing: false }
    }

    /// Released, dropped or lost: nothing left to do.
    pub(crate) fn is_over(&self) -> bool {
        self.shared.is_over()
    }

    fn renew_at(&self, now: Instant, deadline: Instant) -> Option<Instant> {
        let every = self.renew_every?;
        // An unclaimed provisional grant counts against the validity its window gave: claimed
        // at once (that validity is shorter than a renewal's cadence assumes), or, when its
        // claim may wait, a third into it, as a lease is renewed a third into its ttl.
        let (validity, every) = match self.shared.unclaimed_deferred() {
            Some(validity) => (validity, every.min(claim_delay(validity))),
            None => (self.shared.ttl.saturating_sub(self.shared.drift), every),
        };
        let due = renewal_due(now, deadline, validity, every);
        let at = self.not_before.map_or(due, |nb| due.max(nb));
        match self.hold_until {
            Some(cap) if at >= cap => None,
            _ => Some(at),
        }
    }

    /// Whether a renewal would start if the driver looked at this lease at `now`.
    pub(crate) fn renews_by(&self, now: Instant) -> bool {
        let slack = self.renew_every.map_or(Duration::ZERO, renewal_slack);
        !self.renewing && self.renew_at(now, self.shared.valid_until()).is_some_and(|at| at <= now + slack)
    }

    /// When the driver should next look at this lease: its renewal, or `valid_until` (also
    /// while a renewal is in flight, so a slow one never delays the lost signal).
    pub(crate) fn next_wake(&self, now: Instant) -> Instant {
        let deadline = self.shared.valid_until();
        match self.renewing {
            true => deadline,
            false => self.renew_at(now, deadline).map_or(deadline, |at| at.min(deadline)),
        }
    }

    /// The lease came due at `now`: declares it lost when `valid_until` has passed, else says
    /// whether a renewal starts now or when to come back.
    pub(crate) fn on_wake(&mut self, now: Instant) -> Step {
        if self.is_over() {
            return Step::Done;
        }
        let deadline = self.shared.valid_until();
        if now >= deadline {
            if self.renewing {
                // Sent and not answered by valid_until: the server may have applied it.
                self.shared.mark_renew_unanswered();
            }
            expire_by_time(&self.shared);
            return Step::Done;
        }
        if self.renews_by(now) {
            self.renewing = true;
            return Step::Renew;
        }
        Step::Wait(self.next_wake(now))
    }

    /// The renewal started by [`Step::Renew`] answered; false when the watch is over.
    pub(crate) fn renewed(&mut self, result: Result<(), LockError>) -> bool {
        self.renewing = false;
        self.not_before = match result {
            Err(LockError::Lost { .. }) => return false,
            Ok(()) => None,
            Err(e) => {
                tracing::warn!(lock = %self.shared.name, error = %e, "renewal failed; retrying until valid_until");
                let every = self.renew_every.unwrap_or(self.shared.ttl / 3);
                Instant::now().checked_add(retry_gap(every))
            }
        };
        !self.is_over()
    }
}

#[cfg(test)]
mod tests;
