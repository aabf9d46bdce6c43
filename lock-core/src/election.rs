//! Leader election over any [`DistributedLock`] (docs/contract.md §5.8): the leader is whoever
//! holds the election's lock name; its epoch is the lease's fencing token.
//!
//! - [`Election::campaign`] waits for the lock (with the candidate's [`Holder`] stored with it)
//!   and returns a [`Leadership`]: the lease, its epoch, its lost signal.
//! - [`Leadership::resign`] releases it at once, so a waiting candidate takes over as fast as
//!   the backend wakes waiters (notification or watch where it has them, polling elsewhere).
//! - [`Election::leader`] and [`Election::observe`] read who leads with
//!   [`DistributedLock::inspect`]: they need `Capabilities::inspect` (`Unsupported` otherwise).
//!
//! How `observe` learns of changes: where the backend notifies (`Capabilities::notify_changes`:
//! Redis pub/sub, PostgreSQL NOTIFY, ZooKeeper watches, the in-memory server) it registers a
//! [`ChangeFeed`] ([`DistributedLock::watch_changes`]) before its first read, so a grant or a
//! release made by any process wakes it within a notification's delivery plus one `inspect`.
//! It also polls `inspect` every [`Election::observe_every`] (default a fifth of the ttl,
//! between 10 ms and 5 s): the only way to see a lease that merely expired, and the way
//! elsewhere (MySQL, SQLite, Redlock), where a change is seen within that interval plus one
//! request. Campaigns won and resignations made through the same `Election` value (or its
//! clones) in this process wake its observers at once on every backend.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::Notify;

use crate::{
    AcquireOptions, ChangeFeed, DistributedLock, FencingToken, Holder, HolderInfo, Lease, LockError, LockName,
    LostSignal,
};

/// One election: a lock name, a candidate and the options its campaigns use. Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::{sync::Arc, time::Duration};
/// use lock_core::{AcquireOptions, Election, Holder, LockName, MemoryLock};
/// let lock = Arc::new(MemoryLock::new());
/// let opts = AcquireOptions::new(Duration::from_secs(10));
/// let election = Election::new(lock, LockName::new("leader/billing")?, Holder::new("pod-a")?, opts);
/// let leadership = election.campaign().await?;
/// println!("leading with epoch {}", leadership.epoch());
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    lock: Arc<dyn DistributedLock>,
    name: LockName,
    opts: AcquireOptions,
    observe_every: Duration,
    changed: Arc<Notify>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("backend", &self.lock.backend())
            .field("name", &self.name)
            .field("candidate", &self.opts.holder)
            .finish()
    }
}

impl Election {
    /// An election on `name` for `candidate`. `opts` are the campaign's acquire options (ttl,
    /// renewal, how long [`Election::campaign`] waits: by default forever); their holder is
    /// replaced by `candidate` and `hold_at_least` is cleared, so that a resignation hands
    /// over at once.
    pub fn new(lock: Arc<dyn DistributedLock>, name: LockName, candidate: Holder, opts: AcquireOptions) -> Self {
        let mut opts = opts.holder(candidate);
        opts.hold_at_least = None;
        let observe_every = (opts.ttl / 5).clamp(Duration::from_millis(10), Duration::from_secs(5));
        Election { lock, name, opts, observe_every, changed: Arc::new(Notify::new()) }
    }

    /// Polls `inspect` this often in [`Election::observe`] (at least 1 ms).
    pub fn observe_every(mut self, every: Duration) -> Self {
        self.observe_every = every.max(Duration::from_millis(1));
        self
    }

    /// The election's lock name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The candidate this election campaigns for.
    pub fn candidate(&self) -> Option<&Holder> {
        self.opts.holder.as_ref()
    }

    /// Waits until this candidate leads (as long as the options' `wait` allows: `Timeout`
    /// after it). Locks are not reentrant: a second campaign of the same candidate while it
    /// leads waits like any other.
    pub async fn campaign(&self) -> Result<Leadership, LockError> {
        let lease = self.lock.acquire(&self.name, &self.opts).await?;
        Ok(self.elected(lease))
    }

    /// One attempt: `Ok(None)` when someone else leads.
    pub async fn try_campaign(&self) -> Result<Option<Leadership>, LockError> {
        Ok(self.lock.try_acquire(&self.name, &self.opts).await?.map(|l| self.elected(l)))
    }

    fn elected(&self, lease: Lease) -> Leadership {
        self.changed.notify_waiters();
        Leadership { lease, changed: Arc::clone(&self.changed) }
    }

    /// Who leads now: the holder of the election's lock (`None`: nobody), with its epoch (the
    /// `token`). One `inspect`, bounded by the options' request timeout.
    pub async fn leader(&self) -> Result<Option<HolderInfo>, LockError> {
        inspect_once(&*self.lock, &self.name, self.opts.request_timeout).await
    }

    /// The leader now, then each change of leader (another holder or another epoch; `None`
    /// while nobody leads). Failures the next poll may not have (`Unavailable`, `Timeout`) are
    /// retried quietly; any other error (`Unsupported` on a backend without `inspect`) is the
    /// stream's last item. See the module docs for how changes are noticed.
    pub fn observe(&self) -> impl Stream<Item = Result<Option<HolderInfo>, LockError>> + Send + 'static {
        let state = Observer {
            lock: Arc::clone(&self.lock),
            name: self.name.clone(),
            every: self.observe_every,
            request_timeout: self.opts.request_timeout,
            changed: Arc::clone(&self.changed),
            feed: None,
            notifies: true,
            last: None,
            done: false,
        };
        futures::stream::unfold(state, Observer::next_change)
    }
}

async fn inspect_once(
    lock: &dyn DistributedLock,
    name: &LockName,
    request_timeout: Duration,
) -> Result<Option<HolderInfo>, LockError> {
    match tokio::time::timeout(request_timeout, lock.inspect(name)).await {
        Ok(r) => r,
        Err(_) => Err(LockError::unavailable(
            lock.backend(),
            format!("inspect did not answer within {request_timeout:?}; the next poll tries again"),
        )),
    }
}

/// Who leads, as far as changes go: the holder id and the epoch.
type LeaderKey = Option<(Option<String>, FencingToken)>;

struct Observer {
    lock: Arc<dyn DistributedLock>,
    name: LockName,
    every: Duration,
    request_timeout: Duration,
    changed: Arc<Notify>,
    /// The backend's change feed, registered before the first read (and again after it ends).
    feed: Option<ChangeFeed>,
    /// False once the backend answered that it does not notify.
    notifies: bool,
    /// The last leader reported; `None` before the first item.
    last: Option<LeaderKey>,
    done: bool,
}

/// What ended an observer's wait.
enum Woken {
    /// The poll timer, a local change, or the feed.
    Changed,
    /// The feed ended (the backend's listener is gone): register another one.
    FeedEnded,
}

/// How long an observer whose feed ended waits before registering another one (a backend
/// that keeps failing must not turn the observer into a busy loop).
const FEED_RETRY: Duration = Duration::from_millis(200);

impl Observer {
    async fn next_change(mut self) -> Option<(Result<Option<HolderInfo>, LockError>, Self)> {
        if self.done {
            return None;
        }
        loop {
            if self.feed.is_none() && self.notifies {
                self.feed = self.register().await;
            }
            // Registered before the read, so a change made while it runs is not missed.
            let changed = Arc::clone(&self.changed);
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(feed) = &mut self.feed {
                feed.mark_seen();
            }
            match inspect_once(&*self.lock, &self.name, self.request_timeout).await {
                Ok(now) => {
                    let key: LeaderKey = now.as_ref().map(|h| (h.holder.clone(), h.token));
                    if self.last.as_ref() != Some(&key) {
                        self.last = Some(key);
                        return Some((Ok(now), self));
                    }
                }
                Err(e) if e.is_retryable() => {
                    tracing::debug!(election = %self.name, error = %e, "observe: inspect failed; polling again");
                }
                Err(e) => {
                    self.done = true;
                    return Some((Err(e), self));
                }
            }
            let (every, feed) = (self.every, &mut self.feed);
            let fed = async {
                let Some(feed) = feed else { return std::future::pending().await };
                if feed.changed().await {
                    Woken::Changed
                } else {
                    Woken::FeedEnded
                }
            };
            let woken = tokio::select! {
                _ = tokio::time::sleep(every) => Woken::Changed,
                _ = notified => Woken::Changed,
                w = fed => w,
            };
            if let Woken::FeedEnded = woken {
                tracing::debug!(election = %self.name, "observe: the change feed ended; registering again");
                self.feed = None;
                tokio::time::sleep(FEED_RETRY.min(self.every)).await;
            }
        }
    }

    /// The backend's change feed, bounded by the request timeout; `None` (poll only) when it
    /// has none (never asked again) or registering failed (the next round tries again).
    async fn register(&mut self) -> Option<ChangeFeed> {
        match tokio::time::timeout(self.request_timeout, self.lock.watch_changes(&self.name)).await {
            Ok(Ok(feed)) => {
                self.notifies = feed.is_some();
                feed
            }
            Ok(Err(e)) => {
                tracing::debug!(election = %self.name, error = %e, "observe: no change feed; polling");
                None
            }
            Err(_) => {
                tracing::debug!(election = %self.name, "observe: registering the change feed timed out; polling");
                None
            }
        }
    }
}

/// This candidate leads while its lease holds. Act as leader only while
/// [`Leadership::is_valid`], pass [`Leadership::epoch`] to everything you write (a deposed
/// leader's late write is then rejected), and stop when [`Leadership::lost`] fires. Dropping it
/// resigns in the background.
#[derive(Debug)]
#[must_use = "a leadership dropped at once resigns at once; bind it for as long as this candidate leads"]
pub struct Leadership {
    lease: Lease,
    changed: Arc<Notify>,
}

impl Leadership {
    /// The epoch: the lease's fencing token, higher than every earlier leader's.
    pub fn epoch(&self) -> FencingToken {
        self.lease.token()
    }

    /// The lease behind it.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Fires once when leadership is lost (the lease could not be renewed, the session ended).
    pub fn lost(&self) -> LostSignal {
        self.lease.lost()
    }

    /// True while the lease is neither lost, resigned, nor past its validity.
    pub fn is_valid(&self) -> bool {
        self.lease.is_valid()
    }

    /// Steps down now: releases the lease, so the next candidate is elected without waiting
    /// for the ttl, and wakes this election's observers. `Err(Lost)` when leadership was lost
    /// before.
    pub async fn resign(self) -> Result<(), LockError> {
        let r = self.lease.release().await;
        self.changed.notify_waiters();
        r
    }
}
