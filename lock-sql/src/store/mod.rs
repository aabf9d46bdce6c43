//! [`SqlStore`]: the lease table as a [`LeaseStore`], over whichever [`Dialect`] the URL names.
//!
//! The store is what the exclusive lock's algorithm sees (acquire, renew, release, the waiter
//! queue's bookkeeping) and what the read-write lock and the semaphore borrow (the runner, the
//! tables, the clean-up of abandoned attempts). It never asks which database it talks to: the
//! dialect answers, the [`run::Runner`] re-runs and bounds, [`tables`] sets the tables up, and
//! the background tasks ([`idle`], [`observer`]) work over the dialect alone.

mod idle;
mod observer;
mod run;
mod tables;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    backend::{Claim, LeaseStore, ReleaseOutcome, RenewOutcome, StoreLock, TryLock, WakeSubscription},
    Capabilities, ChangeFeed, FencingToken, HolderInfo, LeaseModel, LockError, LockKind, LockName, OwnerId, WakeMethod,
};
use tokio::time::{timeout, Instant};

use crate::dialect::{self, queue_table, Dialect, Grant, Seen, Upsert, Wakeup, Who};
use crate::inflight::{again_later, Inflight};
use crate::local::Local;
use crate::millis::{remaining, ttl_ms};
use crate::options::SqlOptions;
use crate::queue::{Places, Wait};
use crate::serial::{OwnerGuard, OwnerLocks};
use run::Runner;
use tables::{check_table_len, Tables};

/// The SQL lock: a [`lock_core::DistributedLock`] over a [`SqlStore`].
pub type SqlLock = StoreLock<SqlStore>;

/// A lease table in PostgreSQL, MySQL/MariaDB or SQLite: the [`LeaseStore`] behind
/// [`SqlLock`]. See the crate docs for the algorithm.
pub struct SqlStore {
    pub(crate) dialect: Arc<dyn Dialect>,
    table: String,
    /// Runs every statement within the request timeout (which it holds).
    runner: Runner,
    /// Renew and release of one lease run one at a time.
    serial: OwnerLocks,
    /// Acquire attempts whose statement may still commit.
    pub(crate) inflight: Inflight,
    /// The queue places of this client's waiting acquires.
    places: Places,
    /// The release hints of this process, where the database sends none (`crate::local`).
    local: Option<Local>,
}

impl std::fmt::Debug for SqlStore {
    // Deliberately without the URL: it may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore").field("backend", &self.label()).field("table", &self.table).finish()
    }
}

impl SqlStore {
    /// Connects, creates the lease table if missing, and (PostgreSQL) starts the listener.
    pub async fn connect(url: &str, options: SqlOptions) -> Result<SqlStore, LockError> {
        options.validate()?;
        let dialect = dialect::scheme::connect(url, &options).await?;
        SqlStore::over(dialect, options).await
    }

    /// The store over a connected dialect (from a URL or the application's pool): creates the
    /// lease table if missing.
    pub(crate) async fn over(dialect: Arc<dyn Dialect>, options: SqlOptions) -> Result<SqlStore, LockError> {
        let local = match &dialect.profile().database {
            Some(database) if !dialect.listens() => Some(Local::of(database, &options.table)),
            _ => None,
        };
        let store = SqlStore {
            runner: Runner::new(dialect.codes(), options.request_timeout),
            dialect,
            table: options.table.clone(),
            serial: OwnerLocks::default(),
            inflight: Inflight::default(),
            places: Places::default(),
            local,
        };
        check_table_len(&options.table)?;
        let ddl = store.dialect.lease_ddl().to_owned();
        store.create("create the lease table", &options.table, &ddl).await?;
        let ddl = store.dialect.queue_ddl().to_owned();
        store.create("create the waiter queue table", &queue_table(&options.table), &ddl).await?;
        if let Some(idle) = options.idle_gc_after {
            idle::start(Arc::downgrade(&store.dialect), idle, options.request_timeout);
        }
        // Best effort, bounded: a failure resurfaces, with its real error, when a statement runs.
        let _ = timeout(store.runner.request_timeout(), store.dialect.warm_up()).await;
        Ok(store)
    }

    pub(crate) fn label(&self) -> &'static str {
        self.dialect.codes().label
    }

    /// The error of a statement that served many leases, for each of them: an unanswered one
    /// stays `Unavailable` (outcome unknown), anything else is the backend's error.
    fn for_each(&self, e: &LockError) -> LockError {
        match e {
            LockError::Unavailable { backend, reason, .. } => LockError::unavailable(backend.clone(), reason.clone()),
            other => LockError::backend(self.label(), other.to_string()),
        }
    }

    /// Serializes renew and release of one lease (see [`OwnerLocks`]).
    pub(crate) async fn one_at_a_time(&self, owner: OwnerId) -> OwnerGuard<'_> {
        self.serial.lock(owner).await
    }

    /// The lease table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates `table` with `ddl` unless it exists, then judges it ([`tables`]).
    pub(crate) async fn create(&self, what: &str, table: &str, ddl: &str) -> Result<(), LockError> {
        Tables { runner: &self.runner, dialect: &*self.dialect }.create(what, table, ddl).await
    }

    /// Deletes the rows of names nobody has held for at least `idle` (docs/contract.md §5.7)
    /// and returns how many; what `SqlOptions::idle_gc_after` runs in the background. Tokens
    /// issued afterwards are still above every earlier one: a new row's fence starts at the
    /// database clock in µs, which has passed every fence of a row idle that long.
    pub async fn collect_idle(&self, idle: Duration) -> Result<u64, LockError> {
        let ms = ttl_ms(idle).max(0);
        self.run("collect idle lock rows", || self.dialect.collect_idle(ms)).await
    }

    /// Runs `op` within the request timeout, re-running it on transient conflicts ([`Runner`]).
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.runner.run(what, op).await
    }

    /// [`SqlStore::run`], re-running at most `conflicts` times on transient conflicts.
    pub(crate) async fn run_bounded<T, F, Fut>(&self, what: &str, conflicts: usize, op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.runner.run_bounded(what, conflicts, op).await
    }

    /// Runs an owner-checked release; whether it freed a live lease of ours ([`Runner::run_release`]).
    pub(crate) async fn run_release<F, Fut>(&self, what: &str, op: F) -> Result<bool, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, sqlx::Error>>,
    {
        self.runner.run_release(what, op).await
    }

    /// Starts tracking an acquire attempt of `owner` (see [`Inflight`]); the server ends its
    /// statements within the dialect's bound, doubled for a statement still on its way there.
    pub(crate) fn attempt(&self, owner: OwnerId) -> crate::inflight::Attempt<'_> {
        self.inflight.begin(owner, self.dialect.statement_bound().saturating_mul(2))
    }

    /// When an attempt of `owner` may still commit, runs `release` again in the background,
    /// soon and once more when it no longer can commit ([`again_later`]).
    pub(crate) fn release_again_later<F, Fut>(&self, owner: OwnerId, release: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, sqlx::Error>> + Send + 'static,
    {
        if let Some(until) = self.inflight.take(owner) {
            again_later(until, self.runner.request_timeout(), self.label(), release);
        }
    }

    /// `name` was freed here: a waiter of this process may take it now (`crate::local`).
    fn released(&self, name: &str) {
        if let Some(local) = &self.local {
            local.released(name);
        }
    }

    /// The wait of `owner` (hex) for `name` ended: no release hint is for it any more.
    fn ended_wait(&self, name: &LockName, owner: &str) {
        if let Some(local) = &self.local {
            local.forget(name.as_str(), owner);
        }
    }

    /// A subscription to `wakeup`, when the dialect sends any.
    pub(crate) fn subscribe(&self, wakeup: Wakeup<'_>) -> Option<WakeSubscription> {
        self.dialect.subscribe(wakeup)
    }

    /// The token of a grant with fence `fence`.
    pub(crate) fn token(&self, fence: i64) -> Result<TryLock, LockError> {
        self.fence_token(fence).map(|token| TryLock::Acquired { token })
    }

    /// A fence as a token; an error for a negative one.
    fn fence_token(&self, fence: i64) -> Result<FencingToken, LockError> {
        match u64::try_from(fence) {
            Ok(t) => Ok(FencingToken(t)),
            Err(_) => Err(LockError::backend(
                self.label(),
                format!("the lease table holds a negative fence ({fence}); was it edited by hand?"),
            )),
        }
    }
}

/// How long a round of renewals waits for the leases it renews apart (`SqlStore::renew_many`):
/// an eighth of the ttl (a renewal is sent with two thirds of its validity left, so the other
/// leases of the round keep most of theirs), at most the request timeout.
fn apart_bound(request_timeout: Duration, ttl: Duration) -> Duration {
    request_timeout.min(ttl / 8).max(Duration::from_millis(1))
}

impl SqlStore {
    /// A live row as reported by `inspect` and `list`.
    fn info(&self, seen: Seen) -> Result<HolderInfo, LockError> {
        Ok(HolderInfo::new(seen.name, self.fence_token(seen.fence)?, LockKind::Exclusive)
            .with_holder(seen.holder, seen.metadata)
            .with_remaining(remaining(Some(seen.remaining_ms))))
    }
}

#[async_trait]
impl LeaseStore for SqlStore {
    fn backend(&self) -> &str {
        self.label()
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new();
        caps.wake = if self.dialect.listens() { WakeMethod::Notify } else { WakeMethod::Poll };
        caps.notify_changes = self.dialect.listens();
        caps.lease_model = LeaseModel::PerLock;
        caps.durable_fencing = self.dialect.durable();
        caps.durable_leases = self.dialect.durable();
        caps.rw_lock = true;
        caps.semaphore = true;
        caps.inspect = true;
        caps.list = true;
        // Waiters queue in the table (queue.rs).
        caps.fifo = true;
        // Expiry is stored in whole milliseconds of the database clock.
        caps.min_ttl = Duration::from_millis(10);
        caps.max_ttl = Duration::from_secs(365 * 24 * 3600);
        caps
    }

    async fn try_lock(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        let o = claim.owner.to_hex();
        let who = Who { holder: claim.holder_id(), metadata: claim.metadata() };
        let wait = if waiting {
            let first = self.places.touch(claim.owner);
            let lifetime = crate::queue::lifetime(self.max_poll_interval(claim.ttl));
            let refresh = self.places.refresh_due(claim.owner, lifetime, Instant::now());
            Wait::Queue { lifetime_ms: ttl_ms(lifetime), seq: self.places.get(claim.owner), first, refresh }
        } else {
            Wait::No
        };
        let handoffs = if waiting { self.dialect.handoffs() } else { None };
        if let Some(h) = handoffs {
            if h.claim_due(&o) {
                // A grant was announced (dialect/postgres/handoff.rs): only a hint. The claim confirms it
                // with the database, whose answer (fence, validity from this statement's send)
                // is the lease; nothing confirmed, and the acquire statement runs as usual.
                let attempt = self.attempt(claim.owner);
                let (n, ms) = (claim.name.as_str(), ttl_ms(claim.ttl));
                // Trace events time the hand-off's steps (release, grant heard, claim; docs.md).
                tracing::trace!(owner = %o, "claim sent");
                let claimed = self.run("claim a hand-off", || self.dialect.claim(n, &o, ms)).await?;
                tracing::trace!(owner = %o, ok = claimed.is_some(), "claim answered");
                attempt.finished();
                if let Some(fence) = claimed {
                    self.ended_wait(claim.name, &o);
                    self.places.granted(claim.owner);
                    h.forget(&o);
                    return self.token(fence);
                }
            } else if let Some(rem) = h.recent(&o, Instant::now()) {
                return Ok(TryLock::Held { remaining: rem });
            }
            h.expect(&o);
        }
        let attempt = self.attempt(claim.owner);
        let grant = Grant { name: claim.name.as_str(), owner: &o, ttl_ms: ttl_ms(claim.ttl), who, wait };
        let sent = Instant::now();
        tracing::trace!(owner = %o, "acquire sent");
        let upsert = self.run("acquire", || self.dialect.acquire(grant)).await?;
        tracing::trace!(owner = %o, granted = matches!(upsert, Upsert::Granted(_)), "acquire answered");
        attempt.finished();
        match upsert {
            Upsert::Granted(fence) => {
                self.ended_wait(claim.name, &o);
                self.places.granted(claim.owner);
                if let Some(h) = handoffs {
                    h.forget(&o);
                }
                self.token(fence)
            }
            Upsert::Held { remaining: rem, seq, seen, ahead } => {
                let mut rem = remaining(rem);
                if let (Some(h), Some(_)) = (handoffs, seq) {
                    h.queued(&o, rem, sent);
                }
                if rem.is_none() && seen.is_some() && self.dialect.listens() {
                    // Free (or expired) but owed to a waiter queued before us: hand it to the
                    // head now rather than wait for the head's own timer (dialect/postgres/handoff.rs).
                    let (n, a) = (claim.name.as_str(), "");
                    if let Err(e) = self.run("hand the lock on", || self.dialect.hand_on(n, a)).await {
                        tracing::debug!(backend = self.label(), error = %e, "handing a free lock on failed");
                    }
                }
                if waiting && seq.is_none() && self.dialect.listens() {
                    // Not queued (its snapshot missed a concurrent commit): no hand-off names us.
                    rem = Some(Duration::from_millis(1));
                }
                if let Some(seq) = seq {
                    let poll = self.places.set(claim.owner, seq, ahead, wait.refresh().then_some(sent));
                    // Nothing tells a polling waiter that its turn came: a queued one polls by
                    // its place, or the queue turns each hand-off into a back-off interval.
                    if !self.dialect.listens() {
                        rem = Some(rem.map_or(poll, |r| r.min(poll)));
                    }
                }
                Ok(TryLock::Held { remaining: rem })
            }
        }
    }

    /// Deletes the waiter's entry, then (where releases hand off) releases a grant it may have
    /// received meanwhile and hands the lock on. The place is forgotten only once both ran: a
    /// clean-up cut short (the bounded inline one at a deadline) is finished by the background
    /// one, which would otherwise find nothing to do while a grant to a waiter gone stays
    /// taken. An attempt that may still land (cancelled in flight) can re-queue the waiter or
    /// grant it after this: the release repeats itself (`release`), and so does the leave.
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        let (n, o) = (name.as_str(), owner.to_hex());
        if let Some(h) = self.dialect.handoffs() {
            h.forget(&o);
        }
        self.ended_wait(name, &o);
        if !self.places.has(owner) {
            return Ok(());
        }
        self.run("leave the waiter queue", || self.dialect.leave_queue(n, &o)).await?;
        // A release that started before the delete may have granted us the lease: release it
        // and hand it on (dialect/postgres/handoff.rs). No release that starts after the delete grants us.
        self.run("hand the lock on", || self.dialect.hand_on(n, &o)).await?;
        self.places.take(owner);
        if let Some(until) = self.inflight.take_leave(owner) {
            let (dialect, name) = (Arc::clone(&self.dialect), n.to_owned());
            again_later(until, self.runner.request_timeout(), self.label(), move || {
                let (dialect, name, o) = (Arc::clone(&dialect), name.clone(), o.clone());
                async move {
                    dialect.leave_queue(&name, &o).await?;
                    dialect.hand_on(&name, &o).await?;
                    // Every repeat runs: a late attempt leaves no trace to tell that it landed.
                    Ok(false)
                }
            });
        }
        Ok(())
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let _serial = self.one_at_a_time(owner).await;
        let (n, o, ms) = (name.as_str(), owner.to_hex(), ttl_ms(ttl));
        let ours = self.run("renew", || self.dialect.renew(n, &o, ms)).await?;
        Ok(if ours { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    /// Not a renewal, which never shortens a lease: its own statement sets the end `d`
    /// from now.
    async fn release_after(&self, name: &LockName, owner: OwnerId, d: Duration) -> Result<ReleaseOutcome, LockError> {
        let _serial = self.one_at_a_time(owner).await;
        let (n, o, ms) = (name.as_str(), owner.to_hex(), ttl_ms(d));
        let ours = self.run("release after", || self.dialect.end_after(n, &o, ms)).await?;
        Ok(if ours { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    /// One statement for a round of renewals (lock-core gathers them), and one lease's trouble
    /// delays no other's. Each lease is still one at a time with its own
    /// release, as in `renew`, but a round takes the turns it can have at once: a lease whose
    /// turn is taken (its own renewal or release in flight, maybe hanging on a row someone else
    /// locked) is renewed apart. So is one the round's statement did not renew (PostgreSQL skips
    /// rows locked by another transaction instead of waiting for them; elsewhere: no longer
    /// ours, which its own renewal confirms). Those run side by side after the round's
    /// statement, each bounded by `apart_bound`: the round's answers wait at most that long
    /// for them, and one that did not answer is retried by the watchdog.
    async fn renew_many(&self, leases: &[(LockName, OwnerId)], ttl: Duration) -> Vec<Result<RenewOutcome, LockError>> {
        let mut owners: Vec<OwnerId> = leases.iter().map(|(_, owner)| *owner).collect();
        owners.sort_by_key(|owner| owner.as_u128());
        owners.dedup();
        let mut serial = Vec::with_capacity(owners.len());
        let mut busy = std::collections::HashSet::new();
        for owner in owners {
            match self.serial.try_lock(owner) {
                Some(turn) => serial.push(turn),
                None => {
                    busy.insert(owner);
                }
            }
        }
        let hex: Vec<(&str, String, OwnerId)> =
            leases.iter().map(|(name, owner)| (name.as_str(), owner.to_hex(), *owner)).collect();
        let mut unique: Vec<(&str, &str)> = hex
            .iter()
            .filter(|(_, _, owner)| !busy.contains(owner))
            .map(|(name, owner, _)| (*name, owner.as_str()))
            .collect();
        unique.sort_unstable();
        unique.dedup();
        let ms = ttl_ms(ttl);
        // One lease alone takes the single-row statement, prepared at connect: a statement the
        // connection has not prepared yet costs one more round trip, which a slow link's
        // renewal cannot spare.
        let ours = match unique.as_slice() {
            [] => Ok(Vec::new()),
            [(name, owner)] => self.run("renew", || self.dialect.renew(name, owner, ms)).await.map(|o| vec![o]),
            _ => self.run("renew", || self.dialect.renew_many(&unique, ms)).await,
        };
        drop(serial);
        // Renewed apart: the busy ones, and those a round of several did not renew.
        let mut apart: Vec<(&str, &str, OwnerId)> = hex
            .iter()
            .filter(|(name, owner, id)| {
                busy.contains(id)
                    || (unique.len() > 1
                        && ours.as_ref().is_ok_and(|ours| {
                            unique.binary_search(&(*name, owner.as_str())).is_ok_and(|i| ours.get(i) != Some(&true))
                        }))
            })
            .map(|(name, owner, id)| (*name, owner.as_str(), *id))
            .collect();
        apart.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        apart.dedup_by(|a, b| (a.0, a.1) == (b.0, b.1));
        let bound = apart_bound(self.runner.request_timeout(), ttl);
        let alone = futures::future::join_all(apart.iter().map(|(name, owner, id)| async move {
            let work = async {
                let _serial = self.one_at_a_time(*id).await;
                self.run("renew", || self.dialect.renew(name, owner, ms)).await
            };
            timeout(bound, work).await.unwrap_or_else(|_| {
                Err(LockError::unavailable(
                    self.label(),
                    format!("a renewal apart from its round did not answer within {bound:?}; it is retried"),
                ))
            })
        }))
        .await;
        hex.iter()
            .map(|(name, owner, _)| {
                if let Ok(i) = apart.binary_search_by(|(n, o, _)| (*n, *o).cmp(&(*name, owner.as_str()))) {
                    return match &alone[i] {
                        Ok(true) => Ok(RenewOutcome::Renewed),
                        Ok(false) => Ok(RenewOutcome::NotOwner),
                        Err(e) => Err(self.for_each(e)),
                    };
                }
                match &ours {
                    Ok(ours) => {
                        let renewed =
                            unique.binary_search(&(*name, owner.as_str())).is_ok_and(|i| ours.get(i) == Some(&true));
                        Ok(if renewed { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
                    }
                    Err(e) => Err(self.for_each(e)),
                }
            })
            .collect()
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let _serial = self.one_at_a_time(owner).await;
        let (n, o, waited) = (name.as_str(), owner.to_hex(), self.places.waited(owner));
        let d = &self.dialect;
        tracing::trace!(owner = %o, waited, "release sent");
        let freed = self
            .run_release("release", || async {
                if waited {
                    d.release(n, &o).await
                } else {
                    d.release_unqueued(n, &o).await
                }
            })
            .await;
        let (dialect, name, again) = (Arc::clone(&self.dialect), n.to_owned(), o.clone());
        self.release_again_later(owner, move || {
            let (dialect, name, again) = (Arc::clone(&dialect), name.clone(), again.clone());
            async move { dialect.release(&name, &again).await }
        });
        let freed = freed?;
        tracing::trace!(owner = %o, "release answered");
        if freed {
            self.released(n);
        }
        Ok(if freed { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.subscribe(Wakeup::Exclusive(name.as_str())))
    }

    /// PostgreSQL: grants and releases of an observed name notify (store/observer.rs); the
    /// other databases do not notify.
    async fn watch_changes(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        if !self.dialect.listens() {
            return Ok(None);
        }
        observer::watch(&self.runner, &self.dialect, name.as_str()).await
    }

    /// A release wakes the head of the queue only, by its owner id (queue.rs); where the
    /// database cannot notify, a release of this process wakes its earliest waiter of this
    /// process (`crate::local`).
    async fn subscribe_waiter(&self, name: &LockName, owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        let o = owner.to_hex();
        if let Some(local) = &self.local {
            let place = self.places.get(owner).unwrap_or(i64::MAX);
            return Ok(Some(local.subscribe(name.as_str(), &o, place)));
        }
        Ok(self.subscribe(Wakeup::Waiter(&o)))
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        let seen = self.run("inspect", || self.dialect.inspect(name.as_str())).await?;
        seen.map(|s| self.info(s)).transpose()
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.run("list", || self.dialect.list(prefix, limit)).await?;
        rows.into_iter().map(|s| self.info(s)).collect()
    }

    /// Reads the live grant, then frees exactly that grant (fence-checked, not owner-checked):
    /// a grant made in between is not touched, and the read is repeated.
    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        let n = name.as_str();
        for _ in 0..3 {
            let Some(seen) = self.run("inspect", || self.dialect.inspect(n)).await? else { return Ok(None) };
            if self.run("force release", || self.dialect.force_release(n, seen.fence)).await? {
                self.released(n);
                return self.fence_token(seen.fence).map(Some);
            }
        }
        Err(LockError::unavailable(
            self.label(),
            format!("{name} changed hands under three force releases in a row; try again"),
        ))
    }
}
