//! The scripts' replies as lock-core values, and the numbers the scripts take: shared by the
//! single instance, its read-write locks and semaphores, and Redlock.

use std::time::Duration;

use lock_core::{FencingToken, LockError, LockName};

/// The ttl in whole milliseconds (at least 1), as Redis `PX` wants it.
pub(crate) fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Parses `{flag, value}` from the acquire scripts.
pub(crate) fn parse_pair(backend: &str, reply: Vec<i64>) -> Result<(bool, i64), LockError> {
    match reply.as_slice() {
        [flag, value] => Ok((*flag == 1, *value)),
        other => Err(LockError::backend(backend, format!("unexpected reply from the acquire script: {other:?}"))),
    }
}

pub(crate) fn token_from(backend: &str, value: i64) -> Result<FencingToken, LockError> {
    u64::try_from(value)
        .ok()
        .filter(|v| *v > 0)
        .map(FencingToken)
        .ok_or_else(|| LockError::backend(backend, format!("the server returned an invalid fencing token {value}")))
}

/// A `PTTL` answer as a remaining lease (negative answers mean "no expiry" or "gone").
pub(crate) fn remaining_from(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A waiting attempt the queue refused: the name has `cap` waiters already (`{3, cap}`, the
/// acquire scripts). Not retryable: waiting longer would not shorten the queue by itself.
pub(crate) fn too_many_waiters(name: &LockName, cap: i64) -> LockError {
    LockError::invalid_options(format!(
        "lock {:?} already has {cap} waiters, the most redis max_waiters allows; raise max_waiters (every client \
         of the name should agree on it) or let fewer clients wait on one name (e.g. one waiter per process)",
        name.as_str()
    ))
}
