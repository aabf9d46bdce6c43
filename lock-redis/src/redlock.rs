//! Redlock over N independent masters, with fencing tokens kept monotonic across quorums, and
//! a waiter queue on each master ordered by one ticket per wait, so that every master agrees on
//! the next holder (`crate::scripts::redlock` has the rules and why they cannot livelock).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::{
    Capabilities, LeaseModel, LeaseStore, LockError, LockName, OwnerId, ReleaseOutcome, RenewOutcome, TryLock,
    WakeMethod, WakeSubscription,
};
use rand::Rng;
use tokio::time::Instant;

use crate::boot::Boot;
use crate::conn::Node;
use crate::endpoint::Endpoint;
use crate::pubsub::Notifier;
use crate::scripts::{Keys, REDLOCK_ABANDON, REDLOCK_ACQUIRE, REDLOCK_FENCE, REDLOCK_RELEASE, RENEW};
use crate::reply::{parse_pair, remaining_from, token_from, ttl_ms};
use crate::single::RESERVE_MS;
use crate::RedisOptions;

pub(crate) const BACKEND: &str = "redlock";

/// N independent Redis masters as one [`LeaseStore`]; use it through [`Redlock`](crate::Redlock).
pub struct RedlockStore {
    nodes: Vec<Arc<Node>>,
    notifier: Notifier,
    prefix: String,
    quorum: usize,
    request_timeout: Duration,
    boot: Boot,
    max_ttl: Duration,
    /// The ticket of each wait in progress (by its owner id) and when it was last used: one
    /// ticket for every attempt of a wait, on every master.
    tickets: Mutex<HashMap<OwnerId, (u64, Instant)>>,
}

impl std::fmt::Debug for RedlockStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockStore")
            .field("masters", &self.nodes.iter().map(|n| n.label.as_str()).collect::<Vec<_>>())
            .field("quorum", &self.quorum)
            .field("key_prefix", &self.prefix)
            .finish()
    }
}

/// What a waiting attempt registers on each master: its ticket and how long the place lasts.
#[derive(Clone, Copy)]
struct Place {
    ticket: u64,
    registration_ms: u64,
}

/// One master's answer to an acquire.
enum Vote {
    Granted { floor: i64 },
    Held { pttl: i64 },
    Failed(LockError),
}

impl RedlockStore {
    /// Opens a client per master and checks that a majority answers.
    pub(crate) async fn connect(url: &str, options: &RedisOptions) -> Result<RedlockStore, LockError> {
        options.validate()?;
        let urls = crate::url::parse_redlock(url)?;
        let ca = options.read_ca().await?;
        let mut nodes = Vec::with_capacity(urls.len());
        let mut pubsub = Vec::with_capacity(urls.len());
        for u in &urls {
            let client = crate::url::open_client_with_ca(u, ca.as_deref())?;
            let endpoint = Endpoint::Fixed(client);
            let node = Node::new(endpoint.clone(), u, BACKEND, options.connect_timeout, options.request_timeout);
            pubsub.push((endpoint, node.label.clone()));
            nodes.push(Arc::new(node));
        }
        let quorum = nodes.len() / 2 + 1;
        if nodes.len() % 2 == 0 || nodes.len() < 3 {
            tracing::warn!(
                masters = nodes.len(),
                "redlock works best with an odd number of at least 3 independent masters"
            );
        }
        let bound = options.connect_timeout + options.request_timeout;
        let pings = join_all(nodes.iter().map(|n| n.ping(bound))).await;
        let up = pings.iter().filter(|r| r.is_ok()).count();
        if up < quorum {
            let reasons: Vec<String> = pings.into_iter().filter_map(|r| r.err()).map(|e| e.to_string()).collect();
            if let Some(cfg) = reasons.iter().find(|r| r.starts_with("configuration error")) {
                return Err(LockError::config(cfg.clone()));
            }
            return Err(LockError::unavailable(
                BACKEND,
                format!(
                    "only {up} of {} masters answered, a majority of {quorum} is needed: {}",
                    nodes.len(),
                    reasons.join("; ")
                ),
            ));
        }
        // The masters that answered must let this user run everything (the others are checked
        // by their first refusal, which the watchdog reports).
        for (node, ping) in nodes.iter().zip(&pings) {
            if ping.is_ok() {
                let db = node.db();
                crate::acl::check(node, &options.key_prefix, db, crate::acl::Needs::Exclusive).await?;
            }
        }
        let notifier = Notifier::new(pubsub, &options.key_prefix, options.connect_timeout, options.request_timeout);
        Ok(RedlockStore {
            nodes,
            notifier,
            prefix: options.key_prefix.clone(),
            quorum,
            request_timeout: options.request_timeout,
            boot: Boot::new(&options.key_prefix, options.quiet_period(), false),
            max_ttl: options.max_ttl,
            tickets: Mutex::new(HashMap::new()),
        })
    }

    /// How many masters must agree.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How many masters there are.
    pub fn masters(&self) -> usize {
        self.nodes.len()
    }

    /// The per-master timeout: below the ttl, yet above a slow link's round trip. Rounds stop
    /// waiting as soon as a majority answered, so a hung minority does not eat validity time.
    fn per_node(&self, ttl: Duration) -> Duration {
        self.request_timeout.min((ttl / 3).max(Duration::from_millis(20)))
    }

    /// The ticket of `owner`'s wait: taken at its first attempt (wall-clock µs, below 2^53 so
    /// that Lua's doubles hold it exactly), the same for all its attempts. Waits end in a grant
    /// or an abandon, which forget it; entries left by waits that ended otherwise (no runtime
    /// for the background abandon) are dropped once unused for a minute, far beyond any live
    /// wait's gap between attempts (at worst that wait takes a new ticket: fairness only).
    fn ticket(&self, owner: OwnerId) -> u64 {
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

    fn forget_ticket(&self, owner: OwnerId) {
        self.tickets.lock().unwrap_or_else(|e| e.into_inner()).remove(&owner);
    }

    /// How long a waiter's place lasts on a master without a re-try (ms): `StoreLock` re-tries a
    /// notified wait at least every 4 × `max_poll_interval` plus one attempt (two rounds, each
    /// at most `request_timeout`); twice that, so one late re-try does not cost the place.
    fn registration(&self, ttl: Duration) -> u64 {
        let retry = self.max_poll_interval(ttl).saturating_mul(4) + self.request_timeout.saturating_mul(2);
        ttl_ms(retry.saturating_mul(2))
    }

    /// Owner-checked release on every master, including those that did not answer, which also
    /// removes the owner's queue places and hands each master to its queue's head. Stops
    /// waiting once a majority confirmed (the others got the request too, unless their
    /// connection is down, and then the ttl frees them).
    async fn release_everywhere(&self, keys: &Keys, owner: &str, bound: Duration) -> Vec<Result<i64, LockError>> {
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|n| async move {
                n.run(bound, |mut c| async move {
                    REDLOCK_RELEASE
                        .key(&keys.lock)
                        .key(&keys.redlock_queue)
                        .arg(owner)
                        .arg(&keys.channel)
                        .arg(RESERVE_MS)
                        .arg(self.notifier.wake_channel())
                        .invoke_async(&mut c)
                        .await
                })
                .await
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

    fn unavailable(&self, answered: usize, errors: &[LockError]) -> LockError {
        let first = errors.first().map(|e| e.to_string()).unwrap_or_default();
        LockError::unavailable(
            BACKEND,
            format!(
                "only {answered} of {} masters answered, a majority of {} is needed (first error: {first})",
                self.nodes.len(),
                self.quorum
            ),
        )
    }
}

#[async_trait]
impl LeaseStore for RedlockStore {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new();
        // The ticket-ordered queue on each master (crate::scripts::redlock).
        caps.fifo = true;
        caps.wake = WakeMethod::Notify;
        caps.lease_model = LeaseModel::PerLock;
        caps.durable_fencing = true;
        caps.durable_leases = false;
        caps.min_ttl = Duration::from_millis(50);
        caps.max_ttl = self.max_ttl;
        caps
    }

    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.round(name, owner, ttl, None).await
    }

    async fn try_lock_waiting(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        let place = Place { ticket: self.ticket(owner), registration_ms: self.registration(ttl) };
        let answer = self.round(name, owner, ttl, Some(place)).await;
        if matches!(answer, Ok(TryLock::Acquired { .. })) {
            self.forget_ticket(owner);
        }
        answer
    }

    /// Withdraws the wait's places (and any partial grant of it) on every master, handing a
    /// master whose head it was to the next waiter.
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.forget_ticket(owner);
        let keys = Keys::new(&self.prefix, name);
        let replies = self.release_everywhere(&keys, &owner.to_hex(), self.request_timeout).await;
        let errors: Vec<LockError> = replies.into_iter().filter_map(Result::err).collect();
        if errors.len() > self.nodes.len() - self.quorum {
            return Err(self.unavailable(self.nodes.len() - errors.len(), &errors));
        }
        Ok(())
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.renew_round(name, owner, ttl).await
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.release_round(name, owner).await
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.notifier.subscribe(&Keys::new(&self.prefix, name).channel, None).await
    }

    /// A release or undo wakes the head of a master's queue only, on the head's client's own
    /// wake channel (`PUBLISH <wake channel> @<owner>`), so each waiter listens there for its
    /// own owner id; the first such message of any master wakes it.
    async fn subscribe_waiter(&self, _name: &LockName, owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        self.notifier.subscribe_waiter(&owner.to_hex()).await
    }
}

impl RedlockStore {
    /// One Redlock round for `owner`; `place` for an attempt of a wait, which registers it in
    /// each master's queue.
    async fn round(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
        place: Option<Place>,
    ) -> Result<TryLock, LockError> {
        let keys = Keys::new(&self.prefix, name);
        let owner = owner.to_hex();
        let ms = ttl_ms(ttl);
        let per_node = self.per_node(ttl);
        let started = Instant::now();
        let n = self.nodes.len();
        let attempt = format!("{:016x}", rand::random::<u64>());

        // Round 1, in parallel: take the lease and read each master's fence floor. Stop
        // waiting as soon as the outcome is decided, so a hung minority costs no validity.
        let mut round1: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let (keys, owner, attempt, boot, wake) =
                    (&keys, &owner, &attempt, &self.boot, self.notifier.wake_channel());
                async move {
                    let reply: Result<Vec<i64>, LockError> = node
                        .run_idempotent(per_node, |c| async move {
                            boot.with_marker(name, |marker| {
                                let mut c = c.clone();
                                async move {
                                    REDLOCK_ACQUIRE
                                        .key(&keys.lock)
                                        .key(&keys.fence)
                                        .key(marker)
                                        .key(&keys.redlock_queue)
                                        .arg(owner)
                                        .arg(ms)
                                        .arg(attempt)
                                        .arg(boot.quiet_ms())
                                        .arg(place.map_or(0, |p| p.registration_ms))
                                        .arg(place.map_or(0, |p| p.ticket))
                                        .arg(&keys.channel)
                                        .arg(RESERVE_MS)
                                        .arg(wake)
                                        .invoke_async(&mut c)
                                        .await
                                }
                            })
                            .await
                        })
                        .await;
                    let vote = match reply.and_then(|r| parse_pair(BACKEND, r)) {
                        Ok((true, floor)) => Vote::Granted { floor },
                        Ok((false, pttl)) => Vote::Held { pttl },
                        Err(e) => Vote::Failed(e),
                    };
                    (index, vote)
                }
            })
            .collect();
        let mut floors = Vec::new();
        let mut pttls = Vec::new();
        let mut errors = Vec::new();
        // The masters that answered "held": this attempt took nothing there.
        let mut refused_by = vec![false; n];
        while let Some((index, vote)) = round1.next().await {
            match vote {
                Vote::Granted { floor } => floors.push(floor),
                Vote::Held { pttl } => {
                    refused_by[index] = true;
                    pttls.push(pttl);
                }
                Vote::Failed(e) => errors.push(e),
            }
            if floors.len() >= self.quorum || pttls.len() + errors.len() > n - self.quorum {
                break;
            }
        }
        drop(round1);

        let mut outcome = None;
        if floors.len() >= self.quorum {
            // The quorum we hold intersects the quorum that stored every earlier token, and
            // each floor is at least that master's clock in µs, so max + 1 is above all of them.
            let max = floors.iter().copied().max().unwrap_or(0);
            let token = token_from(BACKEND, max.saturating_add(1))?;
            let wanted = token.0.to_string();
            // Round 2: a majority must store the token (set-if-greater) before anyone relies
            // on it. A master answering an equal or higher value holds a token we did not see:
            // it does not count towards the majority.
            let validity_left = ttl.saturating_sub(started.elapsed() + lock_core::clock_drift(ttl));
            let bound = per_node.min(validity_left).max(Duration::from_millis(1));
            let mut round2: FuturesUnordered<_> = self
                .nodes
                .iter()
                .map(|node| {
                    // Owned, so that the stores still running once a majority answered can finish.
                    let (node, fence, fence_by) = (Arc::clone(node), keys.fence.clone(), keys.fence_by.clone());
                    let (wanted, attempt) = (wanted.clone(), attempt.clone());
                    async move {
                        let (fence, fence_by, wanted, attempt) = (&fence, &fence_by, &wanted, &attempt);
                        node.run_idempotent(bound, |mut c| async move {
                            REDLOCK_FENCE
                                .key(fence)
                                .key(fence_by)
                                .arg(wanted.as_str())
                                .arg(attempt)
                                .invoke_async::<Vec<i64>>(&mut c)
                                .await
                        })
                        .await
                        .and_then(|r| parse_pair(BACKEND, r))
                    }
                })
                .collect();
            let (mut stored, mut refused, mut store_errors) = (0usize, 0usize, Vec::new());
            while let Some(r) = round2.next().await {
                match r {
                    // Only a store by this attempt counts: an equal counter is another grant's.
                    Ok((true, v)) if u64::try_from(v).ok() == Some(token.0) => stored += 1,
                    Ok(_) => refused += 1,
                    Err(e) => store_errors.push(e),
                }
                if stored >= self.quorum || refused + store_errors.len() > n - self.quorum {
                    break;
                }
            }
            // The other masters' stores finish in the background rather than being dropped (a
            // master still reconnecting would otherwise never get the token): a token kept on
            // more than a majority survives more masters restarting empty before the next
            // grant reads a majority (W − f + R > N). Set-if-greater: a late store never lowers.
            if !round2.is_empty() {
                tokio::spawn(async move { while round2.next().await.is_some() {} });
            }
            let elapsed = started.elapsed();
            let within_validity = elapsed + lock_core::clock_drift(ttl) < ttl;
            if stored >= self.quorum && within_validity {
                return Ok(TryLock::Acquired { token });
            }
            if !within_validity {
                tracing::debug!(lock = %name, ?elapsed, "redlock majority came too late for the ttl; releasing");
            }
            if stored < self.quorum && store_errors.len() > n - self.quorum {
                outcome = Some(Err(self.unavailable(n - store_errors.len(), &store_errors)));
            }
        }

        if outcome.is_none() && errors.len() > n - self.quorum {
            outcome = Some(Err(self.unavailable(n - errors.len(), &errors)));
        }
        if let Some(o) = outcome {
            // `Unavailable` means "outcome unknown": StoreLock releases this owner on every
            // master in the background, so the caller does not wait for unreachable masters.
            return o;
        }
        // No grant: free whatever this attempt took, on every master that did not answer
        // "held" (a lost or unawaited reply may have granted), in the background so that a hung
        // master does not delay the re-try. Only this attempt: the owner's next attempt may
        // reach a master before this undo does. A master that refused holds nothing of this
        // attempt (the undo matches the attempt id, which only a grant writes): no undo there.
        for (node, _) in self.nodes.iter().zip(&refused_by).filter(|(_, refused)| !**refused) {
            let (node, lock, channel) = (Arc::clone(node), keys.lock.clone(), keys.channel.clone());
            let (owner, attempt, queue) = (owner.clone(), attempt.clone(), keys.redlock_queue.clone());
            let wake = self.notifier.wake_channel().to_owned();
            tokio::spawn(async move {
                let (lock, owner, attempt, channel, queue, wake) = (&lock, &owner, &attempt, &channel, &queue, &wake);
                let undone = node
                    .run(per_node, |mut c| async move {
                        REDLOCK_ABANDON
                            .key(lock)
                            .key(queue)
                            .arg(owner)
                            .arg(attempt)
                            .arg(channel)
                            .arg(RESERVE_MS)
                            .arg(wake)
                            .invoke_async::<i64>(&mut c)
                            .await
                    })
                    .await;
                if let Err(e) = undone {
                    tracing::debug!(error = %e, "undo of a failed redlock attempt failed; the ttl frees it");
                }
            });
        }
        if pttls.len() > n - self.quorum {
            // Someone holds a majority: wait at most until the earliest of its leases ends.
            let min = pttls.iter().copied().filter(|p| *p >= 0).min();
            return Ok(TryLock::Held { remaining: min.and_then(remaining_from) });
        }
        // A split vote (contenders each took some masters, before their registrations landed
        // everywhere) or a late round: re-try after a random delay so that contenders do not
        // collide again. A head is woken earlier by the undos and releases of the others.
        let delay = rand::rng().random_range(5..=(per_node.as_millis().clamp(10, 100) as u64));
        Ok(TryLock::Held { remaining: Some(Duration::from_millis(delay)) })
    }

    async fn renew_round(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
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
                        RENEW.key(&keys.lock).arg(owner).arg(ms).invoke_async::<i64>(&mut c).await
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

    async fn release_round(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let keys = Keys::new(&self.prefix, name);
        let owner = owner.to_hex();
        let replies = self.release_everywhere(&keys, &owner, self.request_timeout).await;
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
}
