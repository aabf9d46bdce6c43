//! Acquire options (docs/contract.md §3, §4).

use std::time::Duration;

use crate::{Capabilities, EventsRef, Holder, LeaseEvents, LockError};

/// How long `acquire` waits for a lock that someone else holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitPolicy {
    /// One attempt, like `try_acquire`, but a busy lock is `Timeout` instead of `None`.
    NoWait,
    /// Wait at most this long, then `Timeout`.
    For(Duration),
    /// Wait until granted.
    Forever,
}

impl WaitPolicy {
    /// When a wait that starts at `begun` ends; `None` for [`WaitPolicy::Forever`], and for a
    /// `For` too long to be an `Instant` (a wait that long has no end; [`AcquireOptions::validate`]
    /// refuses one above about 100 years before any wait starts).
    pub fn deadline(self, begun: tokio::time::Instant) -> Option<tokio::time::Instant> {
        match self {
            WaitPolicy::NoWait => Some(begun),
            WaitPolicy::For(w) => begun.checked_add(w),
            WaitPolicy::Forever => None,
        }
    }
}

/// Options of one acquisition: lease time, how long to wait, and the renewal watchdog.
///
/// ```
/// use std::time::Duration;
/// use lock_core::AcquireOptions;
/// let opts = AcquireOptions::new(Duration::from_secs(10))
///     .wait(Duration::from_secs(3))
///     .renew_every(Duration::from_secs(2));
/// assert_eq!(opts.ttl, Duration::from_secs(10));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcquireOptions {
    /// Lease time granted by the server for each acquisition or renewal.
    pub ttl: Duration,
    /// How long `acquire` waits. A `For` above about 100 years is `InvalidOptions` (not a
    /// panic, not a silent "forever"): a wait without end is [`WaitPolicy::Forever`].
    pub wait: WaitPolicy,
    /// Renew in the background while the `Lease` lives (default on).
    pub auto_renew: bool,
    /// Renewal cadence; `None` means `ttl / 3`. At most `ttl / 2` (`InvalidOptions` above), so a
    /// failed renewal can be retried before the lease ends; the first renewal is due this long
    /// after the grant's request was sent, never later than halfway through the validity left.
    pub renew_every: Option<Duration>,
    /// Upper bound for one request to the server; never longer than the remaining wait.
    pub request_timeout: Duration,
    /// Stop auto-renewing after this long in total; `None` renews while the `Lease` lives.
    pub max_hold: Option<Duration>,
    /// Who is acquiring, stored with the lease where the backend can (`Capabilities::inspect`);
    /// `None` stores no identity.
    pub holder: Option<Holder>,
    /// Run-once jobs (ShedLock's `lockAtLeastFor`, docs/contract.md §3): a lease released (or
    /// dropped) before `t0 + d` keeps the lock taken until `t0 + d` (`t0` = when the grant's
    /// request was sent) instead of freeing it. `None` frees on release.
    pub hold_at_least: Option<Duration>,
    /// An observer of the lease's renewals, loss and release (metrics layers); `None` by default.
    pub events: Option<EventsRef>,
}

/// The default lease time.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The clock-drift allowance subtracted from a lease of `ttl` (or a ZooKeeper session of that
/// timeout) before the holder stops relying on it: `ttl/100 + 2ms` (Redlock's rule). Every
/// backend uses this one rule.
pub fn clock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The longest `request_timeout` accepted.
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);

/// The longest `wait` or `max_hold` accepted (about 100 years): beyond it, use
/// `WaitPolicy::Forever` or no `max_hold`.
const MAX_SPAN: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions::new(DEFAULT_TTL)
    }
}

impl AcquireOptions {
    /// Options with this ttl, waiting forever, auto-renew every ttl/3.
    pub fn new(ttl: Duration) -> Self {
        AcquireOptions {
            ttl,
            wait: WaitPolicy::Forever,
            auto_renew: true,
            renew_every: None,
            request_timeout: Duration::from_secs(5),
            max_hold: None,
            holder: None,
            hold_at_least: None,
            events: None,
        }
    }

    /// Sets the ttl.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Waits at most `wait` in `acquire`.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = WaitPolicy::For(wait);
        self
    }

    /// Sets the wait policy.
    pub fn wait_policy(mut self, wait: WaitPolicy) -> Self {
        self.wait = wait;
        self
    }

    /// Turns background renewal on or off.
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }

    /// Renews every `every` instead of every ttl/3.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// Bounds each server request.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Caps the total time the watchdog keeps renewing.
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// Keeps the lock taken until `t0 + at_least` even when released earlier: a job that ran
    /// in 2 s under `hold_at_least(60s)` is not run again by an instance whose timer fired a
    /// few seconds late. Per-lock backends shorten the lease on release to end at `t0 +
    /// at_least`; ZooKeeper keeps the node and deletes it then (docs/contract.md §3).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::AcquireOptions;
    /// let opts = AcquireOptions::new(Duration::from_secs(30)).hold_at_least(Duration::from_secs(60));
    /// assert_eq!(opts.hold_at_least, Some(Duration::from_secs(60)));
    /// ```
    pub fn hold_at_least(mut self, at_least: Duration) -> Self {
        self.hold_at_least = Some(at_least);
        self
    }

    /// Tells `events` about the lease's renewals, loss and release (see [`LeaseEvents`]).
    pub fn events(mut self, events: std::sync::Arc<dyn LeaseEvents>) -> Self {
        self.events = Some(EventsRef(events));
        self
    }

    /// Stores this identity with the lease (see [`Holder`]).
    pub fn holder(mut self, holder: Holder) -> Self {
        self.holder = Some(holder);
        self
    }

    /// The renewal cadence in effect.
    pub(crate) fn renew_interval(&self) -> Duration {
        self.renew_every.unwrap_or(self.ttl / 3)
    }

    /// The clock-drift allowance subtracted from every lease: [`clock_drift`] of the ttl.
    pub fn drift(&self) -> Duration {
        clock_drift(self.ttl)
    }

    /// Checks the options against a backend's limits.
    pub fn validate(&self, caps: &Capabilities) -> Result<(), LockError> {
        if self.ttl.is_zero() {
            return Err(LockError::invalid_options("ttl is zero; give the lease a positive time to live, e.g. 10s"));
        }
        if self.ttl < caps.min_ttl {
            return Err(LockError::invalid_options(format!(
                "ttl {:?} is below this backend's minimum {:?}",
                self.ttl, caps.min_ttl
            )));
        }
        if self.ttl > caps.max_ttl {
            return Err(LockError::invalid_options(format!(
                "ttl {:?} is above this backend's maximum {:?}; use a shorter ttl with auto-renew",
                self.ttl, caps.max_ttl
            )));
        }
        if self.ttl <= self.drift() {
            return Err(LockError::invalid_options("ttl is shorter than the clock-drift allowance"));
        }
        if self.ttl <= self.drift().saturating_add(caps.max_clock_offset) {
            return Err(LockError::invalid_options(format!(
                "ttl {:?} is not longer than the clock-drift allowance plus this backend's max_clock_offset {:?}; \
                 use a longer ttl (or, if the servers' clocks agree more closely, a smaller max_clock_offset)",
                self.ttl, caps.max_clock_offset
            )));
        }
        if self.request_timeout.is_zero() {
            return Err(LockError::invalid_options("request_timeout is zero"));
        }
        if self.request_timeout > MAX_REQUEST_TIMEOUT {
            return Err(LockError::invalid_options(format!(
                "request_timeout {:?} is above {MAX_REQUEST_TIMEOUT:?}; a request that may take that long is a hang, \
                 use a few seconds",
                self.request_timeout
            )));
        }
        if let Some(every) = self.renew_every {
            // Above half the ttl a single slow or failed renewal loses the lease.
            if every.is_zero() || every > self.ttl / 2 {
                return Err(LockError::invalid_options(format!(
                    "renew_every {every:?} must be above zero and at most half the ttl {:?}, so a failed renewal \
                     can be retried before the lease ends",
                    self.ttl
                )));
            }
        }
        if let WaitPolicy::For(w) = self.wait {
            if w > MAX_SPAN {
                return Err(LockError::invalid_options("wait is too large; use WaitPolicy::Forever"));
            }
        }
        if let Some(m) = self.max_hold {
            if m > MAX_SPAN {
                return Err(LockError::invalid_options(
                    "max_hold is too large; leave it unset to renew for as long as the lease lives",
                ));
            }
        }
        if let Some(h) = self.hold_at_least {
            if h > MAX_SPAN {
                return Err(LockError::invalid_options(
                    "hold_at_least is too large; a run-once job holds its lock for minutes or hours, not centuries",
                ));
            }
        }
        // Every instant the lease computes must exist (no `Instant + Duration` overflow).
        let now = tokio::time::Instant::now();
        let longest =
            [self.ttl, self.request_timeout, self.max_hold.unwrap_or_default(), self.hold_at_least.unwrap_or_default()]
                .into_iter()
                .chain(match self.wait {
                    WaitPolicy::For(w) => Some(w),
                    _ => None,
                })
                .try_fold(Duration::ZERO, |acc, d| acc.checked_add(d));
        if longest.and_then(|d| now.checked_add(d.saturating_mul(2))).is_none() {
            return Err(LockError::invalid_options("the durations are too large to compute deadlines with"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let caps = Capabilities::default();
        assert!(AcquireOptions::new(Duration::from_secs(1)).validate(&caps).is_ok());
        assert!(AcquireOptions::new(Duration::ZERO).validate(&caps).is_err());
        assert!(AcquireOptions::new(Duration::from_secs(u64::MAX)).validate(&caps).is_err());
        assert!(AcquireOptions::new(Duration::from_secs(1))
            .renew_every(Duration::from_secs(2))
            .validate(&caps)
            .is_err());
        assert!(AcquireOptions::new(Duration::from_millis(2)).validate(&caps).is_err());
        assert!(AcquireOptions::new(Duration::from_secs(1))
            .wait(Duration::from_secs(u64::MAX))
            .validate(&caps)
            .is_err());
    }

    #[test]
    fn extreme_durations_are_invalid_options() {
        let caps = Capabilities::default();
        let base = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(1));
        let huge = [Duration::MAX, Duration::MAX - Duration::from_nanos(1), Duration::from_secs(u64::MAX / 4)];
        for d in huge {
            for (field, o) in with_each_duration(&base, d) {
                assert!(
                    matches!(o.validate(&caps), Err(LockError::InvalidOptions { .. })),
                    "{field} = {d:?} was not InvalidOptions"
                );
            }
        }
        // The boundaries that stay valid.
        assert!(base.clone().renew_every(Duration::from_secs(5)).validate(&caps).is_ok());
        assert!(base.clone().renew_every(Duration::from_millis(5001)).validate(&caps).is_err());
        assert!(base.clone().max_hold(Duration::from_secs(3600 * 24 * 365)).validate(&caps).is_ok());
        assert!(base.clone().request_timeout(Duration::from_secs(3600)).validate(&caps).is_ok());
        assert!(base.clone().wait_policy(WaitPolicy::Forever).validate(&caps).is_ok());
    }

    /// `base` with each of its durations in turn set to `d`, named by field.
    fn with_each_duration(base: &AcquireOptions, d: Duration) -> [(&'static str, AcquireOptions); 6] {
        [
            ("ttl", base.clone().ttl(d)),
            ("wait", base.clone().wait(d)),
            ("renew_every", base.clone().renew_every(d)),
            ("request_timeout", base.clone().request_timeout(d)),
            ("max_hold", base.clone().max_hold(d)),
            ("hold_at_least", base.clone().hold_at_least(d)),
        ]
    }

    /// Every entry point a library user can reach with options, on the memory backend: a huge
    /// duration anywhere is `InvalidOptions`, never a panic (`Instant + Duration` overflow).
    #[tokio::test]
    async fn extreme_durations_never_panic_in_any_entry_point() {
        use crate::{acquire_all, DistributedLock, DistributedRwLock, DistributedSemaphore, LockName, MemoryLock};
        let lock = MemoryLock::new();
        let name = LockName::new("extreme-all").expect("valid");
        let base = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_millis(10));
        for d in [Duration::MAX, Duration::MAX - Duration::from_nanos(1), Duration::from_secs(u64::MAX / 4)] {
            for (field, o) in with_each_duration(&base, d) {
                let invalid = |r: Result<(), LockError>| matches!(r, Err(LockError::InvalidOptions { .. }));
                assert!(invalid(lock.acquire(&name, &o).await.map(drop)), "acquire, {field} = {d:?}");
                assert!(invalid(lock.try_acquire(&name, &o).await.map(drop)), "try_acquire, {field} = {d:?}");
                assert!(invalid(lock.acquire_read(&name, &o).await.map(drop)), "acquire_read, {field} = {d:?}");
                assert!(invalid(lock.try_acquire_read(&name, &o).await.map(drop)), "try_acquire_read, {field}");
                assert!(invalid(lock.acquire_write(&name, &o).await.map(drop)), "acquire_write, {field} = {d:?}");
                assert!(invalid(lock.try_acquire_write(&name, &o).await.map(drop)), "try_acquire_write, {field}");
                assert!(invalid(lock.acquire_permit(&name, 2, &o).await.map(drop)), "acquire_permit, {field}");
                assert!(invalid(lock.try_acquire_permit(&name, 2, &o).await.map(drop)), "try_acquire_permit, {field}");
                let names = [name.clone()];
                assert!(invalid(acquire_all(&lock, &names, &o).await.map(drop)), "acquire_all, {field} = {d:?}");
            }
        }
    }

    #[test]
    fn defaults() {
        let o = AcquireOptions::new(Duration::from_secs(9));
        assert_eq!(o.renew_interval(), Duration::from_secs(3));
        assert!(o.auto_renew);
        assert_eq!(o.wait, WaitPolicy::Forever);
        assert_eq!(o.drift(), Duration::from_millis(92));
    }

    #[test]
    fn a_ttl_within_drift_plus_the_clock_offset_is_refused() {
        let mut caps = Capabilities::new();
        caps.max_clock_offset = Duration::from_millis(50);
        // drift(50ms) = 2.5 ms: fine alone, not with 50 ms of clock offset on top.
        let short = AcquireOptions::new(Duration::from_millis(50));
        assert!(short.validate(&Capabilities::new()).is_ok());
        let e = short.validate(&caps).expect_err("refused");
        assert!(matches!(e, LockError::InvalidOptions { .. }), "{e:?}");
        assert!(e.to_string().contains("max_clock_offset"), "{e}");
        assert!(AcquireOptions::new(Duration::from_millis(60)).validate(&caps).is_ok());
    }
}
