//! Handles: a lock, read-write lock or semaphore bound to one name and its options, with the
//! calls users of other libraries know (madelson's `CreateLock(name)`, Redisson's
//! `getLock(name)`): the name is checked once, and "wait at most `d`, then give up" is an
//! `Option`, not an error to match.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::lock::{under_lease, DistributedLockExt};
use crate::{
    AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, Lease, LeaseObserver, LockError,
    LockName, DEFAULT_TTL,
};

/// `handle(name)` on a shared lock client (`Arc<dyn DistributedLock>`, `Arc<dyn
/// DistributedRwLock>`, `Arc<dyn DistributedSemaphore>`).
pub trait Handles {
    /// The handle type this client gives.
    type Handle;

    /// A handle for `name` with the default options (ttl [`DEFAULT_TTL`], wait forever, auto
    /// renew); change them with the handle's `with_options`. An invalid name is
    /// [`LockError::InvalidName`] here, once, not at every call.
    fn handle(&self, name: &str) -> Result<Self::Handle, LockError>;
}

/// An `acquire` bounded by `wait`: `Ok(None)` when the lock stayed busy until then.
async fn within<T>(acquire: impl Future<Output = Result<T, LockError>>) -> Result<Option<T>, LockError> {
    match acquire.await {
        Ok(held) => Ok(Some(held)),
        Err(LockError::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A lock client of kind `L` bound to one checked name and its options; `S` is what else the
/// kind needs to know (a semaphore's number of permits). Cheap to clone; every call is
/// independent (a handle is not a held lock: [`Lease`] is). Used as [`LockHandle`],
/// [`RwLockHandle`] and [`SemaphoreHandle`].
pub struct Handle<L: ?Sized, S = ()> {
    lock: Arc<L>,
    name: LockName,
    options: AcquireOptions,
    size: S,
}

impl<L: ?Sized, S: Clone> Clone for Handle<L, S> {
    fn clone(&self) -> Self {
        Handle {
            lock: Arc::clone(&self.lock),
            name: self.name.clone(),
            options: self.options.clone(),
            size: self.size.clone(),
        }
    }
}

impl<L: ?Sized, S> Handle<L, S> {
    /// A handle of `lock` for `name`, with the default options.
    fn new(lock: &Arc<L>, name: &str, size: S) -> Result<Self, LockError> {
        Ok(Handle {
            lock: Arc::clone(lock),
            name: LockName::new(name)?,
            options: AcquireOptions::new(DEFAULT_TTL),
            size,
        })
    }

    /// The same handle with other options (ttl, default wait, holder, …).
    pub fn with_options(mut self, options: AcquireOptions) -> Self {
        self.options = options;
        self
    }

    /// The checked name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The options every call uses.
    pub fn options(&self) -> &AcquireOptions {
        &self.options
    }
}

/// One exclusive lock by name.
pub type LockHandle = Handle<dyn DistributedLock>;

/// The kinds whose handle needs only a name (a semaphore's needs its permits too:
/// [`SemaphoreHandles`]). Sealed: the lock kinds are this crate's.
mod sealed {
    pub trait ByName {}
    impl ByName for dyn crate::DistributedLock {}
    impl ByName for dyn crate::DistributedRwLock {}
}

impl<L: ?Sized + sealed::ByName> Handles for Arc<L> {
    type Handle = Handle<L>;

    fn handle(&self, name: &str) -> Result<Handle<L>, LockError> {
        Handle::new(self, name, ())
    }
}

impl LockHandle {
    /// Waits as the options say (forever by default); `Timeout` when a bounded wait ran out.
    pub async fn acquire(&self) -> Result<Lease, LockError> {
        self.lock.acquire(&self.name, &self.options).await
    }

    /// One attempt: `Ok(None)` when busy.
    pub async fn try_acquire(&self) -> Result<Option<Lease>, LockError> {
        self.lock.try_acquire(&self.name, &self.options).await
    }

    /// Waits at most `wait`: `Ok(None)` when the lock stayed busy that long.
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<Option<Lease>, LockError> {
        within(self.lock.acquire(&self.name, &self.options.clone().wait(wait))).await
    }

    /// Runs `f` under the lock (waiting as the options say); `Err(Lost)` if the lease is lost
    /// first, in which case `f` is stopped.
    pub async fn run_locked<F, Fut, T>(&self, f: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseObserver) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.lock.run_locked(&self.name, &self.options, f).await
    }

    /// Runs `f` if the lock is free now: `Ok(None)` when busy.
    pub async fn try_run_locked<F, Fut, T>(&self, f: F) -> Result<Option<T>, LockError>
    where
        F: FnOnce(LeaseObserver) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.lock.try_run_locked(&self.name, &self.options, f).await
    }
}

/// One read-write lock by name: many readers or one writer.
pub type RwLockHandle = Handle<dyn DistributedRwLock>;

impl RwLockHandle {
    /// A read lease, waiting as the options say.
    pub async fn read(&self) -> Result<Lease, LockError> {
        self.lock.acquire_read(&self.name, &self.options).await
    }

    /// The write lease, waiting as the options say.
    pub async fn write(&self) -> Result<Lease, LockError> {
        self.lock.acquire_write(&self.name, &self.options).await
    }

    /// One attempt at a read lease: `Ok(None)` when a writer holds or waits.
    pub async fn try_read(&self) -> Result<Option<Lease>, LockError> {
        self.lock.try_acquire_read(&self.name, &self.options).await
    }

    /// One attempt at the write lease: `Ok(None)` when anyone holds.
    pub async fn try_write(&self) -> Result<Option<Lease>, LockError> {
        self.lock.try_acquire_write(&self.name, &self.options).await
    }

    /// Waits at most `wait` for a read lease: `Ok(None)` when a writer kept it that long.
    pub async fn try_read_for(&self, wait: Duration) -> Result<Option<Lease>, LockError> {
        within(self.lock.acquire_read(&self.name, &self.options.clone().wait(wait))).await
    }

    /// Waits at most `wait` for the write lease.
    pub async fn try_write_for(&self, wait: Duration) -> Result<Option<Lease>, LockError> {
        within(self.lock.acquire_write(&self.name, &self.options.clone().wait(wait))).await
    }

    /// Runs `f` as a reader; `Err(Lost)` (and `f` stopped) if the lease is lost first.
    pub async fn run_read_locked<F, Fut, T>(&self, f: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseObserver) -> Fut + Send,
        Fut: Future<Output = T> + Send,
    {
        under_lease(self.read().await?, f).await
    }

    /// Runs `f` as the writer; `Err(Lost)` (and `f` stopped) if the lease is lost first.
    pub async fn run_write_locked<F, Fut, T>(&self, f: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseObserver) -> Fut + Send,
        Fut: Future<Output = T> + Send,
    {
        under_lease(self.write().await?, f).await
    }
}

/// One semaphore by name: up to `permits` holders at once.
pub type SemaphoreHandle = Handle<dyn DistributedSemaphore, u32>;

/// A semaphore's handle needs its size too: `semaphore.handle_with("pool", 4)?`.
pub trait SemaphoreHandles {
    /// A handle for `name` admitting `permits` holders (at least 1), default options.
    fn handle_with(&self, name: &str, permits: u32) -> Result<SemaphoreHandle, LockError>;
}

impl SemaphoreHandles for Arc<dyn DistributedSemaphore> {
    fn handle_with(&self, name: &str, permits: u32) -> Result<SemaphoreHandle, LockError> {
        if permits == 0 {
            return Err(LockError::invalid_options("a semaphore needs at least 1 permit"));
        }
        Handle::new(self, name, permits)
    }
}

impl SemaphoreHandle {
    /// How many holders the semaphore admits at once.
    pub fn permits(&self) -> u32 {
        self.size
    }

    /// One permit, waiting as the options say.
    pub async fn acquire(&self) -> Result<Lease, LockError> {
        self.lock.acquire_permit(&self.name, self.size, &self.options).await
    }

    /// One attempt at a permit: `Ok(None)` when all are taken.
    pub async fn try_acquire(&self) -> Result<Option<Lease>, LockError> {
        self.lock.try_acquire_permit(&self.name, self.size, &self.options).await
    }

    /// Waits at most `wait` for a permit: `Ok(None)` when all stayed taken that long.
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<Option<Lease>, LockError> {
        within(self.lock.acquire_permit(&self.name, self.size, &self.options.clone().wait(wait))).await
    }

    /// Runs `f` holding one permit; `Err(Lost)` (and `f` stopped) if the lease is lost first.
    pub async fn run_locked<F, Fut, T>(&self, f: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseObserver) -> Fut + Send,
        Fut: Future<Output = T> + Send,
    {
        under_lease(self.acquire().await?, f).await
    }
}
