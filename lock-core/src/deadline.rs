//! The end of one acquire wait and the answer owed when it comes (docs/contract.md §4), kept in
//! one value so every backend that waits answers alike.

use std::time::Duration;

use tokio::time::Instant;

use crate::{LockError, LockName, WaitPolicy};

/// The deadline of one `acquire` wait, and whether the lock was seen busy during it.
///
/// The rule it holds (docs/contract.md §4): a wait that saw the lock **busy** answers
/// [`LockError::Timeout`] once its deadline has passed, also when its last attempt failed or was
/// cut short by the deadline: the caller asked to wait that long for a busy lock, and it stayed
/// busy. A wait that never saw the lock busy answers with its failure instead (the server, not
/// the holder, kept it from the lock). Backend authors who write their own wait (those that do
/// not use [`StoreLock`](crate::backend::StoreLock)) call [`Deadline::busy`] on each "held"
/// answer and end with [`Deadline::or_timeout`].
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::Deadline;
/// use lock_core::{LockError, LockName, WaitPolicy};
/// use tokio::time::Instant;
///
/// let name = LockName::new("jobs").unwrap();
/// let begun = Instant::now() - Duration::from_secs(2);
/// let mut deadline = Deadline::new(WaitPolicy::For(Duration::from_secs(1)), begun);
/// let failure = || LockError::unavailable("demo", "no answer");
/// assert!(matches!(deadline.or_timeout(&name, failure()), LockError::Unavailable { .. }));
/// deadline.busy();
/// assert!(matches!(deadline.or_timeout(&name, failure()), LockError::Timeout { .. }));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    begun: Instant,
    /// `None`: the wait has no end ([`WaitPolicy::Forever`], or a `For` too long for an instant).
    at: Option<Instant>,
    seen_busy: bool,
}

impl Deadline {
    /// The deadline of a wait by `policy` that began at `begun` (see [`WaitPolicy::deadline`]).
    pub fn new(policy: WaitPolicy, begun: Instant) -> Self {
        Deadline { begun, at: policy.deadline(begun), seen_busy: false }
    }

    /// When the wait began.
    pub fn begun(&self) -> Instant {
        self.begun
    }

    /// When the wait ends; `None` when it has no end.
    pub fn at(&self) -> Option<Instant> {
        self.at
    }

    /// Whether the wait has an end and `now` is at or past it.
    pub fn passed(&self, now: Instant) -> bool {
        self.at.is_some_and(|at| now >= at)
    }

    /// What is left of the wait at `now` (zero once passed); `Duration::MAX` without an end.
    pub fn left(&self, now: Instant) -> Duration {
        self.at.map_or(Duration::MAX, |at| at.saturating_duration_since(now))
    }

    /// The bound of one request sent at `now`: `request_timeout`, never beyond the deadline but
    /// at least a millisecond, so a request sent at the last moment can still be answered.
    pub fn bound(&self, request_timeout: Duration, now: Instant) -> Duration {
        match self.at {
            Some(at) if at > now => request_timeout.min(at - now).max(Duration::from_millis(1)),
            _ => request_timeout,
        }
    }

    /// The server answered "held by someone else".
    pub fn busy(&mut self) {
        self.seen_busy = true;
    }

    /// Whether the server answered "held" during this wait.
    pub fn seen_busy(&self) -> bool {
        self.seen_busy
    }

    /// The `Timeout` of this wait for `name`, waited until now.
    pub fn timeout(&self, name: &LockName) -> LockError {
        LockError::Timeout { name: name.as_str().to_owned(), waited: self.begun.elapsed() }
    }

    /// The answer of a wait that ends with `failure`: `Timeout` when the lock was seen busy and
    /// the deadline has passed, else `failure` itself.
    pub fn or_timeout(&self, name: &LockName, failure: LockError) -> LockError {
        if self.seen_busy && self.passed(Instant::now()) {
            self.timeout(name)
        } else {
            failure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_what_is_left() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let forever = Deadline::new(WaitPolicy::Forever, now);
        assert_eq!((forever.at(), forever.left(now), forever.bound(s(5), now)), (None, Duration::MAX, s(5)));
        assert!(!forever.passed(now + s(1_000)));
        let two = Deadline::new(WaitPolicy::For(s(2)), now);
        assert_eq!(two.bound(s(5), now), s(2));
        assert_eq!(two.bound(s(1), now), s(1));
        assert_eq!(two.bound(s(5), now + s(2) - Duration::from_micros(1)), Duration::from_millis(1));
        assert_eq!(two.left(now + s(3)), Duration::ZERO);
        assert!(two.passed(now + s(2)));
        let none = Deadline::new(WaitPolicy::NoWait, now);
        assert!(none.passed(now));
        assert_eq!(none.bound(s(5), now), s(5));
    }
}
