//! [`SqlStore`]: the lease table as a [`LeaseStore`], over whichever [`Dialect`] the URL names.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    Backoff, Capabilities, FencingToken, LeaseModel, LeaseStore, LockError, LockName, OwnerId, ReleaseOutcome,
    RenewOutcome, TryLock, WakeHub, WakeMethod, WakeSubscription,
};
use tokio::time::timeout;

use crate::dialect::{self, Dialect, Upsert};
use crate::error::{classify, to_lock_error, Class};
use crate::inflight::Inflight;
use crate::serial::{OwnerGuard, OwnerLocks};
use crate::SqlOptions;

/// A lease table in PostgreSQL, MySQL/MariaDB or SQLite: the [`LeaseStore`] behind
/// [`SqlLock`](crate::SqlLock). See the crate docs for the algorithm.
pub struct SqlStore {
    pub(crate) dialect: Arc<dyn Dialect>,
    table: String,
    request_timeout: Duration,
    hub: WakeHub,
    /// Renew and release of one lease run one at a time.
    serial: OwnerLocks,
    /// Acquire attempts whose statement may still commit.
    pub(crate) inflight: Inflight,
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
        let hub = WakeHub::new();
        let dialect = dialect::connect(url, &options, hub.clone()).await?;
        SqlStore::over(dialect, options, hub).await
    }

    /// The store over a connected dialect: creates the lease table if missing.
    pub(crate) async fn over(
        dialect: Arc<dyn Dialect>,
        options: SqlOptions,
        hub: WakeHub,
    ) -> Result<SqlStore, LockError> {
        let store = SqlStore {
            dialect,
            table: options.table.clone(),
            request_timeout: options.request_timeout,
            hub,
            serial: OwnerLocks::default(),
            inflight: Inflight::default(),
        };
        let ddl = store.dialect.lease_ddl().to_owned();
        store.create("create the lease table", &options.table, &ddl).await?;
        // Best effort, bounded: a failure resurfaces, with its real error, when a statement runs.
        let _ = timeout(store.request_timeout, store.dialect.warm_up()).await;
        Ok(store)
    }

    pub(crate) fn label(&self) -> &'static str {
        self.dialect.codes().label
    }

    /// Serializes renew and release of one lease (see [`OwnerLocks`]).
    pub(crate) async fn one_at_a_time(&self, owner: OwnerId) -> OwnerGuard<'_> {
        self.serial.lock(owner).await
    }

    /// The lease table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates `table` with `ddl` (a `CREATE TABLE IF NOT EXISTS`) unless it exists: a user
    /// with only the documented privileges then works once someone else made the tables.
    pub(crate) async fn create(&self, what: &str, table: &str, ddl: &str) -> Result<(), LockError> {
        if self.run("look for the lock tables", || self.dialect.table_exists(table)).await? {
            return Ok(());
        }
        let mut tries = 0;
        loop {
            match self.run(what, || self.dialect.execute(ddl)).await {
                Ok(()) => return Ok(()),
                // Concurrent `CREATE TABLE IF NOT EXISTS` can still collide in PostgreSQL's
                // catalog (unique violation on pg_type); the second try sees the table.
                Err(LockError::Backend { .. }) if tries < 3 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs `op`, re-running it on transient conflicts (deadlock, busy), all within
    /// `request_timeout`.
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.run_bounded(what, usize::MAX, op).await
    }

    /// [`SqlStore::run`], re-running at most `conflicts` times on transient conflicts.
    pub(crate) async fn run_bounded<T, F, Fut>(&self, what: &str, conflicts: usize, op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.run_tracked(what, conflicts, op).await.map(|(v, _)| v)
    }

    /// Runs an owner-checked release; whether it freed a live lease of ours. A release whose
    /// connection broke may have committed before the reply was lost: the re-run then finds
    /// nothing of ours, because we freed it. That is a release, not a lost lease.
    pub(crate) async fn run_release<F, Fut>(&self, what: &str, op: F) -> Result<bool, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, sqlx::Error>>,
    {
        let (freed, unknown) = self.run_tracked(what, usize::MAX, op).await?;
        if !freed && unknown {
            tracing::debug!(
                backend = self.label(),
                "{what}: an earlier attempt may have committed; counted as released"
            );
        }
        Ok(freed || unknown)
    }

    /// The retry loop: also says whether an attempt before the last one ended with its outcome
    /// unknown (the connection broke under it).
    async fn run_tracked<T, F, Fut>(&self, what: &str, conflicts: usize, mut op: F) -> Result<(T, bool), LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let codes = self.dialect.codes();
        let mut conflicted = 0;
        let work = async {
            let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
            let mut broken = 0;
            loop {
                match op().await {
                    Ok(v) => return Ok((v, broken > 0)),
                    // Every statement is safe to repeat: acquire and renew are idempotent for one
                    // owner, and a repeated release is told apart by `run_release`.
                    Err(e) if broken < 2 && classify(codes, &e) == Class::Broken => {
                        broken += 1;
                        tracing::debug!(backend = codes.label, error = %e, "{what}: connection broken; retrying on another");
                    }
                    Err(e) if conflicted < conflicts && classify(codes, &e) == Class::Transient => {
                        conflicted += 1;
                        tracing::debug!(backend = codes.label, error = %e, "{what}: transient conflict; retrying");
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    Err(e) => return Err(to_lock_error(codes, what, e)),
                }
            }
        };
        match timeout(self.request_timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(LockError::unavailable(
                codes.label,
                format!("{what} did not answer within {:?} (request_timeout)", self.request_timeout),
            )),
        }
    }

    /// Starts tracking an acquire attempt of `owner` (see [`Inflight`]); the server ends its
    /// statements within the dialect's bound, doubled for a statement still on its way there.
    pub(crate) fn attempt(&self, owner: OwnerId) -> crate::inflight::Attempt<'_> {
        self.inflight.begin(owner, self.dialect.statement_bound().saturating_mul(2))
    }

    /// When an attempt of `owner` may still commit, runs `release` again once it no longer can
    /// (in the background, bounded by the request timeout).
    pub(crate) fn release_again_later<F>(&self, owner: OwnerId, release: F)
    where
        F: Future<Output = Result<bool, sqlx::Error>> + Send + 'static,
    {
        let Some(until) = self.inflight.take(owner) else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (bound, label) = (self.request_timeout, self.label());
        rt.spawn(async move {
            tokio::time::sleep_until(until).await;
            match timeout(bound, release).await {
                Ok(Ok(true)) => tracing::debug!(backend = label, "freed a grant that committed after its acquire was abandoned"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::debug!(backend = label, error = %e, "repeated release failed; the grant expires with its ttl"),
                Err(_) => tracing::debug!(backend = label, "repeated release timed out; the grant expires with its ttl"),
            }
        });
    }

    /// A subscription to wake-ups under `key`, when the dialect sends any.
    pub(crate) fn subscribe_key(&self, key: &str) -> Option<WakeSubscription> {
        self.dialect.listens().then(|| self.hub.subscribe(key))
    }

    /// The token of a grant with fence `fence`.
    pub(crate) fn token(&self, fence: i64) -> Result<TryLock, LockError> {
        match u64::try_from(fence) {
            Ok(t) => Ok(TryLock::Acquired { token: FencingToken(t) }),
            Err(_) => Err(LockError::backend(
                self.label(),
                format!("the lease table holds a negative fence ({fence}); was it edited by hand?"),
            )),
        }
    }
}

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

pub(crate) fn remaining(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

#[async_trait]
impl LeaseStore for SqlStore {
    fn backend(&self) -> &str {
        self.label()
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new();
        caps.wake = if self.dialect.listens() { WakeMethod::Notify } else { WakeMethod::Poll };
        caps.lease_model = LeaseModel::PerLock;
        caps.durable_fencing = self.dialect.durable();
        caps.durable_leases = self.dialect.durable();
        caps.rw_lock = true;
        caps.semaphore = true;
        // Expiry is stored in whole milliseconds of the database clock.
        caps.min_ttl = Duration::from_millis(10);
        caps.max_ttl = Duration::from_secs(365 * 24 * 3600);
        caps
    }

    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        let (n, o, ms) = (name.as_str(), owner.to_hex(), ttl_ms(ttl));
        let attempt = self.attempt(owner);
        let upsert = self.run("acquire", || self.dialect.acquire(n, &o, ms)).await?;
        attempt.finished();
        match upsert {
            Upsert::Granted(fence) => self.token(fence),
            Upsert::Held(rem) => Ok(TryLock::Held { remaining: remaining(rem) }),
        }
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let _serial = self.one_at_a_time(owner).await;
        let (n, o, ms) = (name.as_str(), owner.to_hex(), ttl_ms(ttl));
        let ours = self.run("renew", || self.dialect.renew(n, &o, ms)).await?;
        Ok(if ours { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let _serial = self.one_at_a_time(owner).await;
        let (n, o) = (name.as_str(), owner.to_hex());
        let freed = self.run_release("release", || self.dialect.release(n, &o)).await;
        let (dialect, name, again) = (Arc::clone(&self.dialect), n.to_owned(), o.clone());
        self.release_again_later(owner, async move { dialect.release(&name, &again).await });
        let freed = freed?;
        Ok(if freed { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.subscribe_key(&crate::wake::exclusive(name.as_str())))
    }
}
