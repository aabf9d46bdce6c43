//! Redlock's extend round: the lease renewed on every master, a majority needed; with a token,
//! the claim of a grant pushed to a waiter (`super::blocking`).

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::{backend::RenewOutcome, FencingToken, LockError, LockName, OwnerId};

use super::store::RedlockStore;
use crate::reply::ttl_ms;
use crate::scripts::{Keys, LeaseEnd, RedlockClaim, Renew};

impl RedlockStore {
    /// Renews on every master; a majority of renewals keeps the lease, a majority of refusals
    /// loses it, anything else is `Unavailable` (the watchdog re-tries until `valid_until`).
    /// With `claim`, the claim of a pushed grant (`RedlockClaim`): each master renews the owner's
    /// lease, never grants, and keeps that token as the lease's and its counter's floor.
    pub(super) async fn extend_round(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
        claim: Option<FencingToken>,
    ) -> Result<RenewOutcome, LockError> {
        let keys = Keys::new(&self.prefix, name);
        let owner = owner.to_hex();
        let ms = ttl_ms(ttl);
        // A renewal counts from when it was sent, so a slow answer costs no validity: give each
        // master the full request timeout (the lease still bounds the whole renewal by its
        // validity). Stop waiting once the answer is decided: requests already sent still
        // reach the slower masters, and a hung minority does not delay the renewal.
        let per_node = self.request_timeout;
        let mut replies: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|node| {
                let (keys, owner) = (&keys, &owner);
                async move {
                    node.run_idempotent(per_node, |mut c| async move {
                        match claim {
                            Some(token) => {
                                RedlockClaim { keys, owner, ttl_ms: ms, token: token.0 }.invoke(&mut c).await
                            }
                            None => {
                                Renew { lock: &keys.lock, owner, ttl_ms: ms, end: LeaseEnd::Px }.invoke(&mut c).await
                            }
                        }
                    })
                    .await
                }
            })
            .collect();
        let n = self.nodes.len();
        let (mut renewed, mut refused, mut errors) = (0usize, 0usize, Vec::new());
        while let Some(r) = replies.next().await {
            match r {
                Ok(1) => renewed += 1,
                Ok(_) => refused += 1,
                Err(e) => errors.push(e),
            }
            if renewed >= self.quorum || refused > n - self.quorum || refused + errors.len() > n - self.quorum {
                break;
            }
        }
        if renewed >= self.quorum {
            return Ok(RenewOutcome::Renewed);
        }
        if refused > n - self.quorum {
            return Ok(RenewOutcome::NotOwner);
        }
        Err(self.unavailable(renewed + refused, &errors))
    }
}
