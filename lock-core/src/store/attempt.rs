//! One bounded attempt of a [`LeaseStore`], shared by the single try and the wait.

use std::time::Duration;

use tokio::time::timeout;

use super::claim::{Claim, TryLock};
use super::lease_store::LeaseStore;
use crate::LockError;

/// One attempt bounded by `bound`; `None` when the server did not answer within it (the
/// outcome is then unknown: the attempt may have been applied).
pub(super) async fn attempt<S: LeaseStore>(
    store: &S,
    claim: &Claim<'_>,
    bound: Duration,
    waiting: bool,
) -> Option<Result<TryLock, LockError>> {
    timeout(bound, store.try_lock(claim, waiting)).await.ok()
}

/// The error of an attempt that did not answer within `bound`.
pub(super) fn no_answer<S: LeaseStore>(store: &S, bound: Duration) -> LockError {
    LockError::unavailable(store.backend(), format!("acquire attempt did not answer within {bound:?}"))
}
