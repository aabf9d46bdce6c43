//! A blocking API for code that is not async (the reqwest convention): the same backends,
//! handles and leases, run on a small Tokio runtime the client owns. Leases keep renewing on
//! that runtime while the calling thread works; a lost lease fires its signal there too.
//!
//! Use it from plain threads. Inside an async runtime a blocking call would stall a worker, so
//! every call made there is refused with `InvalidOptions` instead (use the async API).
//!
//! ```no_run
//! # fn main() -> Result<(), dlock::LockError> {
//! use std::time::Duration;
//!
//! let client = dlock::blocking::Client::connect("sqlite://dlock.db")?;
//! let payouts = client.handle("payouts")?;
//! if let Some(lease) = payouts.try_acquire_for(Duration::from_secs(5))? {
//!     println!("token {}", lease.token());
//!     lease.release()?;
//! }
//! let total = payouts.run_locked(|| 40 + 2)?;
//! # let _ = total; Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{FencingToken, Handles, LockError, LockName, LostSignal, SemaphoreHandles};
use tokio::runtime::Runtime;

use crate::Config;

/// How long dropping a [`Lease`] waits for its release before leaving it to the background.
const DROP_RELEASE_WAIT: Duration = Duration::from_secs(5);

/// The runtime every handle and lease of one client shares.
#[derive(Clone)]
struct Rt(Arc<Owned>);

/// The runtime itself; dropped inside an async context (a blocking client moved into a task) it
/// shuts down in the background, since a runtime's own drop would block that context.
struct Owned(Option<Runtime>);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            }
        }
    }
}

/// Blocking calls from inside an async runtime are refused: they would stall a worker thread.
fn outside_async() -> Result<(), LockError> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Err(LockError::invalid_options(
            "dlock::blocking called from inside an async runtime: use the async API there",
        )),
        Err(_) => Ok(()),
    }
}

impl Rt {
    fn new() -> Result<Rt, LockError> {
        outside_async()?;
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("dlock-blocking")
            .enable_all()
            .build()
            .map(|rt| Rt(Arc::new(Owned(Some(rt)))))
            .map_err(|e| LockError::backend("blocking", e))
    }

    /// Runs `f` to completion on the client's runtime, from a thread that is not async.
    fn block_on<F: std::future::Future>(&self, f: F) -> Result<F::Output, LockError> {
        outside_async()?;
        match &self.0 .0 {
            Some(rt) => Ok(rt.block_on(f)),
            None => Err(LockError::invalid_options("the blocking client's runtime is shut down")),
        }
    }
}

/// A blocking client: [`crate::Client`] on its own runtime.
#[derive(Clone)]
pub struct Client {
    rt: Rt,
    inner: crate::Client,
}

impl Client {
    /// Connects to the backend `url` names (see [`crate::Client::connect`]).
    pub fn connect(url: &str) -> Result<Client, LockError> {
        let rt = Rt::new()?;
        let inner = rt.block_on(crate::Client::connect(url))??;
        Ok(Client { rt, inner })
    }

    /// Connects as `config` says (see [`crate::Client::from_config`]).
    pub fn from_config(config: &Config) -> Result<Client, LockError> {
        let rt = Rt::new()?;
        let inner = rt.block_on(crate::Client::from_config(config))??;
        Ok(Client { rt, inner })
    }

    /// The async client underneath, for what this module does not wrap.
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// A handle for the exclusive lock `name`, default options (see [`lock_core::LockHandle`]).
    pub fn handle(&self, name: &str) -> Result<LockHandle, LockError> {
        Ok(Handle { rt: self.rt.clone(), inner: self.inner.lock().handle(name)? })
    }

    /// A handle for the read-write lock `name`; `Unsupported` where the backend has none.
    pub fn rw_handle(&self, name: &str) -> Result<RwLockHandle, LockError> {
        let rw = self.rt.block_on(self.inner.rw())??;
        Ok(Handle { rt: self.rt.clone(), inner: rw.handle(name)? })
    }

    /// A handle for the semaphore `name` of `permits` holders; `Unsupported` where the backend
    /// has none.
    pub fn semaphore_handle(&self, name: &str, permits: u32) -> Result<SemaphoreHandle, LockError> {
        let sem = self.rt.block_on(self.inner.semaphore())??;
        Ok(Handle { rt: self.rt.clone(), inner: sem.handle_with(name, permits)? })
    }
}

/// A held lock, for blocking code: released by [`Lease::release`] or on drop (waiting up to 5 s
/// for the server's answer, then leaving it to the background).
#[must_use = "a lease is released when dropped; keep it while working under the lock"]
pub struct Lease {
    // `inner` before `rt`: fields drop in order, and the runtime must outlive the lease.
    inner: Option<lock_core::Lease>,
    rt: Rt,
    name: LockName,
    token: FencingToken,
    lost: LostSignal,
}

impl Lease {
    fn new(rt: &Rt, inner: lock_core::Lease) -> Lease {
        let (name, token, lost) = (inner.name().clone(), inner.token(), inner.lost());
        Lease { inner: Some(inner), rt: rt.clone(), name, token, lost }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The fencing token: send it with every write.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Whether the lease is still valid by this client's clock.
    pub fn is_valid(&self) -> bool {
        self.inner.as_ref().is_some_and(lock_core::Lease::is_valid)
    }

    /// The lost signal (`is_fired()` polls it from blocking code).
    pub fn lost(&self) -> LostSignal {
        self.lost.clone()
    }

    /// Releases the lock and waits for the server's answer.
    pub fn release(mut self) -> Result<(), LockError> {
        match self.inner.take() {
            Some(lease) => self.rt.block_on(lease.release())?,
            None => Ok(()),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(lease) = self.inner.take() {
            // Outside a runtime, wait (bounded) so a process that exits next does not cut the
            // release short; inside one, the async lease's own drop releases in the background.
            if outside_async().is_ok() {
                // (the timer is made inside the runtime: `timeout` needs its clock)
                let _ = self.rt.block_on(async move { tokio::time::timeout(DROP_RELEASE_WAIT, lease.release()).await });
            }
        }
    }
}

/// Runs `f` on the calling thread while `lease` is held; `Err(Lost)` if the lease was lost before
/// `f` returned (a blocking closure cannot be stopped: check `lease.lost()` inside long work, and
/// fence your writes).
fn under<T>(lease: Lease, f: impl FnOnce() -> T) -> Result<T, LockError> {
    let out = f();
    let lost = lease.lost().is_fired();
    let name = lease.name().as_str().to_owned();
    lease.release()?;
    if lost {
        return Err(LockError::Lost { name });
    }
    Ok(out)
}

/// A [`lock_core::Handle`] for blocking code: [`LockHandle`], [`RwLockHandle`] and
/// [`SemaphoreHandle`].
pub struct Handle<L: ?Sized, S = ()> {
    rt: Rt,
    inner: lock_core::Handle<L, S>,
}

impl<L: ?Sized, S: Clone> Clone for Handle<L, S> {
    fn clone(&self) -> Self {
        Handle { rt: self.rt.clone(), inner: self.inner.clone() }
    }
}

impl<L: ?Sized, S> Handle<L, S> {
    /// The same handle with other options.
    pub fn with_options(self, options: lock_core::AcquireOptions) -> Self {
        Handle { rt: self.rt, inner: self.inner.with_options(options) }
    }

    /// The lease `acquire` answers, on this handle's runtime.
    fn lease(&self, acquire: impl Future<Output = Result<lock_core::Lease, LockError>>) -> Result<Lease, LockError> {
        Ok(Lease::new(&self.rt, self.rt.block_on(acquire)??))
    }

    /// The lease, if any, `acquire` answers, on this handle's runtime.
    fn maybe(
        &self,
        acquire: impl Future<Output = Result<Option<lock_core::Lease>, LockError>>,
    ) -> Result<Option<Lease>, LockError> {
        Ok(self.rt.block_on(acquire)??.map(|l| Lease::new(&self.rt, l)))
    }
}

/// [`lock_core::LockHandle`] for blocking code.
pub type LockHandle = Handle<dyn lock_core::DistributedLock>;

impl LockHandle {
    /// Waits as the options say (forever by default).
    pub fn acquire(&self) -> Result<Lease, LockError> {
        self.lease(self.inner.acquire())
    }

    /// One attempt: `Ok(None)` when busy.
    pub fn try_acquire(&self) -> Result<Option<Lease>, LockError> {
        self.maybe(self.inner.try_acquire())
    }

    /// Waits at most `wait`: `Ok(None)` when the lock stayed busy that long.
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<Lease>, LockError> {
        self.maybe(self.inner.try_acquire_for(wait))
    }

    /// Runs `f` under the lock; `Err(Lost)` if the lease was lost before `f` returned.
    pub fn run_locked<T>(&self, f: impl FnOnce() -> T) -> Result<T, LockError> {
        under(self.acquire()?, f)
    }
}

/// [`lock_core::RwLockHandle`] for blocking code.
pub type RwLockHandle = Handle<dyn lock_core::DistributedRwLock>;

impl RwLockHandle {
    /// A read lease, waiting as the options say.
    pub fn read(&self) -> Result<Lease, LockError> {
        self.lease(self.inner.read())
    }

    /// The write lease, waiting as the options say.
    pub fn write(&self) -> Result<Lease, LockError> {
        self.lease(self.inner.write())
    }

    /// Waits at most `wait` for a read lease.
    pub fn try_read_for(&self, wait: Duration) -> Result<Option<Lease>, LockError> {
        self.maybe(self.inner.try_read_for(wait))
    }

    /// Waits at most `wait` for the write lease.
    pub fn try_write_for(&self, wait: Duration) -> Result<Option<Lease>, LockError> {
        self.maybe(self.inner.try_write_for(wait))
    }

    /// Runs `f` as a reader.
    pub fn run_read_locked<T>(&self, f: impl FnOnce() -> T) -> Result<T, LockError> {
        under(self.read()?, f)
    }

    /// Runs `f` as the writer.
    pub fn run_write_locked<T>(&self, f: impl FnOnce() -> T) -> Result<T, LockError> {
        under(self.write()?, f)
    }
}

/// [`lock_core::SemaphoreHandle`] for blocking code.
pub type SemaphoreHandle = Handle<dyn lock_core::DistributedSemaphore, u32>;

impl SemaphoreHandle {
    /// One permit, waiting as the options say.
    pub fn acquire(&self) -> Result<Lease, LockError> {
        self.lease(self.inner.acquire())
    }

    /// Waits at most `wait` for a permit.
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<Lease>, LockError> {
        self.maybe(self.inner.try_acquire_for(wait))
    }

    /// Runs `f` holding one permit.
    pub fn run_locked<T>(&self, f: impl FnOnce() -> T) -> Result<T, LockError> {
        under(self.acquire()?, f)
    }
}
