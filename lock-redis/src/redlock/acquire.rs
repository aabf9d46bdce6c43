//! Redlock's acquire round, in its steps: the **lease step** takes the lease on every master
//! and reads each one's fence floor; the **fence store** makes the token `max + 1` durable on a
//! majority (set-if-greater) before anyone relies on it; the **undo** frees what a failed
//! attempt took. A waiting attempt carries its ticket ([`Place`]) into every master's queue.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::{
    backend::{LeaseStore, TryLock},
    FencingToken, LockError, LockName, OwnerId,
};
use rand::RngExt;
use tokio::time::Instant;

use super::store::{RedlockStore, BACKEND};
use crate::conn::Node;
use crate::reply::{parse_pair, remaining_from, token_from, too_many_waiters, ttl_ms};
use crate::scripts::{Keys, RedlockAcquire, RedlockFence, RedlockUndo, Terms};
use crate::single::RESERVE_MS;

/// What a waiting attempt registers on each master: its ticket and how long the place lasts.
#[derive(Clone, Copy)]
struct Place {
    ticket: u64,
    registration_ms: u64,
}

/// One master's answer to the lease step.
enum Vote {
    Granted {
        floor: i64,
        /// The token of a release's grant that this master confirmed ("Tokens left by the release",
        /// `crate::scripts::redlock`).
        handed: Option<i64>,
    },
    Held {
        pttl: i64,
    },
    /// The master's queue is full (`max_waiters`): not registered, nothing taken.
    Capped {
        cap: i64,
    },
    /// The master lost its state and grants nothing for `left` ms (the restart quiet period).
    Quiet {
        left: i64,
    },
    Failed(LockError),
}

/// The facts of one acquire attempt, the same on every master.
struct Attempt<'a> {
    name: &'a LockName,
    keys: Keys,
    owner: String,
    ttl: Duration,
    ttl_ms: u64,
    /// The bound of each master's call in the lease step ([`RedlockStore::per_node`]).
    per_node: Duration,
    /// When the round began: the validity counts from here.
    started: Instant,
    /// Random, stored with the lease, so that the undo frees this attempt and no later one.
    id: String,
    place: Option<Place>,
}

/// What the masters answered to the lease step, as far as the round waited.
struct Votes {
    floors: Vec<i64>,
    /// The tokens of the confirmed grants among the grants.
    handed: Vec<i64>,
    pttls: Vec<i64>,
    errors: Vec<LockError>,
    /// The masters that answered "held" (or "full"): this attempt took nothing there.
    refused_by: Vec<bool>,
    /// A master's queue was full: its cap.
    capped: Option<i64>,
    /// The quiet time left (ms) of each master that answered that it is in its quiet period.
    quiet: Vec<i64>,
}

/// How the fence store ended.
enum Fenced {
    /// A majority stored the token within the validity: the lock is held.
    Granted(FencingToken),
    /// Too many masters failed to answer: the outcome is unknown.
    Unavailable(LockError),
    /// Refused by a majority or too late: no grant, re-try.
    Refused,
}

impl RedlockStore {
    /// A single try: no place in the queues.
    pub(super) async fn single_try(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<TryLock, LockError> {
        self.round(name, owner, ttl, None).await
    }

    /// An attempt of a wait: registers its ticket in each master's queue; a grant ends the
    /// wait, which forgets the ticket.
    pub(super) async fn waiting_try(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<TryLock, LockError> {
        let place = Place { ticket: self.ticket(owner), registration_ms: self.registration(ttl) };
        let answer = self.round(name, owner, ttl, Some(place)).await;
        if matches!(answer, Ok(TryLock::Acquired { .. })) {
            self.forget_ticket(owner);
        }
        answer
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

    pub(super) fn forget_ticket(&self, owner: OwnerId) {
        self.tickets.lock().unwrap_or_else(|e| e.into_inner()).remove(&owner);
    }

    /// How long a waiter's place lasts on a master without a re-try (ms): `StoreLock` re-tries a
    /// notified wait at least every 4 × `max_poll_interval` plus one attempt (two rounds, each
    /// at most `request_timeout`); twice that, so one late re-try does not cost the place.
    fn registration(&self, ttl: Duration) -> u64 {
        let retry = self.max_poll_interval(ttl).saturating_mul(4) + self.request_timeout.saturating_mul(2);
        ttl_ms(retry.saturating_mul(2))
    }

    /// One Redlock round for `owner`; `place` for an attempt of a wait, which registers it in
    /// each master's queue.
    async fn round(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
        place: Option<Place>,
    ) -> Result<TryLock, LockError> {
        let attempt = Attempt {
            name,
            keys: Keys::new(&self.prefix, name),
            owner: owner.to_hex(),
            ttl,
            ttl_ms: ttl_ms(ttl),
            per_node: self.per_node(ttl),
            started: Instant::now(),
            id: format!("{:016x}", rand::random::<u64>()),
            place,
        };
        let votes = self.lease_step(&attempt).await;
        tracing::trace!(
            lock = %name, waiting = place.is_some(), floors = votes.floors.len(), handed = ?votes.handed,
            held = votes.pttls.len(), quiet = votes.quiet.len(), errors = votes.errors.len(), "redlock lease step"
        );
        let n = self.nodes.len();
        let mut outcome = None;
        if let Some(token) = handed_majority(&votes.handed, self.quorum) {
            if within_validity(&attempt) {
                return Ok(TryLock::Acquired { token: token_from(BACKEND, token)? });
            }
        }
        if votes.floors.len() >= self.quorum {
            match self.fence_store(&attempt, &votes.floors).await? {
                Fenced::Granted(token) => return Ok(TryLock::Acquired { token }),
                Fenced::Unavailable(e) => outcome = Some(e),
                Fenced::Refused => {}
            }
        }
        if outcome.is_none() && votes.errors.len() > n - self.quorum {
            outcome = Some(self.unavailable(n - votes.errors.len(), &votes.errors));
        }
        if let Some(e) = outcome {
            // `Unavailable` means "outcome unknown": StoreLock releases this owner on every
            // master in the background, so the caller does not wait for unreachable masters.
            return Err(e);
        }
        self.undo(&attempt, &votes.refused_by);
        if let Some(cap) = votes.capped {
            return Err(too_many_waiters(name, cap));
        }
        Ok(self.refusal(&votes, attempt.per_node))
    }

    /// The lease step, on every master in parallel: take the lease and read each master's fence
    /// floor. Stops waiting as soon as the outcome is decided, so a hung minority costs no
    /// validity.
    async fn lease_step(&self, attempt: &Attempt<'_>) -> Votes {
        let n = self.nodes.len();
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| async move { (index, self.lease_vote(node, attempt).await) })
            .collect();
        let mut votes = Votes {
            floors: Vec::new(),
            handed: Vec::new(),
            pttls: Vec::new(),
            errors: Vec::new(),
            refused_by: vec![false; n],
            capped: None,
            quiet: Vec::new(),
        };
        while let Some((index, vote)) = pending.next().await {
            match vote {
                Vote::Granted { floor, handed } => {
                    votes.floors.push(floor);
                    votes.handed.extend(handed);
                }
                Vote::Held { pttl } => {
                    votes.refused_by[index] = true;
                    votes.pttls.push(pttl);
                }
                Vote::Capped { cap } => {
                    votes.refused_by[index] = true;
                    votes.pttls.push(-1);
                    votes.capped = Some(cap);
                }
                Vote::Quiet { left } => {
                    votes.refused_by[index] = true;
                    votes.quiet.push(left);
                }
                Vote::Failed(e) => votes.errors.push(e),
            }
            let refused = votes.pttls.len() + votes.quiet.len();
            if votes.floors.len() >= self.quorum || refused + votes.errors.len() > n - self.quorum {
                break;
            }
        }
        votes
    }

    /// One master's answer to the lease step.
    async fn lease_vote(&self, node: &Node, attempt: &Attempt<'_>) -> Vote {
        let terms = Terms {
            owner: &attempt.owner,
            ttl_ms: attempt.ttl_ms,
            quiet_ms: self.boot.quiet_ms(),
            registration_ms: attempt.place.map_or(0, |p| p.registration_ms),
            reserve_ms: RESERVE_MS,
            wake: self.notifier.wake_channel(),
            max_waiters: self.max_waiters,
        };
        let call = RedlockAcquire {
            keys: &attempt.keys,
            terms,
            attempt: &attempt.id,
            ticket: attempt.place.map_or(0, |p| p.ticket),
        };
        let (boot, name) = (&self.boot, attempt.name);
        let reply = node
            .run_idempotent(attempt.per_node, |c| async move {
                boot.with_marker(name, |marker| {
                    let mut c = c.clone();
                    async move { call.invoke(&marker, &mut c).await }
                })
                .await
            })
            .await;
        match reply.as_deref() {
            Ok([3, cap]) => return Vote::Capped { cap: *cap },
            Ok([2, left]) => return Vote::Quiet { left: *left },
            Ok([4, token, floor]) => return Vote::Granted { floor: *floor, handed: Some(*token) },
            _ => {}
        }
        match reply.and_then(|r| parse_pair(BACKEND, r)) {
            Ok((true, floor)) => Vote::Granted { floor, handed: None },
            Ok((false, pttl)) => Vote::Held { pttl },
            Err(e) => Vote::Failed(e),
        }
    }

    /// The fence store: a majority must store the token (set-if-greater) before anyone relies
    /// on it, all within the validity. The quorum we hold intersects the quorum that stored
    /// every earlier token, and each floor is at least that master's clock in µs, so max + 1 is
    /// above all of them. A master answering an equal or higher value holds a token we did not
    /// see: it does not count towards the majority.
    async fn fence_store(&self, attempt: &Attempt<'_>, floors: &[i64]) -> Result<Fenced, LockError> {
        let n = self.nodes.len();
        let max = floors.iter().copied().max().unwrap_or(0);
        let token = token_from(BACKEND, max.saturating_add(1))?;
        let wanted = token.0.to_string();
        let (ttl, started) = (attempt.ttl, attempt.started);
        let validity_left = ttl.saturating_sub(started.elapsed() + lock_core::clock_drift(ttl));
        let bound = attempt.per_node.min(validity_left).max(Duration::from_millis(1));
        let mut stores: FuturesUnordered<_> =
            self.nodes.iter().map(|node| fence_on(Arc::clone(node), attempt, &wanted, bound)).collect();
        let (mut stored, mut refused, mut store_errors) = (0usize, 0usize, Vec::new());
        while let Some(r) = stores.next().await {
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
        if !stores.is_empty() {
            tokio::spawn(async move { while stores.next().await.is_some() {} });
        }
        let in_time = within_validity(attempt);
        if stored >= self.quorum && in_time {
            return Ok(Fenced::Granted(token));
        }
        if !in_time {
            let elapsed = started.elapsed();
            tracing::debug!(lock = %attempt.name, ?elapsed, "redlock majority came too late for the ttl; releasing");
        }
        if stored < self.quorum && store_errors.len() > n - self.quorum {
            return Ok(Fenced::Unavailable(self.unavailable(n - store_errors.len(), &store_errors)));
        }
        Ok(Fenced::Refused)
    }

    /// The undo of an attempt without a grant: free whatever it took, on every master that did
    /// not answer "held" (a lost or unawaited reply may have granted), in the background so
    /// that a hung master does not delay the re-try. Only this attempt: the owner's next
    /// attempt may reach a master before this undo does. A master that refused holds nothing
    /// of this attempt (the undo matches the attempt id, which only a grant writes): no undo
    /// there.
    fn undo(&self, attempt: &Attempt<'_>, refused_by: &[bool]) {
        for (node, _) in self.nodes.iter().zip(refused_by).filter(|(_, refused)| !**refused) {
            let (node, keys, owner, id) =
                (Arc::clone(node), attempt.keys.clone(), attempt.owner.clone(), attempt.id.clone());
            let (wake, per_node) = (self.notifier.wake_channel().to_owned(), attempt.per_node);
            tokio::spawn(async move {
                let call =
                    RedlockUndo { keys: &keys, owner: &owner, attempt: &id, reserve_ms: RESERVE_MS, wake: &wake };
                let undone = node.run(per_node, |mut c| async move { call.invoke(&mut c).await }).await;
                if let Err(e) = undone {
                    tracing::debug!(error = %e, "undo of a failed redlock attempt failed; the ttl frees it");
                }
            });
        }
    }

    /// The answer of a round without a grant: masters in their restart quiet period that keep a
    /// majority out (said out loud, as on a single instance: no first lock waits in silence), or
    /// someone holds a majority (wait at most until the earliest of its leases ends), or a split
    /// vote or a late round (contenders each took some masters, before their registrations landed
    /// everywhere): re-try after a random delay so that contenders do not collide again. A head is
    /// woken earlier by the undos and releases of the others.
    fn refusal(&self, votes: &Votes, per_node: Duration) -> TryLock {
        if let Some(remaining) = quiet_majority(&votes.quiet, self.nodes.len(), self.quorum) {
            self.boot.announce_quiet(remaining);
            return TryLock::Quiet { remaining };
        }
        if votes.pttls.len() + votes.quiet.len() > self.nodes.len() - self.quorum {
            let min = votes.pttls.iter().copied().filter(|p| *p >= 0).min();
            return TryLock::Held { remaining: min.and_then(remaining_from) };
        }
        let delay = rand::rng().random_range(5..=(per_node.as_millis().clamp(10, 100) as u64));
        TryLock::Held { remaining: Some(Duration::from_millis(delay)) }
    }
}

/// Whether the attempt's lease, counted from the round's start, is still valid by this
/// client's clock (less the drift margin).
fn within_validity(attempt: &Attempt<'_>) -> bool {
    attempt.started.elapsed() + lock_core::clock_drift(attempt.ttl) < attempt.ttl
}

/// The token of a release's grant that a majority (`quorum`) confirmed, all naming the same
/// token: each stored it as its counter before the grant, so a majority holds it, as after a
/// fence store, and the round needs none. Grants with different tokens (releases that reached
/// masters in different states) confirm nothing together: the largest is stored on fewer
/// masters than a majority, so the next majority might not see it.
fn handed_majority(handed: &[i64], quorum: usize) -> Option<i64> {
    handed.iter().copied().find(|t| handed.iter().filter(|u| *u == t).count() >= quorum)
}

/// When masters in their quiet period (`quiet`: the ms each has left) are too many for the
/// others to make a majority of `n` (`quorum`), how long until enough of them can grant again;
/// `None` when they do not keep a majority out.
fn quiet_majority(quiet: &[i64], n: usize, quorum: usize) -> Option<Duration> {
    let must_wait_for = (quorum + quiet.len()).checked_sub(n).filter(|k| *k > 0)?;
    let mut left: Vec<i64> = quiet.to_vec();
    left.sort_unstable();
    left.get(must_wait_for - 1).map(|ms| Duration::from_millis(u64::try_from(*ms).unwrap_or(0)))
}

/// One master's fence store of `wanted` (set-if-greater). Owns what it needs, so that the
/// stores still running once a majority answered can finish in the background.
fn fence_on(
    node: Arc<Node>,
    attempt: &Attempt<'_>,
    wanted: &str,
    bound: Duration,
) -> impl Future<Output = Result<(bool, i64), LockError>> + Send + 'static {
    let (keys, id, wanted) = (attempt.keys.clone(), attempt.id.clone(), wanted.to_owned());
    async move {
        let call = RedlockFence { keys: &keys, token: &wanted, attempt: &id };
        node.run_idempotent(bound, |mut c| async move { call.invoke(&mut c).await })
            .await
            .and_then(|r| parse_pair(BACKEND, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_majority_naming_one_token_confirms_a_grant() {
        // (confirmed grants' tokens, quorum) → the token held without a fence store.
        let table: [(&[i64], usize, Option<i64>); 7] = [
            (&[], 2, None),
            (&[7], 2, None),
            (&[7, 7], 2, Some(7)),
            (&[7, 9], 2, None),
            (&[9, 7, 7], 2, Some(7)),
            (&[7, 9, 11], 2, None),
            (&[7], 1, Some(7)),
        ];
        for (handed, quorum, want) in table {
            assert_eq!(handed_majority(handed, quorum), want, "{handed:?} (quorum {quorum})");
        }
    }

    #[test]
    fn quiet_masters_are_said_only_when_they_keep_a_majority_out() {
        let ms = |v: u64| Some(Duration::from_millis(v));
        // (quiet masters' time left, masters, quorum) → the wait to announce.
        let table: [(&[i64], usize, usize, Option<Duration>); 7] = [
            (&[], 5, 3, None),
            (&[900], 5, 3, None),
            (&[900, 100], 5, 3, None),
            // Three of five quiet: two others cannot make three; the first to end decides.
            (&[900, 100, 500], 5, 3, ms(100)),
            // All five quiet: three must end, the third-soonest decides.
            (&[900, 100, 500, 300, 700], 5, 3, ms(500)),
            (&[60_000], 1, 1, ms(60_000)),
            (&[0, 0], 3, 2, ms(0)),
        ];
        for (quiet, n, quorum, want) in table {
            assert_eq!(quiet_majority(quiet, n, quorum), want, "{quiet:?} of {n} (quorum {quorum})");
        }
    }
}
