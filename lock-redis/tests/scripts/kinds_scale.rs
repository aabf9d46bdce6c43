//! The read-write lock's and the semaphore's waiter queues at scale and at their cap
//! (`scripts/kinds_queue.rs`): the same sorted sets and `max_waiters` as the exclusive queue.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_redis::scripts::{RwAcquire, RwKeys, RwRelease, SemAcquire, SemKeys, SemRelease, Side, Terms};

use crate::queue_scale::{evalsha_usec, reset_stats};
use crate::{fresh_lock, kinds_keys, terms, Attempt};

const REG: u64 = 600_000;
// Long enough for 10,000 reserved readers to come one by one.
const RESERVE: u64 = 20_000;

/// The terms of an attempt of `owner` for 60 s.
fn long<'a>(owner: &'a str, reg: u64, cap: u32) -> Terms<'a> {
    Terms { ttl_ms: 60_000, max_waiters: cap, ..terms(owner, reg, RESERVE, "") }
}

fn rw<'a>(side: Side, keys: &'a RwKeys, owner: &'a str, reg: u64, cap: u32) -> RwAcquire<'a> {
    RwAcquire { side, keys, terms: long(owner, reg, cap) }
}

fn permit<'a>(keys: &'a SemKeys, owner: &'a str, reg: u64, cap: u32) -> SemAcquire<'a> {
    SemAcquire { keys, permits: 1, terms: long(owner, reg, cap) }
}

/// Past `max_waiters` a new waiting reader, writer or permit waiter is refused with `{3, cap}`
/// and not queued; a queued one re-tries at the cap; a single try is never refused for it; once
/// one left, a newcomer queues again.
#[tokio::test]
async fn kinds_queues_are_capped() {
    let (_server, _client, mut c, (sk, k)) = fresh_lock("kc", "cap", kinds_keys).await;
    let conn = c.clone();
    let attempt = |s: Side, owner: &'static str, reg: u64| rw(s, &k, owner, reg, 3).on("kc:boot", &conn);
    assert_eq!(attempt(Side::Write, "W", 0).await[0], 1);
    for (s, who) in [(Side::Read, "a"), (Side::Write, "b"), (Side::Read, "c")] {
        assert_eq!(attempt(s, who, REG).await[0], 0);
    }
    assert_eq!(attempt(Side::Read, "d", REG).await, [3, 3], "a fourth reader is refused");
    assert_eq!(attempt(Side::Write, "e", REG).await, [3, 3], "and a fourth writer");
    let queued: usize = redis::cmd("ZCARD").arg(&k.waiters).query_async(&mut c).await.unwrap();
    assert_eq!(queued, 3, "neither queued");
    assert_eq!(attempt(Side::Write, "b", REG).await[0], 0, "a queued writer re-tries at the cap");
    assert_eq!(attempt(Side::Read, "d", 0).await[0], 0, "a single try is refused for the holder only");
    let gone = RwRelease { side: Side::Read, keys: &k, owner: "c", reserve_ms: RESERVE };
    assert_eq!(gone.invoke(&mut c).await.unwrap(), 0, "c's wait ended: it leaves");
    assert_eq!(attempt(Side::Read, "d", REG).await[0], 0, "d queues in its place");

    let take = |owner: &'static str, reg: u64| permit(&sk, owner, reg, 2).on("kc:boot", &conn);
    assert_eq!(take("h", 0).await[0], 1);
    assert_eq!((take("p", REG).await[0], take("q", REG).await[0]), (0, 0));
    assert_eq!(take("r", REG).await, [3, 2], "a third permit waiter is refused");
    assert_eq!(SemRelease { keys: &sk, owner: "h", reserve_ms: RESERVE }.invoke(&mut c).await.unwrap(), 1);
    assert_eq!(take("p", REG).await[0], 1, "the head takes the freed permit");
    assert_eq!(take("r", REG).await[0], 0, "and r queues behind q");
}

/// 10,000 readers queued behind a writer (the default cap): the one more is refused; the
/// writer's release lets the whole run in (each reserved once); they are granted in any order,
/// and a writer that arrives meanwhile waits for all of them.
#[tokio::test]
async fn ten_thousand_readers_behind_a_writer() {
    let (_server, _client, mut c, k) = fresh_lock("ks", "hot", RwKeys::new).await;
    run_of_readers(&mut c, &k, 10_000).await;
}

/// The scenario of [`ten_thousand_readers_behind_a_writer`] with `n` readers; the server's time
/// per call of each step (evalsha `usec_per_call`).
async fn run_of_readers(c: &mut redis::aio::MultiplexedConnection, k: &RwKeys, n: usize) -> Vec<(String, f64)> {
    let mut report = Vec::new();
    let cap = u32::try_from(n).unwrap();
    assert_eq!(rw(Side::Write, k, "W", 0, cap).invoke("ks:boot", c).await.unwrap()[0], 1);
    reset_stats(c).await;
    let t = Instant::now();
    for i in 0..n {
        let owner = format!("{i:032x}");
        assert_eq!(rw(Side::Read, k, &owner, REG, cap).invoke("ks:boot", c).await.unwrap()[0], 0);
    }
    report.push((format!("{n} registrations ({:?})", t.elapsed()), evalsha_usec(c).await));
    assert_eq!(rw(Side::Read, k, "late", REG, cap).invoke("ks:boot", c).await.unwrap(), [3, cap as i64]);
    reset_stats(c).await;
    let release = RwRelease { side: Side::Write, keys: k, owner: "W", reserve_ms: RESERVE };
    assert_eq!(release.invoke(c).await.unwrap(), 1);
    report.push(("the writer's release, reserving the run".into(), evalsha_usec(c).await));
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let cut: usize =
        redis::cmd("ZCOUNT").arg(&k.waiter_ends).arg("-inf").arg(now_ms + RESERVE + 1000).query_async(c).await.unwrap();
    assert_eq!(cut, n, "every reader of the run was reserved");
    let late = rw(Side::Write, k, "late-writer", 0, cap).invoke("ks:boot", c).await.unwrap();
    assert_eq!(late[0], 0, "a writer's try does not overtake the run");
    reset_stats(c).await;
    let t = Instant::now();
    for i in (0..n).rev() {
        let owner = format!("{i:032x}");
        assert_eq!(rw(Side::Read, k, &owner, REG, cap).invoke("ks:boot", c).await.unwrap()[0], 1, "{i}");
    }
    report.push((format!("{n} grants of the run ({:?})", t.elapsed()), evalsha_usec(c).await));
    let queued: usize = redis::cmd("ZCARD").arg(&k.waiters).query_async(c).await.unwrap();
    assert_eq!(queued, 0);
    report
}

/// Not a check: the server's time per call of the kinds' queue with 1,000 and 10,000 waiters
/// (BENCHMARKS.md, "Redis waiter queue at scale").
#[tokio::test]
#[ignore = "a measurement; run with --run-ignored only and read its output"]
async fn measure_kinds_queue_at_scale() {
    for n in [1_000, 10_000] {
        let (_server, _client, mut c, k) = fresh_lock("ks", "hot", RwKeys::new).await;
        for (what, usec) in run_of_readers(&mut c, &k, n).await {
            eprintln!("{n} readers: {what}: {usec:.1} µs per call");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
