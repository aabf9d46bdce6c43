//! The read-write lock's and the semaphore's scripts and their waiter queues
//! (`scripts/kinds_queue.rs` has the rules).

use std::time::Duration;

use lock_core::LockName;
use lock_redis::scripts::{RwAcquire, RwKeys, RwRelease, SemAcquire, SemKeys, SemRelease, Side};

use crate::{fresh_lock, heard, kinds_keys, listen, terms, Attempt, Call};

// Well above the 200 ms of listening in `woken`, so that reservations outlast the listening.
const RESERVE: u64 = 1000;
const REG: u64 = 5000;

/// How many of the read-write lock's four queue keys exist (0: the queue left no key behind).
async fn rw_queue_keys(c: &mut redis::aio::MultiplexedConnection, k: &RwKeys) -> usize {
    let keys = [&k.waiters, &k.waiter_ends, &k.waiter_entries, &k.waiting_writers];
    redis::cmd("EXISTS").arg(&keys[..]).query_async(c).await.unwrap()
}

/// The wake-ups published since the last call (each `@<owner>`), in order.
async fn woken(messages: &mut redis::aio::PubSubStream) -> Vec<String> {
    heard(messages, Duration::from_millis(200)).await
}

/// An attempt on `side` of `owner` for 5 s: `reg` 0 a single try, else a waiting attempt.
fn side<'a>(side: Side, keys: &'a RwKeys, owner: &'a str, reg: u64, reserve_ms: u64, wake: &'a str) -> RwAcquire<'a> {
    RwAcquire { side, keys, terms: terms(owner, reg, reserve_ms, wake) }
}

/// A permit attempt of `owner` for 5 s agreeing on `permits`.
fn permit<'a>(keys: &'a SemKeys, owner: &'a str, permits: u32, reg: u64, wake: &'a str) -> SemAcquire<'a> {
    SemAcquire { keys, permits, terms: terms(owner, reg, RESERVE, wake) }
}

/// A reader's re-attempt returns its token; a refused waiting writer's place in the queue
/// holds new readers back (not the readers already in); the writer's token is above the
/// readers'; a single try takes no place. Permits must agree while held; an empty semaphore
/// starts afresh.
#[tokio::test]
async fn grants_of_readers_writers_and_permits() {
    let (_server, _client, mut c, rw) = fresh_lock("t", "s", RwKeys::new).await;
    let conn = c.clone();
    let attempt = |s: Side, owner: &'static str, reg: u64| side(s, &rw, owner, reg, 150, "").on("t:boot", &conn);
    let leave = |s: Side, owner: &'static str| RwRelease { side: s, keys: &rw, owner, reserve_ms: 150 }.on(&conn);
    let r1 = attempt(Side::Read, "r1", 0).await;
    assert_eq!(r1[0], 1);
    assert_eq!(attempt(Side::Read, "r1", 0).await, r1, "a reader's re-attempt returns the same grant");
    assert_eq!(attempt(Side::Write, "w1", 0).await[0], 0);
    assert_eq!(attempt(Side::Read, "r2", 0).await[0], 1, "a single try takes no place");
    let refused = attempt(Side::Write, "w1", 3000).await;
    assert_eq!(refused[0], 0);
    assert!(refused[1] > 4000 && refused[1] <= 5000, "the readers' remaining lease: {}", refused[1]);
    assert_eq!(attempt(Side::Read, "r3", 0).await[0], 0, "a queued writer holds new readers back");
    assert_eq!(attempt(Side::Read, "r1", 0).await, r1, "a reader already in keeps its grant");
    for owner in ["r1", "r2"] {
        assert_eq!(leave(Side::Read, owner).await, 1);
    }
    let w = attempt(Side::Write, "w1", 3000).await;
    assert_eq!(w[0], 1);
    assert!(w[1] > r1[1]);
    assert_eq!(attempt(Side::Write, "w1", 3000).await, w, "a writer's re-attempt returns the same grant");
    assert_eq!(
        rw_queue_keys(&mut c, &rw).await,
        0,
        "the granted writer left the queue, and an empty queue leaves no key"
    );
    assert_eq!(leave(Side::Write, "w2").await, 0, "not ours");

    let sk = SemKeys::new("t", &LockName::new("s").unwrap());
    let take = |owner: &'static str, n: u32| permit(&sk, owner, n, 0, "").on("t:boot", &conn);
    let p1 = take("p1", 1).await;
    assert_eq!(p1[0], 1);
    assert_eq!(take("p1", 1).await, p1, "a re-attempt returns the same grant");
    assert_eq!(take("p2", 1).await[0], 0);
    assert_eq!(take("p2", 2).await, vec![-1, 1], "in use with 1 permit");
    assert_eq!(SemRelease { keys: &sk, owner: "p1", reserve_ms: 150 }.invoke(&mut c).await.unwrap(), 1);
    let p2 = take("p2", 2).await;
    assert_eq!(p2[0], 1, "an empty semaphore takes a new number of permits");
    assert!(p2[1] > p1[1]);
}

/// The kinds' queues: the freed permit goes to the head alone (woken alone), nobody overtakes,
/// a vanished reserved head is skipped after its reservation; a writer's release wakes the run
/// of readers at the head and not the writer behind them, a reader behind a queued writer
/// waits, the last reader out wakes that writer.
#[tokio::test]
async fn kinds_queues_hand_off_in_order() {
    let (_server, client, c, (sk, rw)) = fresh_lock("kq", "kq", kinds_keys).await;
    // Every waiter of this test listens on one client's wake channel.
    let mut messages = listen(&client, &["kq:wake:T"]).await;
    let take = |owner: &'static str, reg: u64| {
        let call = permit(&sk, owner, 2, reg, "kq:wake:T").on("kq:boot", &c);
        async move { call.await[0] }
    };
    let give_back = |owner: &'static str| SemRelease { keys: &sk, owner, reserve_ms: RESERVE }.on(&c);
    assert_eq!((take("a", 0).await, take("b", REG).await), (1, 1), "free permits, empty queue");
    for w in ["w1", "w2", "w3"] {
        assert_eq!(take(w, REG).await, 0);
    }
    assert_eq!(give_back("a").await, 1);
    assert_eq!(woken(&mut messages).await, ["@w1"], "a freed permit wakes the head alone");
    assert_eq!(take("n", 0).await, 0, "a single try does not take the head's permit");
    assert_eq!(take("w2", REG).await, 0, "nor does the second in line");
    assert_eq!(take("w1", REG).await, 1, "the head takes it");
    assert_eq!(give_back("b").await, 1);
    assert_eq!(woken(&mut messages).await, ["@w2"]);
    // `w2` vanishes: w3 waits for the reservation only.
    assert_eq!(take("w3", REG).await, 0);
    tokio::time::sleep(Duration::from_millis(RESERVE + 50)).await;
    assert_eq!(take("w3", REG).await, 1, "the vanished head is skipped once its reservation ended");

    let attempt = |s: Side, owner: &'static str, reg: u64| {
        let call = side(s, &rw, owner, reg, RESERVE, "kq:wake:T").on("kq:boot", &c);
        async move { call.await[0] }
    };
    let leave = |s: Side, owner: &'static str| RwRelease { side: s, keys: &rw, owner, reserve_ms: RESERVE }.on(&c);
    assert_eq!(attempt(Side::Write, "W", 0).await, 1);
    for (who, s) in [("r1", Side::Read), ("r2", Side::Read), ("w2", Side::Write), ("r3", Side::Read)] {
        assert_eq!(attempt(s, who, REG).await, 0, "{who} waits while a writer holds");
    }
    let _ = woken(&mut messages).await;
    assert_eq!(leave(Side::Write, "W").await, 1);
    assert_eq!(woken(&mut messages).await, ["@r1", "@r2"], "the writer's release wakes the readers at the head");
    assert_eq!(attempt(Side::Read, "r3", REG).await, 0, "a reader behind a queued writer does not join");
    assert_eq!(attempt(Side::Read, "n", 0).await, 0, "nor does a newcomer's single try");
    let (r2, r1) = (attempt(Side::Read, "r2", REG).await, attempt(Side::Read, "r1", REG).await);
    assert_eq!((r2, r1), (1, 1), "the readers at the head share");
    assert_eq!(attempt(Side::Write, "w2", REG).await, 0, "the writer waits for the readers");
    assert_eq!(leave(Side::Read, "r1").await, 1);
    assert_eq!(woken(&mut messages).await, Vec::<String>::new(), "a reader left, another still holds");
    assert_eq!(leave(Side::Read, "r2").await, 1);
    assert_eq!(woken(&mut messages).await, ["@w2"], "the last reader out wakes the head writer");
    assert_eq!(attempt(Side::Write, "w2", REG).await, 1);
    // A wait that ends without a grant leaves the queue (abandon is the release script).
    assert_eq!(leave(Side::Read, "r3").await, 0, "r3 held nothing");
    assert_eq!(leave(Side::Write, "w2").await, 1);
    assert_eq!(rw_queue_keys(&mut c.clone(), &rw).await, 0, "an empty queue leaves no key behind");
}

/// A permit waiter and a writer queued with a wake channel are woken there, and only the one
/// the release lets in; re-registering with it keeps the place; a waiter without one is woken
/// nowhere (it polls) and still gets its turn.
#[tokio::test]
async fn kinds_waiters_are_woken_on_their_wake_channel() {
    let (_server, client, c, (sk, rw)) = fresh_lock("kw", "kw", kinds_keys).await;
    let mut own = listen(&client, &["kw:wake:A"]).await;
    let mut other = listen(&client, &["kw:wake:B"]).await;
    let take = |owner: &'static str, reg: u64, wake: &'static str| {
        let call = permit(&sk, owner, 1, reg, wake).on("kw:boot", &c);
        async move { call.await[0] }
    };
    let give_back = |owner: &'static str| SemRelease { keys: &sk, owner, reserve_ms: RESERVE }.on(&c);
    assert_eq!(take("a", 0, "").await, 1);
    assert_eq!(take("w", REG, "kw:wake:A").await, 0);
    assert_eq!(take("v", REG, "").await, 0);
    assert_eq!(take("w", REG, "kw:wake:A").await, 0, "re-registering keeps the place");
    let _ = woken(&mut own).await;
    assert_eq!(give_back("a").await, 1);
    assert_eq!(woken(&mut own).await, ["@w"], "woken on its wake channel");
    assert_eq!(take("v", REG, "").await, 0, "w keeps its place");
    assert_eq!(take("w", REG, "kw:wake:A").await, 1);
    assert_eq!(give_back("w").await, 1);
    assert!(woken(&mut own).await.is_empty(), "v has no wake channel: nothing on w's");
    assert_eq!(take("v", REG, "").await, 1, "v, polling, gets its turn");

    // A writer queued behind a holder, woken on its wake channel by the release.
    let write = |owner: &'static str, reg: u64, wake: &'static str| {
        let call = side(Side::Write, &rw, owner, reg, RESERVE, wake).on("kw:boot", &c);
        async move { call.await[0] }
    };
    assert_eq!(write("W", 0, "").await, 1);
    assert_eq!(write("X", REG, "kw:wake:A").await, 0);
    assert_eq!(write("Y", REG, "kw:wake:B").await, 0);
    let _ = (woken(&mut other).await, woken(&mut own).await);
    let left = RwRelease { side: Side::Write, keys: &rw, owner: "W", reserve_ms: RESERVE };
    assert_eq!(left.invoke(&mut c.clone()).await.unwrap(), 1);
    assert_eq!(woken(&mut own).await, ["@X"]);
    assert!(woken(&mut other).await.is_empty(), "the writer behind it is not woken");
    assert_eq!(write("X", REG, "kw:wake:A").await, 1, "the woken writer takes it");
}
