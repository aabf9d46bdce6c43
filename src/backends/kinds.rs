//! A backend crate's connection set that hands out every lock kind (lock-sql's `SqlBackend`,
//! lock-redis's `RedisBackend`) as one [`LockProvider`]: the adapter is written once here, and
//! each backend only says how it hands out its kinds ([`EveryKind`]; a trait of the facade's
//! own, since the orphan rule keeps the facade from implementing `LockProvider` on their types).

use std::sync::Arc;

use lock_core::backend::async_trait;
use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockProvider};

/// A connection set with an exclusive lock, a read-write lock and a semaphore.
#[async_trait]
pub(crate) trait EveryKind: Send + Sync + 'static {
    fn lock(&self) -> Arc<dyn DistributedLock>;
    async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError>;
    async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError>;
}

/// [`EveryKind`] for a backend crate's type whose inherent `lock`, `rw` and `semaphore` hand
/// out its kinds: every such backend boxes them the same way.
macro_rules! every_kind {
    ($backend:ty) => {
        #[::lock_core::backend::async_trait]
        impl $crate::backends::kinds::EveryKind for $backend {
            fn lock(&self) -> ::std::sync::Arc<dyn ::lock_core::DistributedLock> {
                ::std::sync::Arc::new(<$backend>::lock(self))
            }

            async fn rw(&self) -> Result<::std::sync::Arc<dyn ::lock_core::DistributedRwLock>, ::lock_core::LockError> {
                Ok(::std::sync::Arc::new(<$backend>::rw(self).await?))
            }

            async fn semaphore(
                &self,
            ) -> Result<::std::sync::Arc<dyn ::lock_core::DistributedSemaphore>, ::lock_core::LockError> {
                Ok(::std::sync::Arc::new(<$backend>::semaphore(self).await?))
            }
        }
    };
}
pub(super) use every_kind;

/// An [`EveryKind`] connection set as a provider, named as its locks name their backend.
pub(crate) struct KindsProvider<B> {
    backend: B,
    name: String,
}

impl<B: EveryKind> KindsProvider<B> {
    pub(crate) fn new(backend: B) -> KindsProvider<B> {
        let name = backend.lock().backend().to_owned();
        KindsProvider { backend, name }
    }
}

#[async_trait]
impl<B: EveryKind> LockProvider for KindsProvider<B> {
    fn backend(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> Arc<dyn DistributedLock> {
        self.backend.lock()
    }

    async fn rw(&self) -> Result<Arc<dyn DistributedRwLock>, LockError> {
        self.backend.rw().await
    }

    async fn semaphore(&self) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
        self.backend.semaphore().await
    }
}
