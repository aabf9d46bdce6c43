//! One renewal of a lease, whoever asks for it (the watchdog driver or [`Lease::renew`](crate::Lease::renew)):
//! bounded by the request timeout and by the lease's own validity, told to the lease's hooks,
//! and read as a loss when the server finds another owner.

use std::sync::Arc;

use tokio::time::{timeout, Instant};
use tracing::Instrument;

use super::handle::RenewOutcome;
use super::loss::{expire_by_time, lose_to_panic};
use super::shared::Shared;
use crate::LockError;

/// One renewal: bounded by the request timeout and by the lease's own validity.
pub(super) async fn renew_once(shared: &Arc<Shared>) -> Result<(), LockError> {
    let span = tracing::debug_span!("dlock.renew", lock = %shared.name, token = shared.token.0);
    let result = renew_attempt(shared).instrument(span).await;
    let told = match &result {
        Ok(()) => shared.tell("renewed", |events| events.renewed()),
        // A loss is told once, by `end`.
        Err(LockError::Lost { .. }) => Ok(()),
        Err(e) => shared.tell("renew_failed", |events| events.renew_failed(e)),
    };
    if let Err(panic) = told {
        lose_to_panic(shared, "its LeaseEvents hook", &panic);
        return Err(shared.lost_error());
    }
    result
}

async fn renew_attempt(shared: &Arc<Shared>) -> Result<(), LockError> {
    if shared.is_over() {
        return Err(shared.lost_error());
    }
    let sent = Instant::now();
    let vu = shared.valid_until();
    if sent >= vu {
        expire_by_time(shared);
        return Err(shared.lost_error());
    }
    let bound = shared.request_timeout.min(vu - sent);
    match timeout(bound, shared.handle.renew(shared.ttl)).await {
        Ok(Ok(RenewOutcome::Renewed)) => {
            if shared.lost.is_fired() {
                return Err(shared.lost_error());
            }
            shared.extend(sent);
            tracing::trace!(lock = %shared.name, "lease renewed");
            Ok(())
        }
        Ok(Ok(RenewOutcome::NotOwner)) => {
            // A renewal overtaken by our own release finds no entry: that is not a loss.
            if !shared.released.load(std::sync::atomic::Ordering::SeqCst) {
                shared.declare_lost("renewal found another owner or no entry");
            }
            Err(shared.lost_error())
        }
        Ok(Err(e)) => {
            if e.outcome_unknown() {
                shared.mark_renew_unanswered();
            }
            Err(e)
        }
        Err(_) => {
            shared.mark_renew_unanswered();
            Err(LockError::unavailable("lease", format!("renewal did not answer within {bound:?}")))
        }
    }
}
