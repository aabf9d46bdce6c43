//! Redlock's release round: an owner-checked release on every master, which also withdraws
//! the owner's places in the queues (a wait's abandon is the same round).

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::{backend::ReleaseOutcome, LockError, LockName, OwnerId};

use super::store::{RedlockStore, BACKEND};
use crate::handoff::CLAIM_MS;
use crate::scripts::{Keys, RedlockRelease};
use crate::single::RESERVE_MS;

impl RedlockStore {
    /// Owner-checked release on every master, including those that did not answer, which also
    /// removes the owner's queue places and hands each master to its queue's head. Stops
    /// waiting once a majority confirmed (the others got the request too, unless their
    /// connection is down, and then the ttl frees them).
    async fn release_everywhere(
        &self,
        keys: &Keys,
        owner: &str,
        token: u64,
        bound: Duration,
    ) -> Vec<Result<i64, LockError>> {
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|n| async move {
                let wake = self.notifier.wake_channel();
                let call = RedlockRelease { keys, owner, reserve_ms: RESERVE_MS, wake, claim_ms: CLAIM_MS, token };
                n.run(bound, |mut c| async move { call.invoke(&mut c).await }).await
            })
            .collect();
        let mut replies = Vec::with_capacity(self.nodes.len());
        while let Some(r) = pending.next().await {
            replies.push(r);
            if replies.iter().filter(|r| matches!(r, Ok(1))).count() >= self.quorum {
                break;
            }
        }
        replies
    }

    /// Releases on every master a lease held with `token` (0: unknown): released once a
    /// majority confirmed, not ours once too few could still confirm.
    pub(super) async fn release_round(
        &self,
        name: &LockName,
        owner: OwnerId,
        token: u64,
    ) -> Result<ReleaseOutcome, LockError> {
        let keys = Keys::new(&self.prefix, name);
        let owner = owner.to_hex();
        let replies = self.release_everywhere(&keys, &owner, token, self.request_timeout).await;
        let released = replies.iter().filter(|r| matches!(r, Ok(1))).count();
        let errors = replies.iter().filter(|r| r.is_err()).count();
        if released >= self.quorum {
            return Ok(ReleaseOutcome::Released);
        }
        if released + errors < self.quorum {
            return Ok(ReleaseOutcome::NotOwner);
        }
        let errors: Vec<LockError> = replies.into_iter().filter_map(Result::err).collect();
        Err(LockError::unavailable(
            BACKEND,
            format!(
                "only {released} of {} masters confirmed the release (first error: {}); the rest free themselves \
                 when the ttl ends",
                self.nodes.len(),
                errors.first().map(|e| e.to_string()).unwrap_or_default()
            ),
        ))
    }

    /// Withdraws a wait's places (and any partial grant of it) on every master, handing a
    /// master whose head it was to the next waiter.
    pub(super) async fn withdraw(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.forget_ticket(owner);
        let keys = Keys::new(&self.prefix, name);
        let replies = self.release_everywhere(&keys, &owner.to_hex(), 0, self.request_timeout).await;
        let errors: Vec<LockError> = replies.into_iter().filter_map(Result::err).collect();
        if errors.len() > self.nodes.len() - self.quorum {
            return Err(self.unavailable(self.nodes.len() - errors.len(), &errors));
        }
        Ok(())
    }
}
