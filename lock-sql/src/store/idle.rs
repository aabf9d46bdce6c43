//! Idle names cost nothing forever (docs/contract.md §5.7): with `SqlOptions::idle_gc_after`
//! set, each client deletes the lease rows of names nobody has held for that long, now and then,
//! for as long as its store lives.
//!
//! Why no token can go back: every grant's fence is at least the database clock in
//! microseconds (`GREATEST(fence + 1, NOW_US)`, and a new row starts at `NOW_US`), so the fence
//! of a row is at most a few µs past the clock at its last grant. A row is deleted only when its
//! lease ended `idle_gc_after` ago (more than any statement may run: `validate` insists), so
//! the clock has passed its fence by then, and a row inserted afterwards starts above it.
//! This assumes the database clock does not step back by more than `idle_gc_after`.

use std::sync::Weak;
use std::time::Duration;

use tokio::time::timeout;

use crate::dialect::Dialect;

/// Starts the collector; it ends when the dialect (the store) is dropped.
pub(crate) fn start(dialect: Weak<dyn Dialect>, idle: Duration, request_timeout: Duration) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let every = (idle / 2).clamp(Duration::from_millis(500), Duration::from_secs(15 * 60));
    let idle_ms = i64::try_from(idle.as_millis()).unwrap_or(i64::MAX);
    rt.spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(d) = dialect.upgrade() else { return };
            match timeout(request_timeout, d.collect_idle(idle_ms)).await {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::debug!(backend = d.codes().label, rows = n, "collected idle lock rows"),
                Ok(Err(e)) => tracing::warn!(
                    backend = d.codes().label,
                    error = %e,
                    "collecting idle lock rows failed (needs DELETE on the lease table); retrying later"
                ),
                Err(_) => tracing::debug!(backend = d.codes().label, "collecting idle lock rows timed out"),
            }
        }
    });
}
