//! The audit line of an operator's override: `force_release` evicts whoever holds a lock, and
//! anyone with the application's credentials may call it (docs/security.md), so every call
//! leaves one `WARN` on the `dlock::audit` target naming the lock, the freed token and who was
//! holding, for the logs to answer "who took my lock" afterwards.

use std::future::Future;

use crate::{FencingToken, HolderInfo, LockError, LockName};

/// The tracing target of audit lines, for a subscriber that routes them apart.
pub const AUDIT_TARGET: &str = "dlock::audit";

/// Runs a backend's `force_release` (`force`) with its audit line: reads the holder first
/// (`inspect`; best effort: a failed read never blocks the override, the line then says the
/// holder is unknown), frees the lock, and logs what was evicted. A backend implements
/// `force_release` as `audited_force_release(backend, name, self.inspect(name), self.force(name))`.
pub async fn audited_force_release<I, F>(
    backend: &str,
    name: &LockName,
    inspect: I,
    force: F,
) -> Result<Option<FencingToken>, LockError>
where
    I: Future<Output = Result<Option<HolderInfo>, LockError>>,
    F: Future<Output = Result<Option<FencingToken>, LockError>>,
{
    let before = inspect.await;
    let freed = force.await;
    log_force_release(backend, name, before.as_ref().ok().and_then(Option::as_ref), &freed);
    freed
}

fn log_force_release(
    backend: &str,
    name: &LockName,
    before: Option<&HolderInfo>,
    freed: &Result<Option<FencingToken>, LockError>,
) {
    let holder = before.and_then(|h| h.holder.as_deref()).unwrap_or("(no holder id)");
    match freed {
        Ok(Some(token)) => tracing::warn!(
            target: AUDIT_TARGET,
            backend,
            lock = %name,
            token = token.get(),
            holder,
            remaining_ms = before.and_then(|h| h.remaining).map(|d| d.as_millis() as u64),
            "force_release evicted the holder of lock {name} (token {}, holder {holder}); its lease is lost",
            token.get()
        ),
        Ok(None) => tracing::warn!(
            target: AUDIT_TARGET,
            backend,
            lock = %name,
            "force_release on lock {name}: nobody held it"
        ),
        Err(e) => tracing::warn!(
            target: AUDIT_TARGET,
            backend,
            lock = %name,
            holder,
            error = %e,
            "force_release on lock {name} failed: {e}"
        ),
    }
}
