//! The lock kinds, each a way of reading the same queue of keys: who must be gone before a
//! waiter holds, and what it watches meanwhile.

use lock_core::LockError;

/// A lock kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recipe {
    /// The exclusive lock: holds when no key is older.
    Exclusive,
    /// A reader of a read-write lock: holds when no writer's key is older.
    Read,
    /// A writer of a read-write lock: holds when no key is older.
    Write,
    /// One of `n` permits of a semaphore: holds while fewer than `n` keys are older.
    Permit(u32),
}

/// What a waiter watches until it looks again.
pub(crate) enum Watch {
    /// The one key just ahead (the exclusive lock, readers and writers): one wake-up per release.
    Key(Vec<u8>),
    /// The whole queue (a semaphore's waiters): any of the holders ahead may leave first.
    Queue,
}

/// A semaphore of `n` permits (`n ≥ 1`).
pub(crate) fn permits(n: u32) -> Result<Recipe, LockError> {
    lock_core::backend::check_permits(n)?;
    Ok(Recipe::Permit(n))
}
