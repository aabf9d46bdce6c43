//! The waiting side of Redlock: each wait's ticket, how long its queue places last, the undo of a
//! failed round, and the one-round claim of a key that a majority of releases handed over (the
//! per-master rules are in `crate::scripts::redlock`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::{FencingToken, LeaseStore, LockError, OwnerId};
use tokio::time::Instant;

use super::{RedlockStore, BACKEND};
use crate::scripts::{Keys, REDLOCK_ABANDON, REDLOCK_CLAIM};
use crate::single::{parse_pair, token_from, ttl_ms, RESERVE_MS};

impl RedlockStore {
    /// The ticket of `owner`'s wait: taken at its first attempt (wall-clock µs, below 2^53 so
    /// that Lua's doubles hold it exactly), the same for all its attempts. Waits end in a grant
    /// or an abandon, which forget it; entries left by waits that ended otherwise (no runtime
    /// for the background abandon) are dropped once unused for a minute, far beyond any live
    /// wait's gap between attempts (at worst that wait takes a new ticket: fairness only).
    pub(super) fn ticket(&self, owner: OwnerId) -> u64 {
        let now = Instant::now();
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        if tickets.len() >= 1024 {
            tickets.retain(|_, (_, used)| now.saturating_duration_since(*used) < Duration::from_secs(60));
        }
        let entry = tickets.entry(owner).or_insert_with(|| {
            let us = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_micros());
            (u64::try_from(us).unwrap_or(u64::MAX).min((1 << 53) - 1), now)
        });
        entry.1 = now;
        entry.0
    }

    pub(super) fn forget_ticket(&self, owner: OwnerId) {
        self.tickets.lock().unwrap_or_else(|e| e.into_inner()).remove(&owner);
    }

    /// How long a waiter's place lasts on a master without a re-try (ms): `StoreLock` re-tries a
    /// notified wait at least every 4 × `max_poll_interval` plus one attempt (two rounds, each
    /// at most `request_timeout`); twice that, so one late re-try does not cost the place.
    pub(super) fn registration(&self, ttl: Duration) -> u64 {
        let retry = self.max_poll_interval(ttl).saturating_mul(4) + self.request_timeout.saturating_mul(2);
        ttl_ms(retry.saturating_mul(2))
    }

    /// Frees what attempt `attempt` took, on every master (a lost reply may have granted), in
    /// the background so that a hung master does not delay the re-try. Only this attempt: the
    /// owner's next attempt may reach a master before this undo does. The owner's queue places
    /// stay.
    pub(super) fn undo_everywhere(&self, keys: &Keys, owner: &str, attempt: &str, per_node: Duration) {
        for node in &self.nodes {
            let (node, lock, channel) = (Arc::clone(node), keys.lock.clone(), keys.channel.clone());
            let (owner, attempt, queue) = (owner.to_owned(), attempt.to_owned(), keys.redlock_queue.clone());
            tokio::spawn(async move {
                let (lock, owner, attempt, channel, queue) = (&lock, &owner, &attempt, &channel, &queue);
                let undone = node
                    .run(per_node, |mut c| async move {
                        REDLOCK_ABANDON
                            .key(lock)
                            .key(queue)
                            .arg(owner)
                            .arg(attempt)
                            .arg(channel)
                            .arg(RESERVE_MS)
                            .invoke_async::<i64>(&mut c)
                            .await
                    })
                    .await;
                if let Err(e) = undone {
                    tracing::debug!(error = %e, "undo of a failed redlock attempt failed; the ttl frees it");
                }
            });
        }
    }

    /// Takes a key that the releases of a majority handed to `owner` (`handed`: server index
    /// and fence floor of each), in one round: each master makes its hand-off this attempt's
    /// lease with the full ttl and stores the token, `max(floors) + 1`, if greater. The floors
    /// were read while the key was already ours on those masters, exactly as a first round
    /// reads them, so the token rule (a majority read meets every earlier majority write) holds.
    /// The lease counts from the instant before this round was sent, like any round. `None`
    /// when it did not reach a majority in time: undone, and the caller runs a normal round.
    pub(super) async fn claim(
        &self,
        keys: &Keys,
        owner: &str,
        ttl: Duration,
        attempt: &str,
        handed: &[(usize, i64)],
    ) -> Result<Option<FencingToken>, LockError> {
        let started = Instant::now();
        let max = handed.iter().map(|(_, floor)| *floor).max().unwrap_or(0);
        let token = token_from(BACKEND, max.saturating_add(1))?;
        let wanted = token.0.to_string();
        let (ms, per_node, n) = (ttl_ms(ttl), self.per_node(ttl), self.nodes.len());
        let mut replies: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|node| {
                let wanted = &wanted;
                async move {
                    node.run_idempotent(per_node, |mut c| async move {
                        REDLOCK_CLAIM
                            .key(&keys.lock)
                            .key(&keys.fence)
                            .key(&keys.fence_by)
                            .arg(owner)
                            .arg(ms)
                            .arg(attempt)
                            .arg(wanted.as_str())
                            .invoke_async::<Vec<i64>>(&mut c)
                            .await
                    })
                    .await
                    .and_then(|r| parse_pair(BACKEND, r))
                }
            })
            .collect();
        let (mut stored, mut other) = (0usize, 0usize);
        while let Some(r) = replies.next().await {
            match r {
                // Only a store by this attempt counts: an equal counter is another grant's.
                Ok((true, v)) if u64::try_from(v).ok() == Some(token.0) => stored += 1,
                _ => other += 1,
            }
            if stored >= self.quorum || other > n - self.quorum {
                break;
            }
        }
        drop(replies);
        if stored >= self.quorum && started.elapsed() + lock_core::clock_drift(ttl) < ttl {
            return Ok(Some(token));
        }
        self.undo_everywhere(keys, owner, attempt, per_node);
        Ok(None)
    }
}
