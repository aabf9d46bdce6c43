//! The exclusive lock's waiter queue at scale: 10,000 waiters on one name keep their order and
//! the cap (`scripts/waiters.rs`), and a measurement of the server's time per attempt.

use std::time::{Duration, Instant};

use lock_core::LockName;
use lock_redis::scripts::HandOffScript::{Abandon, Release};
use lock_redis::scripts::Keys;

use crate::{acquire, fresh_lock, hand_off, listen, next, Attempt};

const WAITERS: usize = 10_000;
const REG: u64 = 600_000;
const RESERVE: u64 = 150;
const WAKE: &str = "q:wake:0123456789abcdef";

fn waiter(i: usize) -> String {
    format!("w{i:05}")
}

/// 10,000 waiters registered on one name (the default cap): the one more is refused with `{3,
/// cap}` and not queued, a queued waiter's re-attempts (all of them, last first) keep its place,
/// and the releases then serve the waiters in arrival order, each woken alone, a waiter that
/// gave up skipped; once one left, a newcomer may queue again.
#[tokio::test]
async fn ten_thousand_waiters_keep_fifo_and_the_cap() {
    let (_server, client, mut c, k) = fresh_lock("q", "hot", Keys::new).await;
    let mut messages = listen(&client, &[&k.channel]).await;
    let conn = c.clone();
    let take = |owner: String, reg: u64| {
        let (conn, k) = (&conn, &k);
        async move { acquire(k, &owner, reg, RESERVE, "").on("q:boot", conn).await }
    };
    // h holds longer than the 20,000 registrations take on a busy machine.
    let hold = lock_redis::scripts::Acquire { ttl_ms: 600_000, ..acquire(&k, "h", 0, RESERVE, "") };
    assert_eq!(hold.invoke("q:boot", &mut c).await.unwrap()[0], 1);
    for i in (0..WAITERS).chain((0..WAITERS).rev()) {
        assert_eq!(take(waiter(i), REG).await[0], 0, "{} is refused while h holds", waiter(i));
    }
    assert_eq!(take("late".into(), REG).await, [3, WAITERS as i64], "past the cap: refused, and says the cap");
    let queued: usize = redis::cmd("ZCARD").arg(&k.waiters).query_async(&mut c).await.unwrap();
    assert_eq!(queued, WAITERS, "the refused one did not queue");
    assert_eq!(take(waiter(5000), REG).await[0], 0, "a queued waiter re-tries at the cap");
    let first: Vec<String> = redis::cmd("ZRANGE").arg(&k.waiters).arg(0).arg(2).query_async(&mut c).await.unwrap();
    assert_eq!(first, [waiter(0), waiter(1), waiter(2)], "re-attempts in reverse kept the arrival order");

    assert_eq!(hand_off(Abandon, &k, &waiter(2), RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    let mut holder = "h".to_owned();
    for i in [0, 1, 3, 4] {
        assert_eq!(hand_off(Release, &k, &holder, RESERVE, "").invoke(&mut c).await.unwrap(), 1);
        let woken = loop {
            let m = next(&mut messages, Duration::from_secs(5)).await.expect("a wake");
            if m.starts_with('@') {
                break m;
            }
        };
        assert_eq!(woken, format!("@{}", waiter(i)), "the release wakes the next in arrival order alone");
        assert_eq!(take(waiter(i + 1), REG).await[0], 0, "the one behind does not overtake");
        assert_eq!(take(waiter(i), REG).await[0], 1, "the head takes the lock");
        holder = waiter(i);
    }
    assert_eq!(take("late".into(), REG).await[0], 0, "with waiters gone, a newcomer queues again");
}

/// Registrations that ended (waiters that vanished) give their places back: a full queue of
/// three takes a fourth once theirs ended.
#[tokio::test]
async fn ended_registrations_free_the_cap() {
    let (_server, _client, mut c, k) = fresh_lock("q", "cap", Keys::new).await;
    let conn = c.clone();
    let take = |owner: &'static str, reg: u64| {
        lock_redis::scripts::Acquire { max_waiters: 3, ..acquire(&k, owner, reg, RESERVE, "") }.on("q:boot", &conn)
    };
    assert_eq!(take("h", 0).await[0], 1);
    for w in ["a", "b", "c"] {
        assert_eq!(take(w, 200).await[0], 0);
    }
    assert_eq!(take("d", 200).await, [3, 3], "the fourth is refused");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(take("d", 200).await[0], 0, "the ended registrations were dropped: d queues");
    assert_eq!(hand_off(Release, &k, "h", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(take("d", 200).await[0], 1, "and is the head");
    assert_eq!(crate::queue_keys(&mut c, &k).await, 0, "the queue left no key behind");
}

/// `evalsha`'s `usec_per_call` since the last `CONFIG RESETSTAT`.
pub(crate) async fn evalsha_usec(c: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    let line = info.lines().find(|l| l.starts_with("cmdstat_evalsha:")).expect("evalsha ran");
    let field = line.split(',').find_map(|f| f.strip_prefix("usec_per_call=")).unwrap();
    field.parse().unwrap()
}

pub(crate) async fn reset_stats(c: &mut redis::aio::MultiplexedConnection) {
    let () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(c).await.unwrap();
}

/// Round trips (µs, sorted) of `n` try-acquire + release pairs of another name.
async fn other_lock_latency(c: &mut redis::aio::MultiplexedConnection, n: usize) -> Vec<u128> {
    let k = Keys::new("q", &LockName::new("other").unwrap());
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let got = acquire(&k, "x", 0, RESERVE, "").invoke("q:boot", c).await.unwrap();
        assert_eq!(got[0], 1);
        assert_eq!(hand_off(Release, &k, "x", RESERVE, "").invoke(c).await.unwrap(), 1);
        out.push(t.elapsed().as_micros());
    }
    out.sort_unstable();
    out
}

fn pct(v: &[u128], p: f64) -> u128 {
    v[((v.len() - 1) as f64 * p) as usize]
}

/// Not a check: prints the server time per attempt with 10,000 waiters on one name, and another
/// name's round trips meanwhile (BENCHMARKS.md, "Waiter queue at scale").
#[tokio::test]
#[ignore = "a measurement; run with --run-ignored only and read its output"]
async fn measure_ten_thousand_waiters() {
    let (_server, _client, mut c, k) = fresh_lock("q", "hot", Keys::new).await;
    assert_eq!(acquire(&k, "h", 0, RESERVE, "").invoke("q:boot", &mut c).await.unwrap()[0], 1);
    let idle = other_lock_latency(&mut c, 500).await;
    reset_stats(&mut c).await;
    let t = Instant::now();
    let mut batch = Vec::new();
    for i in 0..WAITERS {
        // A client's entry: a 32-hex owner id, grant terms and its wake channel.
        let owner = format!("{i:032x}");
        let call = lock_redis::scripts::Acquire { grant: "30000", ..acquire(&k, &owner, REG, RESERVE, WAKE) };
        let r = call.invoke("q:boot", &mut c).await.unwrap();
        assert_eq!(r[0], 0);
        if (i + 1) % 1000 == 0 {
            batch.push(evalsha_usec(&mut c).await);
            println!(
                "registered {}: {:.1} us/call over the last 1000, {:?}",
                i + 1,
                batch[batch.len() - 1],
                t.elapsed()
            );
            reset_stats(&mut c).await;
        }
    }
    let register = batch.iter().sum::<f64>() / batch.len() as f64;
    let mut bytes = 0;
    for key in [&k.waiters, &k.waiter_ends, &k.waiter_entries] {
        let b: Option<u64> =
            redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query_async(&mut c).await.unwrap();
        bytes += b.unwrap_or(0);
    }
    let register_wall = t.elapsed();
    reset_stats(&mut c).await;
    for i in 0..1000 {
        let owner = format!("{:032x}", WAITERS - 1 - i);
        let call = lock_redis::scripts::Acquire { grant: "30000", ..acquire(&k, &owner, REG, RESERVE, WAKE) };
        let r = call.invoke("q:boot", &mut c).await.unwrap();
        assert_eq!(r[0], 0);
    }
    let retry = evalsha_usec(&mut c).await;
    // Another name's round trips while the 10,000 waiters re-try on a second connection.
    let mut load = c.clone();
    let (k2, stop) = (k.clone(), std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let stop2 = stop.clone();
    let hammer = tokio::spawn(async move {
        let mut i = 0;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let owner = format!("{:032x}", i % WAITERS);
            let call = lock_redis::scripts::Acquire { grant: "30000", ..acquire(&k2, &owner, REG, RESERVE, WAKE) };
            call.invoke("q:boot", &mut load).await.unwrap();
            i += 1;
        }
        i
    });
    let mut other = c.clone();
    let busy = other_lock_latency(&mut other, 500).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let hammered = hammer.await.unwrap();
    println!(
        "waiters={WAITERS} register: {register:.1} us/call (wall {register_wall:?}), queue keys {bytes} bytes; re-try at 10k: {retry:.1} us/call; \
         other lock try+release us p50/p99/max idle {}/{}/{} under {hammered} waiter re-tries {}/{}/{}",
        pct(&idle, 0.5),
        pct(&idle, 0.99),
        idle[idle.len() - 1],
        pct(&busy, 0.5),
        pct(&busy, 0.99),
        busy[busy.len() - 1]
    );
}

/// Not a check: the server time per script call with 8 waiters taking turns (each round: the
/// holder releases, which grants the head provisionally, the head claims, the releaser queues
/// again at the tail), the common contended case.
#[tokio::test]
#[ignore = "a measurement; run with --run-ignored only and read its output"]
async fn measure_eight_waiters_taking_turns() {
    let (_server, _client, mut c, k) = fresh_lock("q", "turns", Keys::new).await;
    let owners: Vec<String> = (0..9).map(|i| format!("o{i}")).collect();
    let take = |c: &mut redis::aio::MultiplexedConnection, owner: &str, reg: u64| {
        let (mut c, k, owner) = (c.clone(), k.clone(), owner.to_owned());
        async move {
            let call = lock_redis::scripts::Acquire { grant: "5000", ..acquire(&k, &owner, reg, RESERVE, "q:wake:A") };
            call.invoke("q:boot", &mut c).await.unwrap()
        }
    };
    assert_eq!(take(&mut c, &owners[0], 0).await[0], 1);
    for o in &owners[1..] {
        assert_eq!(take(&mut c, o, REG).await[0], 0);
    }
    reset_stats(&mut c).await;
    let rounds = 3000;
    let t = Instant::now();
    for r in 0..rounds {
        let (holder, head) = (&owners[r % 9], &owners[(r + 1) % 9]);
        assert_eq!(hand_off(Release, &k, holder, RESERVE, "").invoke(&mut c).await.unwrap(), 1);
        assert_eq!(take(&mut c, head, REG).await[0], 1, "round {r}: the head claims");
        assert_eq!(take(&mut c, holder, REG).await[0], 0);
    }
    println!(
        "8 waiters taking turns: {:.1} us/call over {} calls, {:?} per round",
        evalsha_usec(&mut c).await,
        rounds * 3,
        t.elapsed() / rounds as u32
    );
}
