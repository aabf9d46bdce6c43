//! The single-instance backend through Redis Sentinel (`redis+sentinel://`), against a local
//! primary + 2 replicas + 3 Sentinels: failovers, `min_replicas_ack`, an empty restart. The
//! conformance suite runs in `sentinel_conformance.rs`.

mod common;

use std::time::{Duration, Instant};

use dlock_testkit::servers::redis_sentinel::{RedisSentinelDeployment, SentinelNode};
use lock_core::{
    AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName, LockService,
};
use lock_redis::RedisOptions;

fn options(acks: u32) -> RedisOptions {
    RedisOptions { key_prefix: "dlock".to_owned(), min_replicas_ack: acks, ..common::test_options() }
}

/// A client of the deployment whose grants `acks` replicas must acknowledge.
async fn client(d: &RedisSentinelDeployment, acks: u32) -> lock_redis::RedisLock {
    lock_redis::connect(&d.url(), options(acks)).await.unwrap()
}

/// A fresh deployment, a client whose grants one replica must acknowledge, and one without.
async fn acked_and_plain() -> (RedisSentinelDeployment, lock_redis::RedisLock, lock_redis::RedisLock) {
    let d = RedisSentinelDeployment::start().await.unwrap();
    let (acked, plain) = (client(&d, 1).await, client(&d, 0).await);
    (d, acked, plain)
}

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new(Duration::from_millis(ttl_ms))
        .wait(Duration::from_secs(1))
        .request_timeout(Duration::from_secs(1))
}

/// With `min_replicas_ack = 1`: a holder keeps its lease across a SIGKILL of the primary (the
/// promoted replica acknowledged the grant), nobody else gets the lock meanwhile, the clients
/// follow the new primary, and tokens keep rising. Prints the measured windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_keeps_acknowledged_lease() {
    failover_window(1).await;
}

/// The same failover without `min_replicas_ack`: the grant stands on the primary alone. Here the
/// replicas are healthy and idle, so the grant reached them within the second before the kill
/// and the lease survives; what the test proves is the window and that no second holder got in
/// in this run — not a guarantee (README, "Redis Sentinel": an unreplicated grant is lost with
/// the primary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_window_without_acks() {
    failover_window(0).await;
}

/// The failover holder's ttl (see `failover_window`). After the failover the lease must be
/// renewed on the new primary, and with `min_replicas_ack` a renewal counts only once the
/// surviving replica has re-attached to it (Sentinel reconfigures it after the promotion): on a
/// loaded machine a 6 s lease, kept for up to 10 s more while the test waits for the waiter's
/// subscriber, was lost before its release (a full run, once; most likely that wait, as renewals
/// are retried, not refused; the failure message now says the lease's own reason).
const HOLDER_TTL_MS: u64 = 12_000;

async fn failover_window(acks: u32) {
    let d = RedisSentinelDeployment::start().await.unwrap();
    let holder = client(&d, acks).await;
    let other = client(&d, acks).await;
    let name = LockName::new("sentinel-failover").unwrap();
    let free = LockName::new("sentinel-free").unwrap();
    // The holder's ttl covers the failover with room (SIGKILL, 2 s down-after, election, the
    // client finding the new primary: 2.5-4 s here, more on a loaded machine); what is tested
    // is that an acknowledged lease survives a failover shorter than its ttl, not how short.
    // A fresh deployment on a loaded machine can take longer than one attempt's acknowledgement
    // wait (half the request timeout) for its first grants: those waits retry for as long as 10 s
    // (once in six loaded runs: "0 of the 1 replicas … acknowledged it within 375 ms").
    let settle = Duration::from_secs(10);
    let lease = holder.acquire(&name, &opts(HOLDER_TTL_MS).wait(settle)).await.unwrap();
    let t1 = lease.token();
    let before = other.acquire(&free, &opts(3000).wait(settle)).await.unwrap();
    before.release().await.unwrap();

    let failover = tokio::spawn(async move {
        let f = d.failover().await;
        (d, f)
    });
    // Meanwhile a contender tries without pause; it must never get in while the lease is valid,
    // and a free name shows how long nobody could acquire anything.
    let started = Instant::now();
    let (mut last_ok, mut longest_gap, mut i) = (Instant::now(), Duration::ZERO, 0);
    let mut last_token = before.token();
    while !failover.is_finished() || started.elapsed() < Duration::from_secs(8) {
        if let Ok(Some(l)) = other.try_acquire(&name, &opts(3000)).await {
            assert!(!lease.is_valid(), "a second holder got in while the first lease was valid ({l:?})");
            break;
        }
        i += 1;
        let fresh = LockName::new(format!("sentinel-free-{i}")).unwrap();
        if let Ok(Some(l)) = other.try_acquire(&fresh, &opts(3000)).await {
            longest_gap = longest_gap.max(last_ok.elapsed());
            last_ok = Instant::now();
            assert!(l.token() > last_token, "token went from {last_token} to {}", l.token());
            last_token = l.token();
            let _ = l.release().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (d, f) = failover.await.unwrap();
    let f = f.unwrap();
    let followed_at = Instant::now();
    assert!(
        lease.is_valid(),
        "the acknowledged lease (ttl {HOLDER_TTL_MS} ms) was lost across a failover that promoted after {:?}: {:?}",
        f.promoted_after,
        lease.lost().reason()
    );
    assert_ne!(d.primary_index().await.unwrap(), f.old);
    // A waiter on the new primary is woken by the release's message: the subscriber followed.
    let other = std::sync::Arc::new(other);
    let waiter = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move {
            let l = other.acquire(&name, &opts(3000).wait(Duration::from_secs(10))).await;
            (l, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The waiter's subscriber has followed the failover once the new primary lists its channel:
    // its client's wake channel (`<prefix>:wake:<id>`, where a release hands the lock to a
    // queued waiter). How long that takes on a loaded machine is not what this checks (once in
    // a full run it took longer than the half second above): the release's message reaching it
    // is. Only that channel counts: the Sentinels keep `__sentinel__:hello` subscribed on every
    // primary, so "any channel" was true at once and the wait checked nothing.
    let primary = d.primary().await.unwrap();
    let pattern = "*:wake:*";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let channels = dlock_testkit::servers::redis_sentinel::command(primary, &["PUBSUB", "CHANNELS", pattern]).await;
        if channels.as_deref().is_ok_and(|c| !c.starts_with("*0")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter's subscriber did not follow the failover within 10 s: {channels:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // With min_replicas_ack, the grant the release hands over waits for a replica of the new
    // primary: after the failover that one re-synchronises with it first, which on a loaded
    // machine outlasted the waiter's three attempts in a row (once in a full run: "0 of the 1
    // replicas … acknowledged it within 375 ms"). What is tested is the hand-over, so it starts
    // once a replica is online. Within 30 s: a replica that must fully resync waits Redis's 5 s
    // diskless-sync delay, then the fork; under a full run's load 10 s was too short once
    // (`wait_bgsave`). A delay of 0 in the deployment moved that fork into the no-acks case's
    // measured hand-off instead (woken after 1.4 s, the next full run), so the delay stays.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = dlock_testkit::servers::redis_sentinel::command(primary, &["INFO", "replication"]).await;
        if acks == 0 || info.as_deref().is_ok_and(|i| i.matches("state=online").count() >= acks as usize) {
            break;
        }
        assert!(Instant::now() < deadline, "no replica of the new primary came online within 30 s: {info:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let released = Instant::now();
    if let Err(e) = lease.release().await {
        panic!(
            "the lease was lost after the failover ({e}; {:?}; the failover ended {:?} before the release)",
            lease.lost().reason(),
            released.saturating_duration_since(followed_at)
        );
    }
    let (next, got) = waiter.await.unwrap();
    let next = next.unwrap();
    let woken_after = got - released;
    assert!(next.token() > t1, "token went from {t1} to {} across the failover", next.token());
    assert!(
        woken_after < Duration::from_millis(1000),
        "the waiter was not notified, it re-tried after {woken_after:?}"
    );
    next.release().await.unwrap();
    eprintln!(
        "MEASURED sentinel failover (min_replicas_ack={acks}): promoted {:?} after the SIGKILL; longest time no \
         free name could be acquired: {longest_gap:?}; a waiter got the lock {woken_after:?} after the release",
        f.promoted_after
    );
    assert!(last_ok > started + f.promoted_after, "nothing could be acquired after the promotion");
}

/// Both replicas paused: a grant cannot be acknowledged, so with `min_replicas_ack = 1` it is
/// given back and answered `Unavailable` (without the `WAIT` it would stand on the primary
/// alone, and a failover to a replica that never received it would forget it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_grant_is_refused() {
    let (d, acked, plain) = acked_and_plain().await;
    let name = LockName::new("sentinel-unacked").unwrap();
    d.pause(SentinelNode::Data(1), true);
    d.pause(SentinelNode::Data(2), true);
    let started = Instant::now();
    let refused = acked.try_acquire(&name, &opts(5000)).await;
    let refused_after = started.elapsed();
    // The read-write lock's and the semaphore's grants too (they WAITed for nothing before:
    // the Sentinel suite's kinds_nemesis saw a writer overlap a reader after a failover).
    let rw = lock_redis::connect_rw(&d.url(), options(1)).await.unwrap();
    let sem = lock_redis::connect_semaphore(&d.url(), options(1)).await.unwrap();
    let kinds = [
        ("read", rw.try_acquire_read(&name, &opts(5000)).await.map(|l| l.is_some())),
        ("write", rw.try_acquire_write(&name, &opts(5000)).await.map(|l| l.is_some())),
        ("permit", sem.try_acquire_permit(&name, 2, &opts(5000)).await.map(|l| l.is_some())),
    ];
    d.pause(SentinelNode::Data(1), false);
    d.pause(SentinelNode::Data(2), false);
    assert!(
        matches!(refused, Err(LockError::Unavailable { .. })),
        "a grant no replica acknowledged was answered {refused:?}"
    );
    for (kind, r) in kinds {
        assert!(matches!(r, Err(LockError::Unavailable { .. })), "an unacknowledged {kind} grant was answered {r:?}");
    }
    // The refused grant was given back: the lock is free.
    let l = plain.try_acquire(&name, &opts(5000)).await.unwrap().expect("the refused grant was released");
    l.release().await.unwrap();
    // Replicas back: the same client is granted, acknowledged. A replica just resumed may miss
    // the first `WAIT` window (500 ms) on a loaded machine, so the grant is asked for until one
    // is acknowledged, for at most 10 s (a CI run failed here once, at 8 s, under full load).
    let back = Instant::now();
    let mut answers = Vec::new();
    let l = loop {
        match acked.try_acquire(&name, &opts(5000)).await {
            Ok(Some(l)) => break l,
            other => answers.push(format!("{other:?}")),
        }
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "no acknowledged grant 10 s after the replicas resumed: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    l.release().await.unwrap();
    eprintln!("MEASURED unacknowledged grant refused after {refused_after:?}; acknowledged again after {answers:?}");
}

/// Acquire latency with and without `min_replicas_ack` (healthy replicas): rounds interleaved so
/// that load from other processes hits every setting alike; the median round is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure_ack_cost() {
    let d = RedisSentinelDeployment::start().await.unwrap();
    let mut clients = Vec::new();
    for acks in [0, 1, 2] {
        clients.push((acks, client(&d, acks).await, Vec::new()));
    }
    let n = 200u32;
    for round in 0..5 {
        for (acks, c, rounds) in clients.iter_mut() {
            let mut spent = Duration::ZERO;
            for i in 0..n {
                let name = LockName::new(format!("cost-{acks}-{round}-{i}")).unwrap();
                let started = Instant::now();
                let l = c.try_acquire(&name, &opts(2000)).await.unwrap().expect("free");
                spent += started.elapsed();
                l.release().await.unwrap();
            }
            rounds.push(spent / n);
        }
    }
    for (acks, _, mut rounds) in clients {
        rounds.sort();
        eprintln!(
            "MEASURED min_replicas_ack={acks}: acquire {:?} (median of 5 rounds of {n}; rounds {rounds:?})",
            rounds[2]
        );
    }
}

/// The primary restarts empty before Sentinel calls it down (no persistence, no failover): the
/// replicas resync from it and lose the lease too. The boot marker is gone with it, so no lease
/// is granted during the restart quiet period (3 s here), which outlasts the holder's lease
/// (2 s): no second holder while the first lease is valid, and tokens still rise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_restart_of_the_primary_waits_the_quiet_period() {
    let (d, holder, contender) = acked_and_plain().await;
    let name = LockName::new("sentinel-restart").unwrap();
    let lease = holder.acquire(&name, &opts(2000)).await.unwrap();
    let primary = d.primary_index().await.unwrap();
    d.kill(SentinelNode::Data(primary));
    d.restart(SentinelNode::Data(primary)).await.unwrap();
    let restarted = Instant::now();
    let end = restarted + Duration::from_secs(30);
    let (l, left) = loop {
        if let Ok(Some(l)) = contender.try_acquire(&name, &opts(2000)).await {
            break (l, lease.valid_until().saturating_duration_since(tokio::time::Instant::now()));
        }
        assert!(Instant::now() < end, "nothing was granted within 30 s of the restart");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let window = restarted.elapsed();
    assert_eq!(d.primary_index().await.unwrap(), primary, "no failover was expected");
    assert!(left.is_zero(), "a second holder got in while the first lease was valid for {left:?} more");
    assert!(l.token() > lease.token(), "token went from {} to {}", lease.token(), l.token());
    eprintln!("MEASURED empty restart of the primary: the next grant came {window:?} after the restart");
}

/// A failover hands the leases to a replica that times them by its own clock: a Sentinel
/// client's lease is valid `max_clock_offset` less than `ttl − drift`, and a ttl
/// within that allowance is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_allow_for_the_nodes_clock_offset() {
    let d = RedisSentinelDeployment::start().await.unwrap();
    let offset = Duration::from_millis(80);
    let c = lock_redis::connect(&d.url(), RedisOptions { max_clock_offset: offset, ..options(0) }).await.unwrap();
    assert_eq!(c.capabilities().max_clock_offset, offset);
    let o = opts(10_000);
    let t0 = tokio::time::Instant::now();
    let lease = c.acquire(&LockName::new("sentinel-clock").unwrap(), &o).await.unwrap();
    let t1 = tokio::time::Instant::now();
    let vu = lease.valid_until();
    assert!(vu <= t1 + o.ttl - o.drift() - offset, "the lease ignores the clock offset: valid {:?} after t0", vu - t0);
    assert!(vu >= t0 + o.ttl - o.drift() - offset, "shortened by more than the offset");
    lease.release().await.unwrap();
    let short = c.acquire(&LockName::new("sentinel-clock-short").unwrap(), &opts(60)).await;
    assert!(matches!(short, Err(LockError::InvalidOptions { .. })), "{short:?}");
}
