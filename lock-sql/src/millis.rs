//! Durations as the tables hold them: whole milliseconds in a signed 64-bit column.
//!
//! Every ttl, lifetime and remaining lease crosses into SQL as an `i64` of milliseconds and
//! comes back the same way; these two conversions are the only ones, so a ttl never rounds to
//! zero (at least 1 ms) and a negative remaining lease read from the database (a clock step,
//! a row expired between two reads) is nothing left rather than an error.

use std::time::Duration;

/// `ttl` in whole milliseconds for a statement: at least 1, at most `i64::MAX`.
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// A remaining lease in ms as the database reported it (a negative one is none left).
pub(crate) fn remaining(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}
