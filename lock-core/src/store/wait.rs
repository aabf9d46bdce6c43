//! The wait of [`StoreLock::acquire`](super::StoreLock): attempts until granted, the deadline,
//! or an error that is not retried; between attempts it sleeps on release hints or polls with
//! back-off, never longer than the holder's remaining lease (docs/contract.md §4). A grant the
//! server pushed to this wait alone ([`PushedGrant`]) ends it without another attempt, while
//! its window lasts (a lapsed one is a hint).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{timeout, Instant};

use super::attempt::{attempt, no_answer};
use super::claim::{Claim, TryLock};
use super::lease_store::LeaseStore;
use super::pending::PendingRelease;
use crate::backoff::Backoff;
use crate::deadline::Deadline;
use crate::lease::valid_until;
use crate::wake::{PushedGrant, WakeSubscription};
use crate::{AcquireOptions, FencingToken, LockError, WakeMethod};

/// The first (and shortest) poll interval, the one a newcomer uses.
const MIN_POLL: Duration = Duration::from_millis(5);

/// How many `max_poll` intervals of waiting it takes for a polling waiter to poll as often as a
/// newcomer (see [`poll_cap`]).
const STARVATION_BOUND: u32 = 8;

/// The first pause after a failed attempt; it doubles up to a second.
const FIRST_ERROR_PAUSE: Duration = Duration::from_millis(10);

/// With a deadline, this many failed attempts in a row end the wait.
const MAX_FAILURES: u32 = 3;

/// The longest sleep between two polls of a waiter that has waited `waited`: `max_poll` at
/// first, falling linearly to [`MIN_POLL`] once it has waited `STARVATION_BOUND × max_poll`.
/// A long waiter thus ends up polling as often as any newcomer, so newcomers' quick polls stop
/// winning every release after at most `STARVATION_BOUND × max_poll` of waiting (4 s with the
/// 500 ms maximum). Strict arrival order needs a backend that declares `fifo`.
fn poll_cap(waited: Duration, max_poll: Duration) -> Duration {
    let horizon = max_poll.saturating_mul(STARVATION_BOUND);
    if horizon.is_zero() || waited >= horizon {
        return MIN_POLL.min(max_poll);
    }
    let left = (horizon - waited).as_secs_f64() / horizon.as_secs_f64();
    max_poll.mul_f64(left).max(MIN_POLL).min(max_poll)
}

/// One wait in progress: its deadline, its back-offs, its release hints.
pub(super) struct Wait<'a, S: LeaseStore> {
    store: &'a Arc<S>,
    claim: Claim<'a>,
    opts: &'a AcquireOptions,
    /// Armed while an attempt's outcome is unknown; told when the wait got its grant.
    pending: &'a mut PendingRelease<S>,
    deadline: Deadline,
    max_poll: Duration,
    backoff: Backoff,
    error_backoff: Backoff,
    subscription: Option<WakeSubscription>,
    subscribed: bool,
    /// The store declares `WakeMethod::Poll`: a subscription's hints (its own process's
    /// releases, lock-sql `local.rs`) come on top of the polls, which keep their pace.
    polls: bool,
    /// Failed attempts in a row.
    failures: u32,
    /// No attempt was made yet: past the deadline (`NoWait`) only this one is.
    first: bool,
}

/// How a wait ended with the lock.
pub(super) struct Granted {
    /// The grant's token.
    pub(super) token: FencingToken,
    /// The instant the request the server granted after was sent (an attempt, or the arming of a
    /// pushed grant's delivery).
    pub(super) started: Instant,
    /// A pushed grant's terms; `None` for a grant answered to an attempt.
    pub(super) pushed: Option<PushTerms>,
}

/// What a grant pushed to the wait was given, beyond its token.
#[derive(Clone, Copy)]
pub(super) struct PushTerms {
    /// How long it lasts from `started` until it is claimed.
    pub(super) window: Duration,
    /// Its claim may wait ([`PushedGrant::claim_deferred`]).
    pub(super) deferred_claim: bool,
}

impl Granted {
    /// A grant answered to the attempt sent at `started`.
    pub(super) fn attempted(token: FencingToken, started: Instant) -> Granted {
        Granted { token, started, pushed: None }
    }
}

/// What a turn of the wait leads to.
enum Next {
    /// The lock was granted with this token to the attempt sent at this instant.
    Granted(FencingToken, Instant),
    /// Busy: sleep (no longer than the holder's remaining lease, when known), then try again.
    Sleep(Option<Duration>),
    /// Try again at once.
    Again,
}

impl<'a, S: LeaseStore> Wait<'a, S> {
    pub(super) fn new(
        store: &'a Arc<S>,
        claim: Claim<'a>,
        opts: &'a AcquireOptions,
        pending: &'a mut PendingRelease<S>,
    ) -> Self {
        let max_poll = store.max_poll_interval(opts.ttl);
        let polls = store.capabilities().wake == WakeMethod::Poll;
        Wait {
            store,
            claim,
            opts,
            pending,
            deadline: Deadline::new(opts.wait, Instant::now()),
            max_poll,
            backoff: Backoff::new(MIN_POLL, max_poll),
            error_backoff: Backoff::new(FIRST_ERROR_PAUSE, Duration::from_secs(1)),
            subscription: None,
            subscribed: false,
            polls,
            failures: 0,
            first: true,
        }
    }

    /// Waits until granted.
    pub(super) async fn run(mut self) -> Result<Granted, LockError> {
        loop {
            match self.turn().await? {
                Next::Granted(token, started) => return Ok(Granted::attempted(token, started)),
                Next::Again => continue,
                Next::Sleep(remaining) => {
                    self.error_backoff.reset(FIRST_ERROR_PAUSE);
                    if let Some(granted) = self.sleep(remaining).await?.and_then(|p| self.take(p)) {
                        return Ok(granted);
                    }
                }
            }
        }
    }

    /// A grant pushed to this wait: taken while the window the server gave it lasts from the
    /// instant its delivery was armed (`armed_at`: the server granted after that), less the
    /// drift allowance, as any lease; `None` once that has passed, and the wait attempts (a hint):
    /// a later taker may hold the lock with a newer token by then.
    fn take(&mut self, pushed: PushedGrant) -> Option<Granted> {
        let window = pushed.window.min(self.opts.ttl);
        let drift = self.opts.drift().saturating_add(self.store.capabilities().max_clock_offset);
        let believed = valid_until(pushed.armed_at, window, drift)?;
        if believed <= Instant::now() {
            tracing::debug!(lock = %self.claim.name, token = pushed.token.0, "pushed grant arrived after its window; attempting");
            return None;
        }
        // The grant took this wait's queue place: nothing of the wait is left to withdraw.
        self.pending.armed = false;
        self.pending.waiting = false;
        tracing::debug!(token = pushed.token.0, "acquired (pushed grant)");
        let terms = PushTerms { window, deferred_claim: pushed.deferred_claim };
        Some(Granted { token: pushed.token, started: pushed.armed_at, pushed: Some(terms) })
    }

    /// One attempt and what its answer means.
    async fn turn(&mut self) -> Result<Next, LockError> {
        let now = Instant::now();
        // Past the deadline only the first attempt (NoWait) is made.
        if self.deadline.passed(now) && !self.first {
            return Err(self.deadline.timeout(self.claim.name));
        }
        let bound = self.deadline.bound(self.opts.request_timeout, now);
        self.first = false;
        self.pending.armed = true;
        let started = Instant::now();
        match attempt(&**self.store, &self.claim, bound, true).await {
            Some(Ok(TryLock::Acquired { token })) => {
                self.pending.armed = false;
                self.pending.waiting = false;
                let waited_ms = self.deadline.begun().elapsed().as_millis() as u64;
                tracing::debug!(token = token.0, waited_ms, "acquired");
                Ok(Next::Granted(token, started))
            }
            Some(Ok(TryLock::Held { remaining })) => Ok(self.held(remaining, started).await),
            Some(Ok(TryLock::Quiet { remaining })) => {
                self.deadline.quiet(remaining);
                Ok(self.held(Some(remaining), started).await)
            }
            None if self.deadline.passed(Instant::now()) => Err(self.unanswered_at_deadline(bound)),
            Some(Err(e)) if !e.is_retryable() => {
                self.pending.armed = e.outcome_unknown();
                Err(e)
            }
            Some(Err(e)) => self.failed(e).await,
            None => self.failed(no_answer(&**self.store, bound)).await,
        }
    }

    /// The server answered "busy". Free locks cost one round trip: the wait subscribes to
    /// release hints only now, then tries again before sleeping, so a release in between is not
    /// missed; unless the subscription already heard everything since before this attempt was
    /// sent (`WakeSubscription::live_since`).
    async fn held(&mut self, remaining: Option<Duration>, started: Instant) -> Next {
        self.pending.armed = false;
        self.failures = 0;
        self.deadline.busy();
        if !self.subscribed {
            self.subscribed = true;
            self.subscription = self.subscribe().await;
            let heard_all = self.subscription.as_ref().and_then(WakeSubscription::live_since);
            if self.subscription.is_some() && heard_all.is_none_or(|since| since > started) {
                return Next::Again;
            }
        }
        Next::Sleep(remaining)
    }

    /// No answer within the bound, and the deadline has passed; the attempt may have been
    /// applied (`pending` stays armed and releases it). An attempt the caller's deadline cut
    /// well short of its request timeout, with no failure before it, is the wait ending:
    /// `Timeout`. `Unavailable` is for a backend that failed during this wait or did not answer
    /// within (about) a whole request timeout; the tenth of slack absorbs the time spent before
    /// the attempt. A wait that saw the lock busy is `Timeout` in any case ([`Deadline`]).
    fn unanswered_at_deadline(&self, bound: Duration) -> LockError {
        let cut_short = bound < self.opts.request_timeout.mul_f64(0.9) && self.failures == 0;
        if cut_short {
            return self.deadline.timeout(self.claim.name);
        }
        self.deadline.or_timeout(self.claim.name, no_answer(&**self.store, bound))
    }

    /// A retryable failure: waiting forever means forever, so it is retried with back-off; with
    /// a deadline at most [`MAX_FAILURES`] in a row, while the deadline has not passed.
    async fn failed(&mut self, e: LockError) -> Result<Next, LockError> {
        let retry = match self.deadline.at() {
            None => true,
            Some(_) => !self.deadline.passed(Instant::now()) && self.failures < MAX_FAILURES,
        };
        if !retry {
            return Err(self.deadline.or_timeout(self.claim.name, e));
        }
        self.failures = self.failures.saturating_add(1);
        tracing::debug!(lock = %self.claim.name, error = %e, failures = self.failures, "acquire attempt failed; retrying");
        let left = self.deadline.left(Instant::now());
        tokio::time::sleep(self.error_backoff.next_delay().min(left)).await;
        Ok(Next::Again)
    }

    /// Sleeps until a release hint, a pushed grant (returned), the next poll, or the holder's
    /// lease ends (it may vanish without a word); `Timeout` when the deadline has passed.
    async fn sleep(&mut self, remaining: Option<Duration>) -> Result<Option<PushedGrant>, LockError> {
        let now = Instant::now();
        if self.deadline.passed(now) {
            return Err(self.deadline.timeout(self.claim.name));
        }
        let left = self.deadline.left(now);
        let until_expiry = remaining.map(|r| r.saturating_add(Duration::from_millis(1))).unwrap_or(Duration::MAX);
        // A backend that polls keeps its pace with hints too: they come only from its own
        // process (lock-sql `local.rs`), the polls find every other release.
        let nap = if self.subscription.is_none() || self.polls {
            self.poll_nap(now, until_expiry, left)
        } else {
            until_expiry.min(self.max_poll.saturating_mul(4)).min(left)
        };
        match &self.subscription {
            Some(sub) => {
                tokio::select! {
                    pushed = sub.next() => {
                        self.backoff.reset(MIN_POLL);
                        return Ok(pushed);
                    }
                    _ = tokio::time::sleep(nap) => {}
                }
            }
            None => tokio::time::sleep(nap).await,
        }
        Ok(None)
    }

    /// How long a polling wait sleeps before its next attempt.
    fn poll_nap(&mut self, now: Instant, until_expiry: Duration, left: Duration) -> Duration {
        let cap = poll_cap(now - self.deadline.begun(), self.max_poll);
        self.backoff.next_delay().min(cap).min(until_expiry).min(left)
    }

    /// Subscribes to release hints; `None` (poll) when the backend has none or the subscription fails.
    async fn subscribe(&self) -> Option<WakeSubscription> {
        let (name, owner) = (self.claim.name, self.claim.owner);
        match timeout(self.opts.request_timeout, self.store.subscribe_waiter(name, owner)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(lock = %name, error = %e, "subscribe failed; polling");
                None
            }
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_cap_shrinks_to_a_newcomers_interval() {
        let ms = Duration::from_millis;
        let max = ms(500);
        // (waited, cap)
        let table =
            [(ms(0), ms(500)), (ms(2000), ms(250)), (ms(3000), ms(125)), (ms(4000), ms(5)), (ms(60_000), ms(5))];
        for (waited, want) in table {
            assert_eq!(poll_cap(waited, max), want, "waited {waited:?}");
        }
        assert_eq!(poll_cap(Duration::MAX, Duration::MAX), MIN_POLL);
        assert_eq!(poll_cap(Duration::ZERO, ms(2)), ms(2));
        assert!(poll_cap(ms(3999), max) >= MIN_POLL);
    }
}
