//! The two losses that leave a release to send: a panic in the lease's own renewal or hooks,
//! and `valid_until` passing after a renewal went unanswered. Either way the lost signal fires
//! once and, where the server may still hold the lock for us, the owner-checked release goes
//! out in the background (docs/contract.md §3).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::release;
use super::shared::Shared;

/// A panic in this lease's renewal or in one of its hooks: the lease is lost (nobody can
/// say what it left behind) and no other lease is touched. The lock is released on the
/// server in the background, so it does not stay taken by a holder that was told it lost it.
pub(super) fn lose_to_panic(shared: &Arc<Shared>, what: &str, panic: &str) {
    let reason = format!("{what} panicked: {panic}");
    if shared.lost.fire(&reason) {
        tracing::error!(lock = %shared.name, token = shared.token.0, "lease lost: {reason}");
        shared.end(Some(&reason));
        if shared.released.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release::release_until_answered(Arc::clone(shared)));
        }
    }
}

/// The lease ran out by the clock without a successful renewal. When a renewal went
/// unanswered the server may still hold it (the renewal was applied, its answer lost), so
/// the owner-checked release is sent in the background until the server answers (docs/contract.md §3).
/// A holder that simply stopped renewing sends nothing: its lease ends on the server too.
pub(super) fn expire_by_time(shared: &Arc<Shared>) {
    let reason = "valid_until passed without a successful renewal";
    if shared.lost.fire(reason) {
        let _span = tracing::warn_span!("dlock.lost", lock = %shared.name, token = shared.token.0).entered();
        tracing::warn!(lock = %shared.name, token = shared.token.0, "lease lost: {reason}");
        shared.end(Some(reason));
        if !shared.renew_unanswered() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release::release_until_answered(Arc::clone(shared)));
        }
    }
}
