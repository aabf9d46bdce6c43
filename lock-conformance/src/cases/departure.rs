//! Waiters that leave as the lock is released (docs/contract.md §4): a wait whose deadline, or
//! whose dropped future, races a release a few milliseconds either side either ends with the
//! lease (held, with the server's token) or leaves the lock free for others within 100 ms plus
//! its clean-up's round trips — never a lock held by nobody for the waiter's ttl; and a queued
//! head whose process is killed (SIGKILL, no clean-up at all) holds the next waiter back only
//! for the backend's declared bound.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, Lease, LeaseModel, LockError, LockName};
use rand::RngExt;
use tokio::time::Instant;

use super::fairness::served_behind;
use super::{ensure, fail, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

/// What the contract allows a wait that ended in a live process to keep a free lock from
/// others, before the round trips of its clean-up.
pub const LIVE_DEPARTURE: Duration = Duration::from_millis(100);

/// Races per case: half with the release landing first, half with the departure first.
const RACES: usize = 12;

/// The most the release lands before or after the departure.
const JITTER: Duration = Duration::from_millis(10);

/// How long to give a waiter to queue (its first attempt) before anything is done to it.
fn settle(cx: &Ctx<'_>) -> Duration {
    (cx.ttl() / 4).max(Duration::from_millis(200))
}

/// How a waiter leaves in a race with the release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leaving {
    /// Its `wait(d)` runs out.
    Deadline,
    /// Its `acquire` future is dropped while it is being polled.
    Dropped,
}

/// What one race left behind.
enum Ended {
    /// The waiter got the lease before it left (and held it).
    Held,
    /// It left; the lock was free for others this long after both the departure and the release
    /// (`None`: still taken when the probing gave up), and the slowest round trip of the probes.
    Freed(Option<Duration>, Duration),
}

/// The clients and timings every race of a case shares.
struct Race<'a> {
    cx: &'a Ctx<'a>,
    clients: [Arc<dyn DistributedLock>; 3],
    /// The waiter's options: a long ttl (a grant it never takes up would be obvious), and the
    /// wait `d` for [`Leaving::Deadline`] (ten times it for [`Leaving::Dropped`]).
    waiting: AcquireOptions,
    /// When, after its acquire began, the waiter leaves.
    d: Duration,
    /// The slowest of five `try_acquire` round trips measured on this deployment before the
    /// races.
    rtt: Duration,
}

impl<'a> Race<'a> {
    async fn new(cx: &'a Ctx<'a>, leaving: Leaving) -> Result<Race<'a>, CaseError> {
        let clients = cx.clients::<3>().await?;
        let d = settle(cx);
        let ttl = (cx.ttl() * 20).min(cx.caps.max_ttl);
        let wait = if leaving == Leaving::Deadline { d } else { d * 10 };
        let waiting = AcquireOptions::new(ttl).wait(wait).request_timeout(cx.request_timeout());
        let mut rtt = Duration::ZERO;
        let probe = cx.name("rtt")?;
        for _ in 0..5 {
            let sent = Instant::now();
            let lease = clients[2].try_acquire(&probe, &cx.opts(Duration::ZERO)).await?;
            rtt = rtt.max(sent.elapsed());
            if let Some(l) = lease {
                l.release().await?;
            }
        }
        Ok(Race { cx, clients, waiting, d, rtt })
    }

    /// [`LIVE_DEPARTURE`] plus three round trips of a `try_acquire` (the clean-up's release and
    /// abandon, and the probe's own granularity: a probe refused just before the lock came
    /// free), each the slowest measured before the races or by this race's probes: on a loaded
    /// machine round trips grow during a run, and the bound follows them.
    fn bound(&self, probes: Duration) -> Duration {
        LIVE_DEPARTURE + self.rtt.max(probes) * 3
    }

    /// One race: a holder holds `name`; the waiter queues; the release lands `offset_ms` after
    /// (negative: before) the waiter leaves.
    async fn run(&self, name: &LockName, leaving: Leaving, offset_ms: i64) -> Result<Ended, CaseError> {
        let [a, b, _] = &self.clients;
        // The holder's ttl is the waiter's long one: what races is its explicit release, and a
        // short lease lost to a stalled process (a loaded machine) would end the race early.
        let holding =
            AcquireOptions::new(self.waiting.ttl).wait(self.cx.ttl()).request_timeout(self.cx.request_timeout());
        let held = a.acquire(name, &holding).await?;
        let holder_token = held.token();
        let (began_tx, began_rx) = tokio::sync::oneshot::channel();
        let waiter = {
            let (b, name, opts) = (b.clone(), name.clone(), self.waiting.clone());
            tokio::spawn(async move {
                let _ = began_tx.send(Instant::now());
                let r = b.acquire(&name, &opts).await;
                (r, Instant::now())
            })
        };
        let began = began_rx.await.map_err(|_| CaseError::Failed("the waiter task never started".into()))?;
        let leaves = began + self.d;
        let offset = Duration::from_millis(offset_ms.unsigned_abs());
        let release_at = if offset_ms < 0 { leaves - offset } else { leaves + offset };
        let release = tokio::spawn(async move {
            tokio::time::sleep_until(release_at).await;
            let r = held.release().await;
            (r, Instant::now())
        });
        let mut departed = None;
        if leaving == Leaving::Dropped {
            tokio::time::sleep_until(leaves).await;
            waiter.abort();
            departed = Some(Instant::now());
        }
        let got = waiter.await;
        let (released, released_at) =
            release.await.map_err(|e| CaseError::Failed(format!("the release task panicked: {e}")))?;
        released?;
        let departed = match got {
            Ok((Ok(lease), _)) => return self.holds(name, lease, holder_token).await.map(|()| Ended::Held),
            Ok((Err(LockError::Timeout { .. }), at)) if leaving == Leaving::Deadline => at,
            Ok((Err(e), _)) => fail!("the waiter failed with {e} (release {offset_ms:+} ms from its departure)"),
            Err(e) if e.is_cancelled() => departed.unwrap_or_else(Instant::now),
            Err(e) => fail!("the waiter panicked: {e}"),
        };
        let (after, probes) = self.freed_after(name, departed.max(released_at)).await?;
        Ok(Ended::Freed(after, probes))
    }

    /// The waiter that got the lease holds it: valid, a token above the holder's, and nobody
    /// else gets the lock.
    async fn holds(&self, name: &LockName, lease: Lease, holder: lock_core::FencingToken) -> Result<(), CaseError> {
        let others = self.clients[2].try_acquire(name, &self.cx.opts(Duration::ZERO)).await?;
        let (valid, token) = (lease.is_valid(), lease.token());
        lease.release().await?;
        ensure!(others.is_none(), "the waiter returned a lease but another client got the lock too");
        ensure!(valid, "the waiter returned a lease that is not valid");
        ensure!(token > holder, "the waiter's token {token} is not above the former holder's {holder}");
        Ok(())
    }

    /// Probes with `try_acquire` until the lock is free; how long after `from` the successful
    /// probe was sent, or `None` if it was still taken well past the bound (but long before the
    /// waiter's ttl); and the slowest probe's round trip.
    async fn freed_after(&self, name: &LockName, from: Instant) -> Result<(Option<Duration>, Duration), CaseError> {
        let give_up = from + self.bound(Duration::ZERO) * 4 + self.cx.ttl();
        let mut slowest = Duration::ZERO;
        loop {
            let sent = Instant::now();
            let probe = self.clients[2].try_acquire(name, &self.cx.opts(Duration::ZERO)).await?;
            slowest = slowest.max(sent.elapsed());
            if let Some(lease) = probe {
                lease.release().await?;
                return Ok((Some(sent.saturating_duration_since(from)), slowest));
            }
            if sent >= give_up {
                return Ok((None, slowest));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Runs [`RACES`] races of `leaving` against the release, the release landing within
/// [`JITTER`] before the departure in half of them and after it in the other half.
async fn races(cx: &Ctx<'_>, leaving: Leaving) -> CaseResult {
    let race = Race::new(cx, leaving).await?;
    let (mut held, mut worst, mut widest) = (0, Duration::ZERO, race.bound(Duration::ZERO));
    for i in 0..RACES {
        let size = rand::rng().random_range(0..=JITTER.as_millis() as i64);
        let offset_ms = if i % 2 == 0 { -size } else { size };
        let name = cx.name(&format!("race-{i}"))?;
        match race.run(&name, leaving, offset_ms).await? {
            Ended::Held => held += 1,
            Ended::Freed(after, probes) => {
                let bound = race.bound(probes);
                let when = match after {
                    Some(after) => format!("only {} ms after both", ms(after)),
                    None => format!("not even {} ms after both", ms(race.bound(Duration::ZERO) * 4 + cx.ttl())),
                };
                let after = after.unwrap_or(Duration::MAX);
                ensure!(
                    after <= bound,
                    "race {i} (release {offset_ms:+} ms from the waiter's {leaving:?} departure): the lock was free \
                     for others {when} (bound {} ms: {} ms plus three round trips of {} ms, the slowest measured); \
                     a waiter that leaves in a live process must not keep it (its ttl is {} ms)",
                    ms(bound),
                    ms(LIVE_DEPARTURE),
                    ms(race.rtt.max(probes)),
                    ms(race.waiting.ttl)
                );
                worst = worst.max(after);
                widest = widest.max(bound);
            }
        }
    }
    Ok(format!(
        "{RACES} races: {held} ended with the waiter holding, {} left; the lock free at most {} ms later (bound at \
         most {} ms)",
        RACES - held,
        ms(worst),
        ms(widest)
    ))
}

/// A waiter's `wait(d)` deadline races the holder's release (within a few ms, both orders):
/// it returns the lease and holds it, or `Timeout` and the lock is free for others within
/// 100 ms plus three round trips.
pub async fn wait_deadline_races_release(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "wait_deadline_races_release").await?;
    races(&cx, Leaving::Deadline).await
}

/// A waiter's `acquire` future, polled all along, is dropped a few ms before or after the
/// holder's release (unlike `waiter_departed_at_grant`, whose future is not polled while the
/// release runs): it either got the lease and holds it, or the lock is free for others within
/// 100 ms plus three round trips.
pub async fn dropped_wait_races_release(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "dropped_wait_races_release").await?;
    races(&cx, Leaving::Dropped).await
}

/// The poll interval the contract gives a waiter of ttl `ttl` (`clamp(ttl/4, 20 ms, 500 ms)`).
fn max_poll(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(20), Duration::from_millis(500))
}

/// The longest a killed head of ttl `head` may hold a free lock back from a waiter of ttl
/// `next`: the longer of the fixture's untaken-grant bound (the release granted it to the dead
/// head) and a queue entry's life after its waiter's last attempt (`12 × max_poll + 250 ms`,
/// the SQL queue's, the longest of the bundled backends), plus the next waiter's re-try
/// interval (`4 × max_poll`), the session for per-session leases, and a second for a loaded
/// machine.
fn killed_head_bound(cx: &Ctx<'_>, head: Duration, next: Duration) -> Duration {
    let queue = max_poll(head) * 12 + Duration::from_millis(250);
    let session = if cx.caps.lease_model == LeaseModel::PerSession { cx.expiry() } else { Duration::ZERO };
    cx.fx.untaken_grant_bound().max(queue) + max_poll(next) * 4 + session + Duration::from_secs(1)
}

/// A holder holds; a waiter in a process of its own ([`Fixture::queued_waiter`]) queues with a
/// long ttl; the next waiter queues behind it; the first is killed with SIGKILL and the holder
/// releases: the next waiter is served within the longer of the fixture's
/// [`Fixture::untaken_grant_bound`] and a queue entry's life (`12 × max_poll + 250 ms` of the
/// head's ttl, the SQL queue's), plus its own re-try interval (`4 × max_poll`), the session for
/// per-session leases and a second — never after the dead head's ttl.
pub async fn queued_head_killed(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "queued_head_killed").await?;
    let name = cx.name("killed")?;
    let [a, w] = cx.clients().await?;
    let head_ttl = (cx.ttl() * 20).max(Duration::from_secs(30)).min(cx.caps.max_ttl);
    let bound = killed_head_bound(&cx, head_ttl, cx.ttl());
    let held = a.acquire(&name, &cx.opts(cx.ttl())).await?;
    let head_opts = AcquireOptions::new(head_ttl).wait(head_ttl * 2).request_timeout(cx.request_timeout());
    let mut head = match fx.queued_waiter(&name, &head_opts).await {
        Ok(Some(head)) => head,
        Ok(None) => {
            return Err(CaseError::NotApplicable(
                "the fixture offers no waiter in a process of its own (Fixture::queued_waiter)".into(),
            ))
        }
        Err(e) => return Err(CaseError::Skipped(format!("the fixture could not start a queued waiter: {e}"))),
    };
    tokio::time::sleep(settle(&cx) * 2).await;
    let next = {
        let (w, name, opts) = (w.clone(), name.clone(), cx.opts(bound + cx.ttl() * 2));
        tokio::spawn(async move { w.acquire(&name, &opts).await.map(|l| (l, Instant::now())) })
    };
    tokio::time::sleep(settle(&cx)).await;
    if let Some(said) = head.finished().await {
        fail!("the waiting process ended or got the lock while it was held: {said}");
    }
    head.kill().await.map_err(|e| CaseError::Skipped(format!("could not kill the waiting process: {e}")))?;
    let released = Instant::now();
    held.release().await?;
    let why = format!("; the head's ttl {} ms", ms(head_ttl));
    let delay = served_behind(next.await, released, bound, "a killed head", &why).await?;
    Ok(format!("next waiter served {} ms after the release behind a killed head (bound {} ms)", ms(delay), ms(bound)))
}
