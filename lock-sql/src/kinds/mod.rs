//! Read-write locks and semaphores in the database (docs/contract.md §5.2, §5.3): the kinds'
//! statements as a [`KindStore`](lock_core::backend::KindStore) over the pools and listener of the
//! exclusive [`SqlStore`](crate::store::SqlStore); [`StoreRwLock`] / [`StoreSemaphore`] in lock-core
//! make the traits of it. The tables and statements are in the crate docs.

mod base;

use std::sync::Arc;

use lock_core::{
    backend::{StoreRwLock, StoreSemaphore},
    LockError,
};

use crate::options::SqlOptions;
pub use base::SqlKinds;

/// A read-write lock in the database (docs/contract.md §5.2), made by
/// [`connect_rw`](crate::connect_rw). A writer that is refused while it waits leaves a short
/// claim in the counter row that makes new readers wait.
pub type SqlRwLock = StoreRwLock<SqlKinds>;

/// A semaphore in the database (docs/contract.md §5.3), made by
/// [`connect_semaphore`](crate::connect_semaphore). The number of permits is stored in the
/// counter row while anyone holds the semaphore.
pub type SqlSemaphore = StoreSemaphore<SqlKinds>;

/// See [`crate::connect_rw`].
pub(crate) async fn connect_rw(url: &str, options: SqlOptions) -> Result<SqlRwLock, LockError> {
    Ok(StoreRwLock::new(SqlKinds::connect(url, options).await?))
}

/// See [`crate::connect_semaphore`].
pub(crate) async fn connect_semaphore(url: &str, options: SqlOptions) -> Result<SqlSemaphore, LockError> {
    Ok(StoreSemaphore::new(SqlKinds::connect(url, options).await?))
}

/// The read-write lock over kinds shared with the exclusive lock.
pub(crate) fn rw(kinds: Arc<SqlKinds>) -> SqlRwLock {
    StoreRwLock::new(kinds)
}

/// The semaphore over kinds shared with the exclusive lock.
pub(crate) fn semaphore(kinds: Arc<SqlKinds>) -> SqlSemaphore {
    StoreSemaphore::new(kinds)
}
