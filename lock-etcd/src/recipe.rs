//! The lock kinds, each a way of reading the same queue of keys: who must be gone before a
//! waiter holds, and what it watches meanwhile.

/// A lock kind: the exclusive lock holds when no key is older; a reader when no writer's key
/// is older; a writer when no key is older; one of `n` permits while fewer than `n` keys are
/// older.
pub(crate) use lock_core::backend::QueueKind as Recipe;

/// What a waiter watches until it looks again.
pub(crate) enum Watch {
    /// The one key just ahead (the exclusive lock, readers and writers): one wake-up per release.
    Key(Vec<u8>),
    /// The whole queue (a semaphore's waiters): any of the holders ahead may leave first.
    Queue,
}
