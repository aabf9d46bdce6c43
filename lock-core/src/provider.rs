//! [`LockProvider`]: one connection set to a backend, from which every lock kind is taken.
//!
//! The facade's `Client` is a provider plus the URL it was made from, and its backend table maps
//! each URL scheme to a function that connects one. A backend written outside the dlock crates
//! implements this trait (usually over the same [`crate::StoreLock`] its lock is built on) and
//! registers its scheme with the facade; from then on configuration files, `DLOCK_URL` and the
//! `dlock` tool reach it exactly as they reach the backends shipped with dlock.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{
    Capabilities, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName, LockService,
    MemoryLock,
};

/// The lock kinds of one backend over one set of connections (a pool, a session, a client),
/// shared by every kind it hands out. Object-safe: held as `Arc<dyn LockProvider>`.
///
/// Only [`LockProvider::backend`] and [`LockProvider::lock`] are required: a backend without
/// read-write locks or semaphores keeps the defaults, which answer `Unsupported` (a typed error an
/// application and the conformance suite can tell apart from a failure).
#[async_trait]
pub trait LockProvider: Send + Sync + 'static {
    /// The backend's name, as its locks report it in [`LockService::backend`](crate::LockService::backend) and errors.
    fn backend(&self) -> &str;

    /// The exclusive lock (docs/contract.md §5.1). Cheap: a handle over the shared connections.
    fn lock(&self) -> Arc<dyn DistributedLock>;

    /// What the exclusive lock promises (lease model, fencing, wake-ups): the lock's own answer.
    fn capabilities(&self) -> Capabilities {
        self.lock().capabilities()
    }

    /// The read-write lock (docs/contract.md §5.2). Async because a backend may set up its
    /// storage or check its privileges on first use.
    async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError> {
        Err(LockError::unsupported(self.backend(), "read-write locks"))
    }

    /// The semaphore (docs/contract.md §5.3).
    async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
        Err(LockError::unsupported(self.backend(), "semaphores"))
    }

    /// Deletes everything stored for the names under `prefix` (leases, queues and fencing
    /// counters); how many entries went. For test runs only (`dlock conformance` cleans up its
    /// names with it): a name whose fencing counter is gone may hand out a token again, so this
    /// is never for names an application still uses. Default: `Unsupported`.
    async fn purge(&self, prefix: &LockName) -> Result<u64, LockError> {
        let _ = prefix;
        Err(LockError::unsupported(self.backend(), "purging names"))
    }
}

/// A handle that is every lock kind at once (cloned per kind, sharing its connections), as a
/// [`LockProvider`]: what a backend like ZooKeeper or etcd, whose one client serves the
/// exclusive lock, the read-write lock and the semaphore, registers instead of writing the
/// provider out. `purge` stays `Unsupported`.
pub struct EveryKind<T>(pub T);

#[async_trait]
impl<T> LockProvider for EveryKind<T>
where
    T: DistributedLock + DistributedRwLock + DistributedSemaphore + Clone,
{
    fn backend(&self) -> &str {
        LockService::backend(&self.0)
    }

    fn lock(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.0.clone())
    }

    async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError> {
        Ok(Arc::new(self.0.clone()))
    }

    async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
        Ok(Arc::new(self.0.clone()))
    }
}

/// The in-process reference backend: every kind, over one in-process server.
#[async_trait]
impl LockProvider for MemoryLock {
    fn backend(&self) -> &str {
        LockService::backend(self)
    }

    fn lock(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.clone())
    }

    async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError> {
        Ok(Arc::new(self.clone()))
    }

    async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
        Ok(Arc::new(self.clone()))
    }

    /// Nothing to delete that outlives the process: the server goes with its last handle.
    async fn purge(&self, _prefix: &LockName) -> Result<u64, LockError> {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::AcquireOptions;

    /// A provider with only the required methods.
    struct LockOnly(MemoryLock);

    impl LockProvider for LockOnly {
        fn backend(&self) -> &str {
            "lock-only"
        }
        fn lock(&self) -> Arc<dyn DistributedLock> {
            Arc::new(self.0.clone())
        }
    }

    #[tokio::test]
    async fn the_kinds_share_one_server_and_the_defaults_are_typed() {
        let provider: Arc<dyn LockProvider> = Arc::new(MemoryLock::new());
        let name = LockName::new("p").expect("valid");
        let opts = AcquireOptions::new(Duration::from_secs(5));
        let held = provider.lock().acquire(&name, &opts).await.expect("free");
        assert!(provider.lock().try_acquire(&name, &opts).await.expect("answers").is_none(), "one server");
        held.release().await.expect("release");
        assert!(provider.rw().await.is_ok() && provider.semaphore().await.is_ok());

        let bare: Arc<dyn LockProvider> = Arc::new(LockOnly(MemoryLock::new()));
        for e in [bare.rw().await.err(), bare.semaphore().await.err(), bare.purge(&name).await.err()] {
            assert!(matches!(e, Some(LockError::Unsupported { .. })), "{e:?}");
        }
        assert_eq!(bare.capabilities(), bare.lock().capabilities());
    }
}
