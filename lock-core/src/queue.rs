//! The shared parts of a queue-recipe backend (ZooKeeper, etcd): each acquisition queues an entry
//! of its own and waits for the recipe to say it holds. The backend writes its queue, its list
//! and its watch; this module holds what every such acquire answers alike — the per-call clock
//! (deadline, back-off, how long the server has been silent) and the mapping of the read-write
//! lock and the semaphore onto one "acquire this recipe" pair of methods.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{sleep, Instant};

use crate::backend::{check_permits, Backoff, Deadline};
use crate::{
    AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, Lease, LockError, LockName, WaitPolicy,
};

/// The first and the largest pause between retries of one acquisition.
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// What one acquisition's queue entry asks for. The three kinds of docs/contract.md §5; not
/// `#[non_exhaustive]` because a new kind would be a new lock trait, and so a breaking change
/// for every backend anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// The exclusive lock.
    Exclusive,
    /// A reader of a read-write lock.
    Read,
    /// The writer of a read-write lock.
    Write,
    /// One of this many permits of a semaphore (checked by [`check_permits`] before it is made).
    Permit(u32),
}

/// Why one pass of a queue-recipe acquire ends without an answer for the caller.
#[derive(Debug)]
pub enum Stop {
    /// Our entry, its lease or its session is gone (expired, deleted by an operator): queue
    /// again; the text says why, for the log.
    Restart(&'static str),
    /// The caller's answer is this error (or, if transient, a retry).
    Fail(LockError),
}

impl From<LockError> for Stop {
    fn from(e: LockError) -> Self {
        Stop::Fail(e)
    }
}

/// The clock of one hand-written acquisition: when it must have answered, whether it queues at
/// all, the back-off between retries and since when the server has not answered.
///
/// A single try (`try_acquire*`, [`WaitPolicy::NoWait`] or a zero wait) answers within one
/// request timeout; a wait ends as `opts.wait` says. A transient failure is retried after a
/// back-off until the deadline would pass or the server has been silent for `connect_timeout` —
/// unless the caller waits forever, which outlasts any outage (docs/contract.md §4).
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::AcquireClock;
/// use lock_core::{AcquireOptions, WaitPolicy};
///
/// let opts = AcquireOptions::default().wait_policy(WaitPolicy::NoWait);
/// let clock = AcquireClock::new(true, &opts, Duration::from_secs(2), Duration::from_secs(5));
/// assert!(!clock.waits());
/// assert!(clock.bound() <= Duration::from_secs(2));
/// ```
#[derive(Debug)]
pub struct AcquireClock {
    deadline: Deadline,
    waits: bool,
    request_timeout: Duration,
    connect_timeout: Duration,
    unavailable_since: Option<Instant>,
    backoff: Backoff,
}

impl AcquireClock {
    /// The clock of an acquisition that starts now: `queue` is false for a single try, true to
    /// wait as `opts.wait` says. `request_timeout` and `connect_timeout` are the client's; each
    /// request is bounded by the smaller of the client's and `opts.request_timeout`.
    pub fn new(queue: bool, opts: &AcquireOptions, request_timeout: Duration, connect_timeout: Duration) -> Self {
        // A zero wait is one attempt, like NoWait (busy → Timeout), not an instant Unavailable.
        let waits = queue && !matches!(opts.wait, WaitPolicy::NoWait | WaitPolicy::For(Duration::ZERO));
        let request_timeout = opts.request_timeout.min(request_timeout);
        let policy = if waits { opts.wait } else { WaitPolicy::For(request_timeout) };
        AcquireClock {
            deadline: Deadline::new(policy, Instant::now()),
            waits,
            request_timeout,
            connect_timeout,
            unavailable_since: None,
            backoff: Backoff::new(BACKOFF_MIN, BACKOFF_MAX),
        }
    }

    /// Whether the acquisition queues and waits (false for a single try).
    pub fn waits(&self) -> bool {
        self.waits
    }

    /// The acquisition's deadline (its `Timeout` counts from when the acquisition started).
    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// The server answered "held by someone else".
    pub fn busy(&mut self) {
        self.deadline.busy();
    }

    /// The request timeout of this acquisition (the client's, or the caller's if smaller).
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The bound of one request sent now: the request timeout, never beyond the deadline (and a
    /// millisecond once it has passed, so a request sent at the last moment can be answered).
    pub fn bound(&self) -> Duration {
        let now = Instant::now();
        if self.deadline.passed(now) {
            return Duration::from_millis(1);
        }
        self.deadline.bound(self.request_timeout, now)
    }

    /// The `Timeout` of this acquisition of `name`.
    pub fn timeout(&self, name: &LockName) -> LockError {
        self.deadline.timeout(name)
    }

    /// The next back-off delay.
    pub fn next_delay(&mut self) -> Duration {
        self.backoff.next_delay()
    }

    /// The server answered: the next failure starts a new outage and a short back-off.
    pub fn answered(&mut self) {
        self.unavailable_since = None;
        self.backoff.reset(BACKOFF_MIN);
    }

    /// After the transient failure `err` of an acquisition of `name` on `backend`: waits a
    /// little and returns to retry. Gives up with `Timeout` when the lock was seen busy and the
    /// deadline would pass, with `err` when the deadline would pass otherwise or the server has
    /// been silent for `connect_timeout` (unless waiting forever).
    pub async fn after_transient(&mut self, err: LockError, name: &LockName, backend: &str) -> Result<(), LockError> {
        let now = Instant::now();
        let since = *self.unavailable_since.get_or_insert(now);
        let delay = self.backoff.next_delay();
        let out_of_time = self.deadline.left(now) <= delay;
        if out_of_time && self.waits && self.deadline.seen_busy() {
            return Err(self.timeout(name));
        }
        // Waiting forever means forever: only a bounded call gives up on a silent server.
        let forever = self.deadline.at().is_none();
        if out_of_time || (!forever && now.duration_since(since) >= self.connect_timeout) {
            return Err(err);
        }
        tracing::debug!(lock = %name, backend, error = %err, "request failed; retrying");
        sleep(delay).await;
        Ok(())
    }
}

/// A backend whose lock kinds are recipes over one queue: beside its [`DistributedLock`] (the
/// [`QueueKind::Exclusive`] recipe) it answers "try this kind once" and "wait for this kind",
/// and gets [`DistributedRwLock`] and [`DistributedSemaphore`] from them, with the same backend
/// name and capabilities (the permit count checked once, here).
#[async_trait]
pub trait QueueLock: DistributedLock {
    /// One attempt: `Ok(None)` when busy.
    async fn try_kind(
        &self,
        kind: QueueKind,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError>;

    /// Queues and waits until granted or `opts.wait` ends (`Timeout`).
    async fn acquire_kind(&self, kind: QueueKind, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError>;
}

fn permits(n: u32) -> Result<QueueKind, LockError> {
    check_permits(n)?;
    Ok(QueueKind::Permit(n))
}

#[async_trait]
impl<T: QueueLock> DistributedRwLock for T {
    async fn try_acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_kind(QueueKind::Read, name, options).await
    }

    async fn acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.acquire_kind(QueueKind::Read, name, options).await
    }

    async fn try_acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_kind(QueueKind::Write, name, options).await
    }

    async fn acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.acquire_kind(QueueKind::Write, name, options).await
    }
}

#[async_trait]
impl<T: QueueLock> DistributedSemaphore for T {
    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits_total: u32,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        self.try_kind(permits(permits_total)?, name, options).await
    }

    async fn acquire_permit(
        &self,
        name: &LockName,
        permits_total: u32,
        options: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        self.acquire_kind(permits(permits_total)?, name, options).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::{Capabilities, LockService};

    /// Records the kinds it is asked for and answers "busy".
    struct Recorder(Mutex<Vec<(QueueKind, bool)>>);

    #[async_trait]
    impl DistributedLock for Recorder {
        async fn try_acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
            self.try_kind(QueueKind::Exclusive, name, opts).await
        }

        async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
            self.acquire_kind(QueueKind::Exclusive, name, opts).await
        }
    }

    impl LockService for Recorder {
        fn backend(&self) -> &str {
            "recorder"
        }

        fn capabilities(&self) -> Capabilities {
            LockService::capabilities(&crate::MemoryLock::new())
        }
    }

    #[async_trait]
    impl QueueLock for Recorder {
        async fn try_kind(
            &self,
            kind: QueueKind,
            _: &LockName,
            _: &AcquireOptions,
        ) -> Result<Option<Lease>, LockError> {
            self.0.lock().map_err(|_| LockError::unavailable("recorder", "poisoned"))?.push((kind, false));
            Ok(None)
        }

        async fn acquire_kind(&self, kind: QueueKind, name: &LockName, _: &AcquireOptions) -> Result<Lease, LockError> {
            self.0.lock().map_err(|_| LockError::unavailable("recorder", "poisoned"))?.push((kind, true));
            Err(LockError::Timeout { name: name.as_str().to_owned(), waited: Duration::ZERO, quiet_left: None })
        }
    }

    #[tokio::test]
    async fn kinds_map_onto_the_queue_and_zero_permits_never_reach_it() {
        let lock = Recorder(Mutex::new(Vec::new()));
        let (name, opts) = (LockName::new("q").unwrap(), AcquireOptions::default());
        assert!(lock.try_acquire_read(&name, &opts).await.unwrap().is_none());
        assert!(lock.acquire_write(&name, &opts).await.is_err());
        assert!(lock.try_acquire_permit(&name, 3, &opts).await.unwrap().is_none());
        for zero in [
            lock.try_acquire_permit(&name, 0, &opts).await.map(|_| ()),
            lock.acquire_permit(&name, 0, &opts).await.map(|_| ()),
        ] {
            assert!(matches!(zero, Err(LockError::InvalidOptions { .. })), "{zero:?}");
        }
        let asked = lock.0.lock().unwrap().clone();
        assert_eq!(asked, [(QueueKind::Read, false), (QueueKind::Write, true), (QueueKind::Permit(3), false)]);
        assert_eq!(LockService::backend(&lock), "recorder");
    }

    #[test]
    fn a_single_try_is_bounded_by_one_request() {
        let s = Duration::from_secs;
        for (queue, wait) in
            [(false, WaitPolicy::Forever), (true, WaitPolicy::NoWait), (true, WaitPolicy::For(Duration::ZERO))]
        {
            let clock = AcquireClock::new(queue, &AcquireOptions::default().wait_policy(wait), s(2), s(5));
            assert!(!clock.waits());
            assert!(clock.deadline().at().is_some());
            assert!(clock.bound() <= s(2));
        }
        let forever = AcquireClock::new(true, &AcquireOptions::default().wait_policy(WaitPolicy::Forever), s(2), s(5));
        assert!(forever.waits() && forever.deadline().at().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_end_in_timeout_when_busy_and_in_the_error_when_silent() {
        let name = LockName::new("q").unwrap();
        let failure = || LockError::unavailable("test", "no answer");
        let s = Duration::from_secs;
        // Busy, and the deadline would pass during the back-off: Timeout.
        let opts = AcquireOptions::default().wait(Duration::from_millis(5));
        let mut busy = AcquireClock::new(true, &opts, s(2), s(5));
        busy.busy();
        let out = busy.after_transient(failure(), &name, "test").await;
        assert!(matches!(out, Err(LockError::Timeout { .. })), "{out:?}");
        // Never busy, the server silent for longer than connect_timeout: its error.
        let opts = AcquireOptions::default().wait(s(60));
        let mut silent = AcquireClock::new(true, &opts, s(2), s(1));
        assert!(silent.after_transient(failure(), &name, "test").await.is_ok());
        tokio::time::advance(s(2)).await;
        let out = silent.after_transient(failure(), &name, "test").await;
        assert!(matches!(out, Err(LockError::Unavailable { .. })), "{out:?}");
        // Waiting forever outlasts any outage; an answer starts a new one.
        let opts = AcquireOptions::default().wait_policy(WaitPolicy::Forever);
        let mut forever = AcquireClock::new(true, &opts, s(2), s(1));
        for _ in 0..3 {
            assert!(forever.after_transient(failure(), &name, "test").await.is_ok());
            tokio::time::advance(s(2)).await;
        }
        forever.answered();
        assert!(forever.after_transient(failure(), &name, "test").await.is_ok());
    }
}
