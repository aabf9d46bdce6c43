//! The object-safe lock trait every backend implements, and `run_locked`.

use std::future::Future;

use async_trait::async_trait;

use crate::{
    AcquireOptions, Capabilities, ChangeFeed, FencingToken, HolderInfo, Lease, LeaseObserver, LockError, LockName,
};

/// What a lock service says about itself, whatever kind of lock it serves: the supertrait of
/// [`DistributedLock`], [`DistributedRwLock`] and [`DistributedSemaphore`], so that a backend
/// serving several kinds answers once, and the same for all of them.
pub trait LockService: Send + Sync + 'static {
    /// A short label for the backend: `memory`, `sqlite`, `postgres`, `mysql`, `redis`, `redlock`, `zookeeper`.
    fn backend(&self) -> &str;

    /// What this backend promises, for every kind it serves (`rw_lock`, `semaphore` say which).
    fn capabilities(&self) -> Capabilities;
}

/// An exclusive distributed lock service (docs/contract.md §4). Object safe: the facade hands out
/// `Arc<dyn DistributedLock>`.
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, DistributedLock, LockName, MemoryLock};
/// let lock = MemoryLock::new();
/// let name = LockName::new("invoices")?;
/// let opts = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(1));
/// let lease = lock.acquire(&name, &opts).await?;
/// assert!(lock.try_acquire(&name, &opts).await?.is_none());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait DistributedLock: LockService {
    /// One attempt: `Ok(None)` when someone else holds the lock. `options.wait` is ignored.
    async fn try_acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError>;

    /// Waits until granted or until `options.wait` elapses (`Timeout`). Cancel-safe: dropping
    /// the future leaves no lock held beyond its ttl and no queue entry behind.
    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError>;

    /// Who holds `name` now (docs/contract.md §5.6): `Ok(None)` when nobody does. One read, no
    /// lock taken. `Unsupported` unless `capabilities().inspect`.
    async fn inspect(&self, _name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        Err(LockError::unsupported(self.backend(), "inspect"))
    }

    /// The held names starting with `prefix`, at most `limit` of them, in name order
    /// (docs/contract.md §5.6). `Unsupported` unless `capabilities().list`.
    async fn list(&self, _prefix: &str, _limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        Err(LockError::unsupported(self.backend(), "list"))
    }

    /// A feed that fires whenever the holder of `name` may have changed (a grant, a release),
    /// heard from the backend's own notifications (docs/contract.md §5.8), for observers in any
    /// process. Register it before reading the holder, so that no change in between is missed.
    /// `Ok(None)` (the default) when the backend does not notify (`capabilities().notify_changes`
    /// is false): observers poll.
    async fn watch_changes(&self, _name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        Ok(None)
    }

    /// An operator's override (docs/contract.md §5.6): frees `name` whoever holds it, without
    /// the holder's owner id, keeping the name's fence so that the next grant's token is higher
    /// than the freed one. Returns the freed holder's token, `Ok(None)` when nobody held it. The
    /// old holder's renewal then fails (its lost signal fires) and a fenced resource refuses its
    /// writes once a newer token has been used. `Unsupported` by default.
    async fn force_release(&self, _name: &LockName) -> Result<Option<FencingToken>, LockError> {
        Err(LockError::unsupported(self.backend(), "force_release"))
    }
}

/// A read-write lock service (docs/contract.md §5.2): many readers or one writer. Waiters are served in
/// arrival order where the backend declares `fifo`, so writers are not starved by readers that
/// arrive after them. Every grant, read or write, carries its own lease and fencing token; a
/// writer's token is greater than every token issued before it for that name.
///
/// A name used as a read-write lock is a different lock from the same name used with
/// [`DistributedLock`] or [`DistributedSemaphore`].
#[async_trait]
pub trait DistributedRwLock: LockService {
    /// One attempt at a shared (read) lease.
    async fn try_acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError>;
    /// Waits for a shared (read) lease.
    async fn acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError>;
    /// One attempt at the exclusive (write) lease.
    async fn try_acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError>;
    /// Waits for the exclusive (write) lease.
    async fn acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError>;
}

/// A counting semaphore service (docs/contract.md §5.3): up to `permits` holders of one name at once, each
/// with its own lease and fencing token. Every user of a name must ask for the same number of
/// permits (`InvalidOptions` otherwise).
#[async_trait]
pub trait DistributedSemaphore: LockService {
    /// One attempt at one of `permits` places.
    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError>;
    /// Waits for one of `permits` places.
    async fn acquire_permit(&self, name: &LockName, permits: u32, options: &AcquireOptions)
        -> Result<Lease, LockError>;
}

/// Helpers on every [`DistributedLock`].
pub trait DistributedLockExt: DistributedLock {
    /// Runs `f` under the lock and releases it afterwards. If the lease is lost first, `f` is
    /// stopped (dropped at its next await point) and the result is `Err(Lost)`.
    ///
    /// ```
    /// # async fn demo() -> Result<(), lock_core::LockError> {
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, DistributedLockExt, LockName, MemoryLock};
    /// let lock = MemoryLock::new();
    /// let total = lock
    ///     .run_locked(&LockName::new("budget")?, &AcquireOptions::new(Duration::from_secs(5)), |lease| async move {
    ///         lease.token().get() * 10
    ///     })
    ///     .await?;
    /// assert_eq!(total, 10);
    /// # Ok(()) }
    /// ```
    fn run_locked<'a, F, Fut, T>(
        &'a self,
        name: &'a LockName,
        options: &'a AcquireOptions,
        f: F,
    ) -> impl Future<Output = Result<T, LockError>> + Send + 'a
    where
        F: FnOnce(LeaseObserver) -> Fut + Send + 'a,
        Fut: Future<Output = T> + Send + 'a,
        T: Send + 'a,
    {
        async move {
            let lease = self.acquire(name, options).await?;
            under_lease(lease, f).await
        }
    }

    /// [`run_locked`](DistributedLockExt::run_locked) with one attempt: `Ok(None)` when someone
    /// else holds the lock (the body does not run). For jobs that every instance triggers and
    /// only one should run; add [`AcquireOptions::hold_at_least`] so that a late timer does not
    /// run it again.
    ///
    /// ```
    /// # async fn demo() -> Result<(), lock_core::LockError> {
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, DistributedLock, DistributedLockExt, LockName, MemoryLock};
    /// let lock = MemoryLock::new();
    /// let name = LockName::new("jobs/report")?;
    /// let opts = AcquireOptions::new(Duration::from_secs(5));
    /// let held = lock.acquire(&name, &opts).await?;
    /// assert_eq!(lock.try_run_locked(&name, &opts, |_| async { 1 }).await?, None);
    /// held.release().await?;
    /// assert_eq!(lock.try_run_locked(&name, &opts, |_| async { 1 }).await?, Some(1));
    /// # Ok(()) }
    /// ```
    fn try_run_locked<'a, F, Fut, T>(
        &'a self,
        name: &'a LockName,
        options: &'a AcquireOptions,
        f: F,
    ) -> impl Future<Output = Result<Option<T>, LockError>> + Send + 'a
    where
        F: FnOnce(LeaseObserver) -> Fut + Send + 'a,
        Fut: Future<Output = T> + Send + 'a,
        T: Send + 'a,
    {
        async move {
            match self.try_acquire(name, options).await? {
                Some(lease) => under_lease(lease, f).await.map(Some),
                None => Ok(None),
            }
        }
    }

    /// [`run_locked`](DistributedLockExt::run_locked) for a body that can fail: one flat
    /// `Result` in the body's error type, which takes lock errors through `From<LockError>`
    /// (busy past the wait, lost while running, a failed release). The lock is released
    /// whether the body succeeds or fails.
    ///
    /// ```
    /// # async fn demo() -> Result<(), lock_core::LockError> {
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, DistributedLockExt, LockError, LockName, MemoryLock};
    /// let lock = MemoryLock::new();
    /// let name = LockName::new("jobs/import")?;
    /// let opts = AcquireOptions::new(Duration::from_secs(5));
    /// let r: Result<u32, LockError> = lock.run_locked_fallible(&name, &opts, |_| async { Ok(7) }).await;
    /// assert_eq!(r?, 7);
    /// # Ok(()) }
    /// ```
    fn run_locked_fallible<'a, F, Fut, T, E>(
        &'a self,
        name: &'a LockName,
        options: &'a AcquireOptions,
        f: F,
    ) -> impl Future<Output = Result<T, E>> + Send + 'a
    where
        F: FnOnce(LeaseObserver) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, E>> + Send + 'a,
        T: Send + 'a,
        E: From<LockError> + Send + 'a,
    {
        async move { self.run_locked(name, options, f).await? }
    }
}

/// Runs `f` while `lease` holds; stops it when the lease is lost (`Err(Lost)`), releases after.
pub(crate) async fn under_lease<F, Fut, T>(lease: Lease, f: F) -> Result<T, LockError>
where
    F: FnOnce(LeaseObserver) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = lease.lost();
    let work = f(lease.observer());
    tokio::select! {
        biased;
        _ = lost.fired() => {
            let _ = lease.release().await;
            Err(LockError::Lost { name: lease.name().as_str().to_owned() })
        }
        out = work => {
            lease.release().await?;
            Ok(out)
        }
    }
}

impl<L: DistributedLock + ?Sized> DistributedLockExt for L {}
