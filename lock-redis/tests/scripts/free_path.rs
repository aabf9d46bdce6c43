//! The server's work on the exclusive lock's free path (a `try_acquire` of a free name with
//! nobody queued, and its release), next to the floor's (`SET NX PX` and a scripted
//! owner-checked delete): `INFO commandstats` over many cycles on a fresh server.

use std::time::Duration;

use lock_core::LockName;
use lock_redis::scripts::HandOffScript::Release;
use lock_redis::scripts::{Acquire, Keys, Observe, Try};

use crate::queue_scale::reset_stats;
use crate::{acquire, fresh_lock, fresh_server, hand_off, heard, listen, Attempt, Call};

const CYCLES: usize = 20_000;
const REG: u64 = 5000;
const RESERVE: u64 = 2000;

/// The `@<owner>` wake-ups heard on `messages` since the last call.
async fn wakes(messages: &mut redis::aio::PubSubStream) -> Vec<String> {
    heard(messages, Duration::from_millis(150)).await.into_iter().filter(|m| m.starts_with('@')).collect()
}

/// A release with nobody queued behind its lease skips the queue (the lease has no `q`), so
/// every way a waiter can be queued behind a lease must mark it: a registration while it is
/// held, a grant that leaves others queued, and a grant in the release that leaves others
/// queued. Each release here must wake the next waiter.
#[tokio::test]
async fn a_release_finds_every_waiter_queued_behind_it() {
    let (_server, client, mut c, k) = fresh_lock("f", "q", Keys::new).await;
    let () = redis::cmd("SET").arg("f:boot").arg(0).query_async(&mut c).await.unwrap();
    let mut messages = listen(&client, &[&k.channel, "f:wake:A"]).await;
    let conn = c.clone();
    let take = |owner: &'static str, reg: u64, grant: &'static str, wake: &'static str| {
        Acquire { grant, ..acquire(&k, owner, reg, RESERVE, wake) }.on("f:boot", &conn)
    };
    let release = |owner: &'static str| hand_off(Release, &k, owner, RESERVE, "").on(&conn);
    assert_eq!(take("h", 0, "", "").await[0], 1, "the free path");
    // The terms (grant, wake channel) of a plain waiter and of one that takes grants in the release.
    let (plain, grants) = (("", ""), ("5000", "f:wake:A"));
    // Each turn: who queues behind the holder, the holder's release, the head it must wake and
    // why, and the head taking (or claiming) the lock.
    for (queue, holder, (head, terms), why) in [
        (&[("a", plain), ("b", plain)][..], "h", ("a", plain), "registered while h held: h's release wakes the head"),
        (&[], "a", ("b", plain), "a grant that left b queued: a's release wakes b"),
        (&[("c", grants), ("d", plain)], "b", ("c", grants), "b's release grants c the lock"),
        (&[], "c", ("d", plain), "a grant in the release that left d queued: c's release wakes d"),
    ] {
        for &(owner, (grant, wake)) in queue {
            assert_eq!(take(owner, REG, grant, wake).await[0], 0, "{owner} queues behind {holder}");
        }
        assert_eq!(release(holder).await, 1);
        assert_eq!(wakes(&mut messages).await, [format!("@{head}")], "{why}");
        assert_eq!(take(head, REG, terms.0, terms.1).await[0], 1, "the head {head} takes it");
    }
    assert_eq!(release("d").await, 1);
    assert!(wakes(&mut messages).await.is_empty(), "nobody left");
}

/// The free path publishes `+` (grant) and `-` (release) only while the name is marked observed
/// (`Observe`, what an election observer's feed keeps up): an unobserved lock costs no `PUBLISH`;
/// a lapsed mark is dropped by the next free grant, after which releases publish nothing either.
#[tokio::test]
async fn the_free_path_publishes_only_while_observed() {
    let (_server, client, mut c, k) = fresh_lock("f", "observed", Keys::new).await;
    let () = redis::cmd("SET").arg("f:boot").arg(0).query_async(&mut c).await.unwrap();
    let mut messages = listen(&client, &[&k.channel]).await;
    let quiet = Duration::from_millis(150);
    let cycle = |mut c: redis::aio::MultiplexedConnection| {
        let k = k.clone();
        async move {
            assert_eq!(try_take(&k, 0).invoke("f:boot", &mut c).await.unwrap()[0], 1);
            assert_eq!(hand_off(Release, &k, "o", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
        }
    };
    // The first grant of a name (no counter yet) is not the free path, which publishes always.
    cycle(c.clone()).await;
    assert_eq!(heard(&mut messages, quiet).await, ["+"]);
    cycle(c.clone()).await;
    assert!(heard(&mut messages, quiet).await.is_empty(), "nobody observes: no message");
    assert_eq!(Observe { lock: &k.lock, period_ms: 300 }.invoke(&mut c).await.unwrap(), 1);
    cycle(c.clone()).await;
    assert_eq!(heard(&mut messages, quiet).await, ["+", "-"], "observed: the grant and the release");
    tokio::time::sleep(Duration::from_millis(300)).await;
    cycle(c.clone()).await;
    assert!(heard(&mut messages, quiet).await.is_empty(), "the mark lapsed: no message");
    let mark: Option<String> = redis::cmd("HGET").arg(&k.lock).arg("w").query_async(&mut c).await.unwrap();
    assert_eq!(mark, None, "the lapsed mark is gone");
}

/// A single try of `o` on `k` with the quiet period `quiet_ms`.
fn try_take(k: &Keys, quiet_ms: u64) -> Acquire<'_> {
    Acquire { quiet_ms, ..acquire(k, "o", 0, RESERVE, "") }
}

/// The free path reads the boot marker only when the name has no fence: a fence the server
/// still has was written by a grant after its last loss of state (the first grant after a
/// loss finds no fence and starts the quiet period). A name used before is granted without
/// the marker; a new name, or every name after the server lost its state, waits.
#[tokio::test]
async fn the_marker_is_read_only_without_a_fence() {
    let (_server, _client, mut c) = fresh_server().await;
    let (used, new) = (Keys::new("f", &LockName::new("used").unwrap()), Keys::new("f", &LockName::new("new").unwrap()));
    let quiet = try_take(&used, 4000).invoke("f:boot", &mut c).await.unwrap();
    assert_eq!(quiet[0], 2, "no marker, no fence: the quiet period {quiet:?}");
    let () = redis::cmd("SET").arg("f:boot").arg(0).query_async(&mut c).await.unwrap();
    let first = try_take(&used, 4000).invoke("f:boot", &mut c).await.unwrap();
    assert_eq!(first[0], 1);
    assert_eq!(hand_off(Release, &used, "o", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    let () = redis::cmd("DEL").arg("f:boot").query_async(&mut c).await.unwrap();
    let again = try_take(&used, 4000).invoke("f:boot", &mut c).await.unwrap();
    assert_eq!(again[0], 1, "the fence is there: granted without reading the marker");
    assert!(again[1] > first[1], "a higher token");
    let marker: Option<String> = redis::cmd("GET").arg("f:boot").query_async(&mut c).await.unwrap();
    assert_eq!(marker, None, "the marker was not read (nor written)");
    assert_eq!(hand_off(Release, &used, "o", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(try_take(&new, 4000).invoke("f:boot", &mut c).await.unwrap()[0], 2, "a name without a fence waits");
    let () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    let lost = try_take(&used, 4000).invoke("f:boot", &mut c).await.unwrap();
    assert_eq!(lost[0], 2, "after the server lost its state, a name used before waits too: {lost:?}");
}

/// A single try's lean script (`Try`) answers only where the full one would answer the same
/// without its other keys: the free path, a lease already the caller's, a lease held by
/// another with nobody queued. A name without a counter (the boot marker decides), someone
/// queued (they go first) and the quiet period are `{4}`: left to `Acquire`, which decides
/// them as before.
#[tokio::test]
async fn the_lean_try_answers_only_what_needs_no_other_key() {
    let (_server, _client, mut c, k) = fresh_lock("f", "lean", Keys::new).await;
    let lean = |owner: &'static str| Try { acquire: acquire(&k, owner, 0, RESERVE, "") };
    assert_eq!(lean("a").invoke(&mut c).await.unwrap(), [4], "no counter: the boot marker decides");
    assert_eq!(try_take(&k, 4000).invoke("f:boot", &mut c).await.unwrap()[0], 2, "the quiet period, as before");
    let () = redis::cmd("SET").arg("f:boot").arg(0).query_async(&mut c).await.unwrap();
    let first = acquire(&k, "a", 0, RESERVE, "").invoke("f:boot", &mut c).await.unwrap();
    assert_eq!(first[0], 1);
    let again = lean("a").invoke(&mut c).await.unwrap();
    assert_eq!(again, first, "its own lease: the same token, refreshed");
    let held = lean("b").invoke(&mut c).await.unwrap();
    assert!(held[0] == 0 && held[1] > 4000 && held[1] <= 5000, "held by a, nobody queued: {held:?}");
    assert_eq!(acquire(&k, "w", REG, RESERVE, "").invoke("f:boot", &mut c).await.unwrap()[0], 0, "w queues");
    assert_eq!(lean("b").invoke(&mut c).await.unwrap(), [4], "someone queued: the full script");
    assert_eq!(hand_off(Release, &k, "a", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(lean("b").invoke(&mut c).await.unwrap(), [4], "free, but w is queued: never overtaken here");
    assert_eq!(acquire(&k, "b", 0, RESERVE, "").invoke("f:boot", &mut c).await.unwrap()[0], 0, "w's turn");
    assert_eq!(acquire(&k, "w", REG, RESERVE, "").invoke("f:boot", &mut c).await.unwrap()[0], 1, "w takes it");
    assert_eq!(hand_off(Release, &k, "w", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    let free = lean("b").invoke(&mut c).await.unwrap();
    assert!(free[0] == 1 && free[1] > first[1], "the free path: a higher token {free:?}");
    let who = Try { acquire: Acquire { holder: "host-1", metadata: "+meta", ..lean("b").acquire } };
    assert_eq!(hand_off(Release, &k, "b", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(who.invoke(&mut c).await.unwrap()[0], 1);
    let stored: Vec<Option<String>> =
        redis::cmd("HMGET").arg(&k.lock).arg("h").arg("m").query_async(&mut c).await.unwrap();
    assert_eq!(stored, [Some("host-1".to_owned()), Some("+meta".to_owned())], "holder id and metadata stored");
}

/// `usec` of the top-level commands `cmds` in `INFO commandstats`, summed (a script's own
/// `redis.call`s are counted under their names too, and inside the script's time), and the
/// number of calls of the first.
async fn server_usec(c: &mut redis::aio::MultiplexedConnection, cmds: &[&str]) -> (f64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    let (mut usec, mut calls) = (0.0, 0);
    for line in info.lines() {
        let Some(i) = cmds.iter().position(|cmd| line.starts_with(&format!("cmdstat_{cmd}:"))) else { continue };
        let field = |name: &str| line.split([':', ',']).find_map(|f| f.strip_prefix(name)).unwrap_or("0");
        usec += field("usec=").parse::<f64>().unwrap();
        if i == 0 {
            calls = field("calls=").parse().unwrap();
        }
    }
    (usec, calls)
}

/// The server process's CPU time so far (s): `INFO cpu`, user + system, main thread included.
async fn server_cpu(c: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(c).await.unwrap();
    let field = |name: &str| -> f64 {
        info.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
    };
    field("used_cpu_user:") + field("used_cpu_sys:")
}

/// Not a check: prints the server µs per acquire + release of a free lock (a single try's lean
/// script, which `try_acquire` runs, and the release), dlock's scripts against the floor's commands, in alternating rounds on one fresh server (BENCHMARKS.md).
#[tokio::test]
#[ignore = "a measurement; run with --run-ignored only and read its output"]
async fn measure_free_path_server_time() {
    let (_server, _client, mut c, k) = fresh_lock("f", "free", Keys::new).await;
    let () = redis::cmd("SET").arg("f:boot").arg(0).query_async(&mut c).await.unwrap();
    let floor = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    // The name's first grant writes its counter; from then on every try takes the free path.
    assert_eq!(acquire(&k, "first", 0, 250, "").invoke("f:boot", &mut c).await.unwrap()[0], 1);
    assert_eq!(hand_off(Release, &k, "first", 250, "").invoke(&mut c).await.unwrap(), 1);
    for round in 0..3 {
        reset_stats(&mut c).await;
        let cpu0 = server_cpu(&mut c).await;
        for _ in 0..CYCLES {
            let lean = Try { acquire: acquire(&k, "0123456789abcdef0123456789abcdef", 0, 250, "") };
            let r = lean.invoke(&mut c).await.unwrap();
            assert_eq!(r[0], 1);
            let call = hand_off(Release, &k, "0123456789abcdef0123456789abcdef", 250, "");
            assert_eq!(call.invoke(&mut c).await.unwrap(), 1);
        }
        let dlock_cpu = server_cpu(&mut c).await - cpu0;
        let (dlock, calls) = server_usec(&mut c, &["evalsha"]).await;
        assert!(calls as usize >= 2 * CYCLES, "{calls} scripts run");
        reset_stats(&mut c).await;
        let cpu0 = server_cpu(&mut c).await;
        for _ in 0..CYCLES {
            let set: Option<String> = redis::cmd("SET")
                .arg("f:floor")
                .arg("0123456789abcdef0123456789abcdef")
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(set.is_some());
            let del: i64 =
                floor.key("f:floor").arg("0123456789abcdef0123456789abcdef").invoke_async(&mut c).await.unwrap();
            assert_eq!(del, 1);
        }
        let base_cpu = server_cpu(&mut c).await - cpu0;
        let (base, _) = server_usec(&mut c, &["set", "evalsha"]).await;
        let n = CYCLES as f64;
        let (d, b) = (dlock / n, base / n);
        let (dc, bc) = (dlock_cpu * 1e6 / n, base_cpu * 1e6 / n);
        eprintln!(
            "round {round}: per acquire + release: scripts' and commands' µs dlock {d:.2}, floor {b:.2} ({:.2}x); \
             server CPU µs dlock {dc:.1}, floor {bc:.1} ({:.2}x)",
            d / b,
            dc / bc
        );
    }
}
