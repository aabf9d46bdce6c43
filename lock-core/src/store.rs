//! The shared acquire machinery for backends that keep one lease entry per lock name (Redis,
//! SQL): a backend implements [`LeaseStore`] — one-shot try, renew, release, and optionally
//! wake-up subscriptions — and [`StoreLock`] turns it into a [`DistributedLock`] with waiting,
//! back-off, timeouts, cancel-safety and the [`Lease`] watchdog.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{timeout, Instant};

use crate::renewals::Renewals;
use crate::{
    AcquireOptions, Backoff, Capabilities, ChangeFeed, DistributedLock, FencingToken, Holder, HolderInfo, Lease,
    LeaseGrant, LeaseHandle, LockError, LockName, OwnerId, ReleaseOutcome, RenewOutcome, WakeSubscription,
};

/// What one acquire attempt asks for: the name, the owner id, the lease time and the
/// acquirer's identity ([`AcquireOptions::holder`], docs/contract.md §5.6).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Claim<'a> {
    /// The lock name.
    pub name: &'a LockName,
    /// The random owner id of this acquisition.
    pub owner: OwnerId,
    /// The lease time asked for.
    pub ttl: Duration,
    /// Who is acquiring, to be stored with the lease where the store can.
    pub holder: Option<&'a Holder>,
}

impl<'a> Claim<'a> {
    /// A claim without a holder identity.
    pub fn new(name: &'a LockName, owner: OwnerId, ttl: Duration) -> Self {
        Claim { name, owner, ttl, holder: None }
    }

    /// Attaches the acquirer's identity.
    pub fn holder(mut self, holder: Option<&'a Holder>) -> Self {
        self.holder = holder;
        self
    }

    /// The holder id, if any.
    pub fn holder_id(&self) -> Option<&'a str> {
        self.holder.map(Holder::id)
    }

    /// The holder's metadata, if any.
    pub fn metadata(&self) -> Option<&'a str> {
        self.holder.and_then(Holder::metadata)
    }
}

/// The answer of one acquire attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TryLock {
    /// Granted (or already ours: attempts with the same owner are idempotent).
    Acquired {
        /// The new fencing token.
        token: FencingToken,
    },
    /// Someone else holds it.
    Held {
        /// The holder's remaining lease, when the server says: waiters sleep no longer than this.
        remaining: Option<Duration>,
    },
}

/// The primitives of a lease-entry backend. Every method is one owner-checked, atomic server
/// operation; none waits for the lock.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// The backend label (`redis`, `postgres`, …).
    fn backend(&self) -> &str;

    /// What the backend promises.
    fn capabilities(&self) -> Capabilities;

    /// One attempt: take the lock for `owner` if it is free, expired, or already `owner`'s.
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError>;

    /// Extend `owner`'s lease to `now + ttl` if `owner` still holds it.
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError>;

    /// [`LeaseStore::renew`] for many leases at once, the answers in the order of `leases`
    /// (the renewals of many held leases are gathered into rounds, see `renewals.rs`). By
    /// default the renewals are sent side by side, one request each; stores that can do it in
    /// one statement or one round trip override this.
    async fn renew_many(&self, leases: &[(LockName, OwnerId)], ttl: Duration) -> Vec<Result<RenewOutcome, LockError>> {
        futures::future::join_all(leases.iter().map(|(name, owner)| self.renew(name, *owner, ttl))).await
    }

    /// Free the lock if `owner` still holds it, and wake waiters.
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError>;

    /// One attempt made while `acquire` waits (the same owner re-tries until granted or the
    /// wait ends). A store may leave something behind here that its next attempts refresh —
    /// e.g. a writer's claim that holds back new readers so writers are not starved — and take
    /// it back in [`LeaseStore::abandon`]. By default the same as [`LeaseStore::try_lock`].
    async fn try_lock_waiting(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.try_lock(name, owner, ttl).await
    }

    /// A wait by `owner` ended without a grant (time-out, error, dropped future): withdraw what
    /// its attempts left behind (owner-checked). Runs in the background; by default nothing.
    async fn abandon(&self, _name: &LockName, _owner: OwnerId) -> Result<(), LockError> {
        Ok(())
    }

    /// One attempt for `claim` (`waiting`: made while `acquire` waits). Stores that keep the
    /// holder's identity with the lease (`Capabilities::inspect`) override this; by default the
    /// identity is not stored and the attempt is [`LeaseStore::try_lock`] (or
    /// [`LeaseStore::try_lock_waiting`]).
    async fn try_claim(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        if waiting {
            self.try_lock_waiting(claim.name, claim.owner, claim.ttl).await
        } else {
            self.try_lock(claim.name, claim.owner, claim.ttl).await
        }
    }

    /// Who holds `name` now (docs/contract.md §5.6); `Unsupported` by default.
    async fn inspect(&self, _name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        Err(LockError::Unsupported { backend: self.backend().to_owned(), feature: "inspect" })
    }

    /// The held names starting with `prefix`, at most `limit`, in name order; `Unsupported` by
    /// default.
    async fn list(&self, _prefix: &str, _limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        Err(LockError::Unsupported { backend: self.backend().to_owned(), feature: "list" })
    }

    /// Frees `name` whoever holds it, keeping its fence (docs/contract.md §5.6,
    /// [`DistributedLock::force_release`]): the freed holder's token, `None` when it was free.
    /// `Unsupported` by default.
    async fn force_release(&self, _name: &LockName) -> Result<Option<FencingToken>, LockError> {
        Err(LockError::Unsupported { backend: self.backend().to_owned(), feature: "force_release" })
    }

    /// Subscribes to release hints for `name` (before the next attempt, so no release is
    /// missed). `None` means the backend polls.
    async fn subscribe(&self, _name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(None)
    }

    /// Subscribes the wait of `owner` to release hints for `name`: a store that hands the lock
    /// to one queued waiter wakes that waiter only. By default [`LeaseStore::subscribe`].
    async fn subscribe_waiter(&self, name: &LockName, _owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        self.subscribe(name).await
    }

    /// A feed of changes of `name`'s holder for observers ([`DistributedLock::watch_changes`]);
    /// `None` (the default) when the backend does not notify.
    async fn watch_changes(&self, _name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        Ok(None)
    }

    /// Longest sleep between polls (and between fallback re-tries of notified waiters).
    fn max_poll_interval(&self, ttl: Duration) -> Duration {
        (ttl / 4).clamp(Duration::from_millis(20), Duration::from_millis(500))
    }
}

/// Turns a [`LeaseStore`] into a [`DistributedLock`].
pub struct StoreLock<S> {
    store: Arc<S>,
    renewals: Arc<Renewals>,
}

impl<S> Clone for StoreLock<S> {
    fn clone(&self) -> Self {
        StoreLock { store: Arc::clone(&self.store), renewals: Arc::clone(&self.renewals) }
    }
}

impl<S: LeaseStore> StoreLock<S> {
    /// Wraps a store.
    pub fn new(store: S) -> Self {
        StoreLock::from_arc(Arc::new(store))
    }

    /// Wraps a store that other lock kinds share (one backend handle serving every kind).
    pub fn from_arc(store: Arc<S>) -> Self {
        StoreLock { renewals: Arc::new(Renewals::new(Arc::clone(&store))), store }
    }

    /// The wrapped store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    fn lease(
        &self,
        name: &LockName,
        owner: OwnerId,
        token: FencingToken,
        started: Instant,
        opts: &AcquireOptions,
    ) -> Lease {
        let handle = Arc::new(StoreLeaseHandle {
            store: Arc::clone(&self.store),
            renewals: Arc::clone(&self.renewals),
            name: name.clone(),
            owner,
        });
        let grant = LeaseGrant::new(name.clone(), token, owner, started, handle)
            .with_clock_offset(self.store.capabilities().max_clock_offset);
        Lease::new(grant, opts)
    }

    /// One attempt bounded by `bound`; `None` when the server did not answer within it (the
    /// outcome is then unknown: the attempt may have been applied).
    async fn attempt(&self, claim: &Claim<'_>, bound: Duration, waiting: bool) -> Option<Result<TryLock, LockError>> {
        timeout(bound, self.store.try_claim(claim, waiting)).await.ok()
    }

    /// Subscribes to release hints; `None` (poll) when the backend has none or the subscription fails.
    async fn subscribe(&self, name: &LockName, owner: OwnerId, opts: &AcquireOptions) -> Option<WakeSubscription> {
        match timeout(opts.request_timeout, self.store.subscribe_waiter(name, owner)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(lock = %name, error = %e, "subscribe failed; polling");
                None
            }
            Err(_) => None,
        }
    }

    fn no_answer(&self, bound: Duration) -> LockError {
        LockError::unavailable(self.store.backend(), format!("acquire attempt did not answer within {bound:?}"))
    }
}

/// The longest sleep between two polls of a waiter that has waited `waited`: `max_poll` at
/// first, falling linearly to [`MIN_POLL`] once it has waited `STARVATION_BOUND × max_poll`.
/// A long waiter thus ends up polling as often as any newcomer, so newcomers' quick polls stop
/// winning every release after at most `STARVATION_BOUND × max_poll` of waiting (4 s with the
/// 500 ms maximum). Strict arrival order needs a backend that declares `fifo`.
pub(crate) fn poll_cap(waited: Duration, max_poll: Duration) -> Duration {
    let horizon = max_poll.saturating_mul(STARVATION_BOUND);
    if horizon.is_zero() || waited >= horizon {
        return MIN_POLL.min(max_poll);
    }
    let left = (horizon - waited).as_secs_f64() / horizon.as_secs_f64();
    max_poll.mul_f64(left).max(MIN_POLL).min(max_poll)
}

/// The longest a wait that timed out spends withdrawing its traces before it answers.
const ABANDON_INLINE: Duration = Duration::from_millis(200);

/// The first (and shortest) poll interval, the one a newcomer uses.
const MIN_POLL: Duration = Duration::from_millis(5);

/// How many `max_poll` intervals of waiting it takes for a polling waiter to poll as often as a
/// newcomer (see [`poll_cap`]).
const STARVATION_BOUND: u32 = 8;

struct StoreLeaseHandle<S> {
    store: Arc<S>,
    renewals: Arc<Renewals>,
    name: LockName,
    owner: OwnerId,
}

#[async_trait]
impl<S: LeaseStore> LeaseHandle for StoreLeaseHandle<S> {
    async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.renewals.renew(&self.name, self.owner, ttl).await
    }
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.store.release(&self.name, self.owner).await
    }
    /// Its own request, not a renewal round: a round bounds itself by the ttl it renews for,
    /// which here is what is left of `hold_at_least` (a few ms near `t0 + d`) and shorter than
    /// one round trip, so a release there answered `Unavailable`. The release path bounds it.
    async fn release_after(&self, after: Duration) -> Result<ReleaseOutcome, LockError> {
        Ok(match self.store.renew(&self.name, self.owner, after).await? {
            RenewOutcome::Renewed => ReleaseOutcome::Released,
            RenewOutcome::NotOwner => ReleaseOutcome::NotOwner,
        })
    }
}

/// Cleans up in the background after an attempt or a wait that did not end in a lease: an
/// attempt whose outcome is unknown (lost reply, cancelled future) is released, so a grant
/// nobody knows about never outlives its ttl; a wait that ended without a grant is abandoned
/// ([`LeaseStore::abandon`]).
struct PendingRelease<S: LeaseStore> {
    store: Arc<S>,
    name: LockName,
    owner: OwnerId,
    /// An attempt is in flight, or its outcome is unknown.
    armed: bool,
    /// A wait is in progress and has no grant yet.
    waiting: bool,
    timeout: Duration,
}

impl<S: LeaseStore> PendingRelease<S> {
    /// For a wait (`waiting`), armed by each attempt in turn; for a single try, armed at once:
    /// its one attempt is in flight from the start.
    fn new(store: &Arc<S>, name: &LockName, owner: OwnerId, timeout: Duration, waiting: bool) -> Self {
        PendingRelease { store: Arc::clone(store), name: name.clone(), owner, armed: !waiting, waiting, timeout }
    }
}

impl<S: LeaseStore> Drop for PendingRelease<S> {
    fn drop(&mut self) {
        if !self.armed && !self.waiting {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (store, name, owner, t) = (Arc::clone(&self.store), self.name.clone(), self.owner, self.timeout);
            let (release, abandon) = (self.armed, self.waiting);
            rt.spawn(async move {
                if release {
                    let _ = timeout(t, store.release(&name, owner)).await;
                }
                if abandon {
                    let _ = timeout(t, store.abandon(&name, owner)).await;
                }
            });
        }
    }
}

#[async_trait]
impl<S: LeaseStore> DistributedLock for StoreLock<S> {
    fn backend(&self) -> &str {
        self.store.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        self.store.inspect(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        self.store.list(prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        self.store.force_release(name).await
    }

    async fn watch_changes(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        self.store.watch_changes(name).await
    }

    #[tracing::instrument(name = "dlock.try_acquire", level = "debug", skip_all, fields(backend = self.store.backend(), lock = %name))]
    async fn try_acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        opts.validate(&self.store.capabilities())?;
        let owner = OwnerId::random();
        let mut pending = PendingRelease::new(&self.store, name, owner, opts.request_timeout, false);
        let started = Instant::now();
        let result = self
            .attempt(&Claim::new(name, owner, opts.ttl).holder(opts.holder.as_ref()), opts.request_timeout, false)
            .await
            .unwrap_or_else(|| Err(self.no_answer(opts.request_timeout)));
        match result {
            Ok(TryLock::Acquired { token }) => {
                pending.armed = false;
                Ok(Some(self.lease(name, owner, token, started, opts)))
            }
            Ok(TryLock::Held { .. }) => {
                pending.armed = false;
                Ok(None)
            }
            Err(e) => {
                // Outcome unknown: `pending` releases in the background on drop.
                pending.armed = e.outcome_unknown();
                Err(e)
            }
        }
    }

    #[tracing::instrument(name = "dlock.acquire", level = "debug", skip_all, fields(backend = self.store.backend(), lock = %name))]
    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        let caps = self.store.capabilities();
        opts.validate(&caps)?;
        // One owner id for the whole wait: attempts are idempotent for the same owner, so a
        // retry after a lost reply gets the grant back instead of waiting on itself.
        let owner = OwnerId::random();
        let mut pending = PendingRelease::new(&self.store, name, owner, opts.request_timeout, true);
        let result = self.wait(name, owner, opts, &mut pending).await;
        if matches!(result, Err(LockError::Timeout { .. })) && pending.waiting {
            // Withdraw what the wait left behind (a queue place) before answering, so the
            // caller's next step never finds its own stale place ahead of it. The server just
            // answered "busy", so this is one quick round trip; one slower than
            // `ABANDON_INLINE`, any other error and a dropped future leave it to `pending`
            // (an unreachable server must not stretch the caller's wait).
            let bound = opts.request_timeout.min(ABANDON_INLINE);
            if let Ok(Ok(())) = timeout(bound, self.store.abandon(name, owner)).await {
                pending.waiting = false;
            }
        }
        result
    }
}

impl<S: LeaseStore> StoreLock<S> {
    /// The wait of [`DistributedLock::acquire`]: attempts until granted, the deadline, or an
    /// error that is not retried.
    async fn wait(
        &self,
        name: &LockName,
        owner: OwnerId,
        opts: &AcquireOptions,
        pending: &mut PendingRelease<S>,
    ) -> Result<Lease, LockError> {
        let begun = Instant::now();
        let deadline = opts.wait.deadline(begun);
        let claim = Claim::new(name, owner, opts.ttl).holder(opts.holder.as_ref());
        let max_poll = self.store.max_poll_interval(opts.ttl);
        let mut backoff = Backoff::new(MIN_POLL, max_poll);
        let mut error_backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
        let mut subscription: Option<WakeSubscription> = None;
        let mut subscribed = false;
        let mut failures = 0u32;
        // Whether the server answered "busy" during this wait: at the deadline that makes the
        // answer `Timeout`, even when the last attempt was cut short (docs/contract.md §4).
        let mut seen_busy = false;
        let mut first = true;
        loop {
            let now = Instant::now();
            let timed_out = || LockError::Timeout { name: name.as_str().to_owned(), waited: now - begun };
            let bound = match deadline {
                Some(d) if d > now => opts.request_timeout.min(d - now).max(Duration::from_millis(1)),
                // Past the deadline only the first attempt (NoWait) is made.
                Some(_) if !first => return Err(timed_out()),
                _ => opts.request_timeout,
            };
            first = false;
            pending.armed = true;
            let started = Instant::now();
            let answer = self.attempt(&claim, bound, true).await;
            let remaining = match answer {
                Some(Ok(TryLock::Acquired { token })) => {
                    pending.armed = false;
                    pending.waiting = false;
                    tracing::debug!(token = token.0, waited_ms = begun.elapsed().as_millis() as u64, "acquired");
                    return Ok(self.lease(name, owner, token, started, opts));
                }
                Some(Ok(TryLock::Held { remaining })) => {
                    pending.armed = false;
                    failures = 0;
                    seen_busy = true;
                    if !subscribed {
                        // Free locks cost one round trip: subscribe only once the lock is busy,
                        // then try again before waiting, so a release in between is not missed;
                        // unless the subscription already heard everything since before this
                        // attempt was sent (`WakeSubscription::live_since`).
                        subscribed = true;
                        subscription = self.subscribe(name, owner, opts).await;
                        let heard_all = subscription.as_ref().and_then(WakeSubscription::live_since);
                        if subscription.is_some() && heard_all.is_none_or(|since| since > started) {
                            continue;
                        }
                    }
                    remaining
                }
                // No answer within the bound; the attempt may have been applied (`pending` stays
                // armed and releases it unless a later attempt answers). An attempt the caller's
                // deadline cut well short of its request timeout, with no failure before it, is the
                // wait ending: `Timeout`. `Unavailable` is for a backend that failed during this
                // wait or did not answer within (about) a whole request timeout; the tenth of
                // slack absorbs the time spent before the attempt.
                None if deadline.is_some_and(|d| Instant::now() >= d) => {
                    let cut_short = bound < opts.request_timeout.mul_f64(0.9) && failures == 0;
                    return Err(if seen_busy || cut_short { timed_out() } else { self.no_answer(bound) });
                }
                Some(Err(e)) if !e.is_retryable() => {
                    pending.armed = e.outcome_unknown();
                    return Err(e);
                }
                other => {
                    let e = match other {
                        Some(Err(e)) => e,
                        _ => self.no_answer(bound),
                    };
                    let retry = match deadline {
                        // Waiting forever means forever: transient errors are retried with back-off.
                        None => true,
                        Some(d) => Instant::now() < d && failures < 3,
                    };
                    if !retry {
                        return Err(if seen_busy && deadline.is_some_and(|d| Instant::now() >= d) {
                            timed_out()
                        } else {
                            e
                        });
                    }
                    failures = failures.saturating_add(1);
                    tracing::debug!(lock = %name, error = %e, failures, "acquire attempt failed; retrying");
                    let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
                    tokio::time::sleep(error_backoff.next_delay().min(left)).await;
                    continue;
                }
            };
            error_backoff.reset(Duration::from_millis(10));
            let now = Instant::now();
            let left = match deadline {
                Some(d) if now >= d => {
                    return Err(LockError::Timeout { name: name.as_str().to_owned(), waited: now - begun });
                }
                Some(d) => d - now,
                None => Duration::MAX,
            };
            // Sleep no longer than the holder's remaining lease (it may vanish without a word).
            let until_expiry = remaining.map(|r| r.saturating_add(Duration::from_millis(1))).unwrap_or(Duration::MAX);
            match &subscription {
                Some(sub) => {
                    let fallback = until_expiry.min(max_poll.saturating_mul(4)).min(left);
                    tokio::select! {
                        _ = sub.woken() => backoff.reset(MIN_POLL),
                        _ = tokio::time::sleep(fallback) => {}
                    }
                }
                None => {
                    let cap = poll_cap(now - begun, max_poll);
                    let nap = backoff.next_delay().min(cap).min(until_expiry).min(left);
                    tokio::time::sleep(nap).await;
                }
            }
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
