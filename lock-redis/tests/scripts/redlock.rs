//! Redlock's per-master scripts and the ticket queue (`scripts/redlock.rs` has the rules).

use std::time::Duration;

use lock_core::LockName;
use lock_redis::scripts::{
    Keys, RedlockAcquire, RedlockArm, RedlockClaim, RedlockFence, RedlockRelease, RedlockUndo, Terms,
};

use crate::{fresh_lock, fresh_server, heard, listen, next, terms, Attempt, Call};

const RESERVE: u64 = 150;

/// An attempt of `owner` for 5 s: `reg` 0 a single try, else a waiting attempt with `ticket`.
fn attempt<'a>(
    k: &'a Keys,
    owner: &'a str,
    attempt: &'a str,
    reg: u64,
    ticket: u64,
    wake: &'a str,
) -> RedlockAcquire<'a> {
    RedlockAcquire { keys: k, terms: terms(owner, reg, RESERVE, wake), attempt, ticket }
}

/// How many of a master's two ticket-queue keys exist (0: the queue left no key behind).
async fn rl_queue_keys(c: &mut redis::aio::MultiplexedConnection, k: &Keys) -> usize {
    redis::cmd("EXISTS").arg(&k.redlock_waiters).arg(&k.redlock_waiter_ends).query_async(c).await.unwrap()
}

/// An undo of a later attempt leaves its grant alone; set-if-greater counts only the attempt
/// that stored a token as its store; the floor is the stored counter when it is ahead of the
/// clock.
#[tokio::test]
async fn undo_and_fence_are_scoped_to_one_attempt() {
    let (_server, _client, mut c, r) = fresh_lock("t", "r", Keys::new).await;
    for id in ["a1", "a2"] {
        assert_eq!(attempt(&r, "o1", id, 0, 0, "").invoke("t:boot", &mut c).await.unwrap()[0], 1);
    }
    let undo = |id| RedlockUndo { keys: &r, owner: "o1", attempt: id, reserve_ms: RESERVE, wake: "" };
    assert_eq!(undo("a1").invoke(&mut c).await.unwrap(), 0, "a stale undo must not free a later attempt's grant");
    assert_eq!(undo("a2").invoke(&mut c).await.unwrap(), 1);

    let big = "9000000000000001";
    let big_n: i64 = big.parse().unwrap();
    let conn = c.clone();
    let fence = |token: &'static str, id: &'static str| RedlockFence { keys: &r, token, attempt: id }.on(&conn);
    assert_eq!(fence(big, "f1").await, vec![1, big_n], "a greater token is stored");
    assert_eq!(fence(big, "f1").await, vec![1, big_n], "a re-delivery of the same attempt still counts");
    assert_eq!(fence(big, "f2").await, vec![0, big_n], "an equal counter stored by another attempt is not ours");
    assert_eq!(fence("5", "f3").await, vec![0, big_n], "a lower token never overwrites");
    let g = attempt(&r, "o3", "a", 0, 0, "").invoke("t:boot", &mut c).await.unwrap();
    assert_eq!(g[1].to_string(), big, "the floor is the stored counter when it is ahead of the clock");
}

/// Two key prefixes standing for two masters: registrations that arrive in opposite orders
/// give both the same head; the head alone is granted (not a waiting newcomer, not a single
/// try); a head whose round failed keeps its place and its undo wakes nobody; a release wakes
/// the next head alone; a vanished head is skipped once its reservation ends.
#[tokio::test]
async fn ticket_queue_agrees_on_the_head_whatever_the_arrival_order() {
    let (_server, client, conn) = fresh_server().await;
    let name = LockName::new("tq").unwrap();
    let (m1, m2) = (Keys::new("m1", &name), Keys::new("m2", &name));
    let mut messages = listen(&client, &[&m1.channel]).await;
    // `reg` 0: a single try; otherwise a waiting attempt with `ticket`. Whether it was granted.
    let take = |k, owner: &'static str, id: &'static str, reg: u64, ticket: u64| {
        let call = attempt(k, owner, id, reg, ticket, "").on("tq:boot", &conn);
        async move { call.await[0] == 1 }
    };
    let release = |k, owner: &'static str| {
        RedlockRelease { keys: k, owner, reserve_ms: RESERVE, wake: "", claim_ms: 0, token: 0 }.on(&conn)
    };
    let undo = |k, owner: &'static str, id: &'static str| {
        RedlockUndo { keys: k, owner, attempt: id, reserve_ms: RESERVE, wake: "" }.on(&conn)
    };
    let soon = Duration::from_secs(2);

    for k in [&m1, &m2] {
        assert!(take(k, "h", "a0", 0, 0).await, "a free key with no queue goes to the first try");
    }
    // x (ticket 200) reaches m1 first, y (ticket 100) reaches m2 first.
    assert!(!take(&m1, "x", "a1", 2000, 200).await);
    assert!(!take(&m2, "y", "a1", 2000, 100).await);
    assert!(!take(&m1, "y", "a1", 2000, 100).await);
    assert!(!take(&m2, "x", "a1", 2000, 200).await);
    assert_eq!(release(&m1, "h").await, 1);
    assert_eq!(next(&mut messages, soon).await.as_deref(), Some("@y"), "the lowest ticket is woken");
    assert_eq!(release(&m2, "h").await, 1);
    for k in [&m1, &m2] {
        assert!(!take(k, "n", "a1", 0, 0).await, "a single try does not overtake the head");
        assert!(!take(k, "x", "a2", 2000, 200).await, "nor does a later ticket");
    }
    // y's round fails elsewhere: its undo frees m1 but keeps its place and wakes nobody.
    assert!(take(&m1, "y", "a2", 2000, 100).await, "the head is granted");
    assert_eq!(undo(&m1, "y", "a1").await, 0, "an undo of another attempt frees nothing");
    assert_eq!(undo(&m1, "y", "a2").await, 1);
    let quiet = Duration::from_millis(300);
    assert_eq!(next(&mut messages, quiet).await, None, "the head's own undo wakes nobody");
    assert!(!take(&m1, "x", "a3", 2000, 200).await, "the head kept its place");
    assert_eq!(
        next(&mut messages, soon).await.as_deref(),
        Some("@y"),
        "finding the key free behind a head starts the head's reservation and wakes it"
    );
    for k in [&m1, &m2] {
        assert!(take(k, "y", "a3", 2000, 100).await, "the head wins its next round everywhere");
    }
    assert_eq!(release(&m1, "y").await, 1);
    assert_eq!(next(&mut messages, soon).await.as_deref(), Some("@x"), "the next head alone");
    // x vanishes: it holds m1 back for its reservation only.
    assert!(!take(&m1, "n", "a1", 0, 0).await);
    tokio::time::sleep(Duration::from_millis(RESERVE + 50)).await;
    assert!(take(&m1, "n", "a1", 0, 0).await, "once its reservation ended the vanished head is skipped");
    assert_eq!(release(&m1, "n").await, 1);
    assert_eq!(rl_queue_keys(&mut conn.clone(), &m1).await, 0, "an empty queue leaves no key behind");
}

/// A waiter queued with a wake channel (`owner~channel`) is woken there and not on the name's
/// channel; its own undo (it is the head) wakes nobody; its release, by its entry, removes its
/// place.
#[tokio::test]
async fn ticket_queue_wakes_an_entry_on_its_wake_channel() {
    let (_server, client, mut c, k) = fresh_lock("m1", "tqw", Keys::new).await;
    let (mut on_name, mut on_wake) = (listen(&client, &[&k.channel]).await, listen(&client, &["m1:wake:Y"]).await);
    let conn = c.clone();
    let take = |owner: &'static str, id: &'static str, reg: u64, wake: &'static str| {
        let call = attempt(&k, owner, id, reg, 100, wake).on("tq:boot", &conn);
        async move { call.await[0] == 1 }
    };
    let release = |owner: &'static str, wake: &'static str| {
        RedlockRelease { keys: &k, owner, reserve_ms: RESERVE, wake, claim_ms: 0, token: 0 }.on(&conn)
    };
    let quiet = Duration::from_millis(300);

    assert!(take("h", "a0", 0, "").await);
    assert!(!take("y", "a1", 2000, "m1:wake:Y").await);
    assert!(!take("y", "a1", 2000, "m1:wake:Y").await, "re-registering keeps one entry");
    let _ = heard(&mut on_name, quiet).await;
    assert_eq!(release("h", "").await, 1);
    assert!(take("y", "a2", 2000, "m1:wake:Y").await, "the head, by its entry, is granted");
    assert_eq!(heard(&mut on_wake, quiet).await, ["@y"], "woken on its wake channel");
    let named = heard(&mut on_name, quiet).await;
    assert!(named.iter().all(|m| !m.starts_with('@')), "no hand-off on the name's channel: {named:?}");
    let undo = RedlockUndo { keys: &k, owner: "y", attempt: "a2", reserve_ms: RESERVE, wake: "m1:wake:Y" };
    assert_eq!(undo.invoke(&mut c).await.unwrap(), 1);
    assert!(heard(&mut on_wake, quiet).await.is_empty(), "the head's own undo wakes nobody");
    assert!(take("y", "a3", 2000, "m1:wake:Y").await);
    assert_eq!(release("y", "m1:wake:Y").await, 1);
    assert_eq!(rl_queue_keys(&mut c, &k).await, 0, "the release removed its entry");
}

/// A master's ticket queue holds at most `max_waiters` entries: a new one past it is refused
/// with `{3, cap}` and not queued, a queued one still re-registers, and the ticket order holds
/// among those queued.
#[tokio::test]
async fn ticket_queue_is_capped() {
    let (_server, _client, mut c, k) = fresh_lock("tq", "cap", Keys::new).await;
    let conn = c.clone();
    let take = |owner: &'static str, ticket: u64| {
        let terms = Terms { max_waiters: 2, ..terms(owner, 2000, RESERVE, "") };
        RedlockAcquire { terms, ..attempt(&k, owner, "a", 2000, ticket, "") }.on("tq:boot", &conn)
    };
    assert_eq!(attempt(&k, "h", "a", 0, 0, "").invoke("tq:boot", &mut c).await.unwrap()[0], 1);
    assert_eq!(take("late", 200).await[0], 0);
    assert_eq!(take("early", 100).await[0], 0);
    assert_eq!(take("third", 50).await, [3, 2], "past the cap, even with the lowest ticket");
    assert_eq!(take("late", 200).await[0], 0, "a queued waiter re-registers at the cap");
    let order: Vec<String> =
        redis::cmd("ZRANGE").arg(&k.redlock_waiters).arg(0).arg(-1).query_async(&mut c).await.unwrap();
    assert_eq!(order, ["early", "late"], "ticket order, the refused one not queued");
}

/// Tokens left by the release (`scripts/redlock.rs`): a release of a lease whose token the master
/// knows grants the head the key for the claim window with the token `max(counter, t) + 1`,
/// stored as the counter, and wakes it; the head's acquire confirms it (`{4, token, floor}`)
/// and the lease is then the head's for its ttl, its token known for the next hand-off. A grant
/// is not confirmed once a store went above its token; a counter lost since (evicted) does not
/// lower the next grant's token; a lease without a known token, or a release that asks for no
/// grants, only reserves the head; an unclaimed grant lapses with the claim window, and the
/// vanished head's place with it.
#[tokio::test]
async fn a_release_grants_the_head_a_token_that_its_acquire_confirms() {
    let (_server, client, mut c, k) = fresh_lock("m1", "grant", Keys::new).await;
    let mut messages = listen(&client, &[&k.channel]).await;
    let conn = c.clone();
    let take =
        |owner: &'static str, id: &'static str, reg: u64| attempt(&k, owner, id, reg, 100, "").on("g:boot", &conn);
    let fence = |token: String, id: &'static str| {
        let conn = conn.clone();
        let k = k.clone();
        async move { RedlockFence { keys: &k, token: &token, attempt: id }.on(&conn).await }
    };
    let release = |owner: &'static str, claim_ms: u64| {
        RedlockRelease { keys: &k, owner, reserve_ms: RESERVE, wake: "", claim_ms, token: 0 }.on(&conn)
    };
    let field = |f: &'static str| {
        let (mut c, lock) = (conn.clone(), k.lock.clone());
        async move { redis::cmd("HGET").arg(lock).arg(f).query_async::<Option<String>>(&mut c).await.unwrap() }
    };
    let counter = || {
        let (mut c, key) = (conn.clone(), k.fence.clone());
        async move { redis::cmd("GET").arg(key).query_async::<Option<i64>>(&mut c).await.unwrap() }
    };
    let soon = Duration::from_secs(2);

    // h holds with a stored token; y queues; h's release grants y the next token.
    let floor = take("h", "a0", 0).await[1];
    let t = floor + 1;
    assert_eq!(fence(t.to_string(), "a0").await, vec![1, t]);
    assert_eq!(field("t").await, Some(t.to_string()), "the stored token is the lease's");
    assert_eq!(take("y", "a1", 2000).await[0], 0);
    assert_eq!(release("h", 1000).await, 1);
    assert_eq!(next(&mut messages, soon).await.as_deref(), Some("@y"), "the head is woken");
    assert_eq!(field("o").await.as_deref(), Some("y"), "granted to the head");
    assert_eq!(counter().await, Some(t + 1), "the grant's token is the counter");
    assert_eq!(take("n", "a0", 0).await[0], 0, "a granted key is held");
    let confirmed = take("y", "a2", 2000).await;
    assert_eq!(confirmed[..2], [4, t + 1], "the head's acquire confirms the grant: {confirmed:?}");
    assert!(confirmed[2] > t, "with the floor, for a round that falls back to a fence store");
    assert_eq!(field("t").await, Some((t + 1).to_string()), "the confirmed token is the lease's");
    assert_eq!(take("y", "a3", 2000).await[0], 1, "confirmed once: a re-grant is an ordinary grant");

    // A grant whose token a later store overtook is not confirmed; nor is one never made.
    assert_eq!(take("z", "a1", 2000).await[0], 0);
    assert_eq!(release("y", 1000).await, 1);
    assert_eq!(counter().await, Some(t + 2));
    assert_eq!(fence((t + 9).to_string(), "late").await, vec![1, t + 9], "a failed attempt's late store");
    let overtaken = take("z", "a2", 2000).await;
    assert_eq!(overtaken[0], 1, "an overtaken grant is an ordinary grant: {overtaken:?}");
    assert!(overtaken[1] >= t + 9);

    // The counter lost (evicted): the lease's own token still floors the next grant's.
    let t2 = overtaken[1] + 1;
    assert_eq!(fence(t2.to_string(), "a2").await, vec![1, t2]);
    assert_eq!(take("w", "a1", 2000).await[0], 0);
    redis::cmd("DEL").arg(&k.fence).query_async::<()>(&mut c).await.unwrap();
    assert_eq!(release("z", 1000).await, 1);
    assert_eq!(counter().await, Some(t2 + 1), "above the releaser's token, not 1");
    assert_eq!(take("w", "a2", 2000).await[..2], [4, t2 + 1]);

    // No token known (no fence store reached this master), or no grants asked: the head is
    // reserved, the key left free.
    assert_eq!(take("v", "a1", 2000).await[0], 0);
    redis::cmd("HDEL").arg(&k.lock).arg("t").query_async::<()>(&mut c).await.unwrap();
    assert_eq!(release("w", 1000).await, 1);
    assert_eq!(field("o").await, None, "no grant without the releaser's token");
    assert_eq!(take("v", "a2", 2000).await[0], 1);
    assert_eq!(take("u", "a1", 2000).await[0], 0);
    assert_eq!(release("v", 0).await, 1);
    assert_eq!(field("o").await, None, "no grant when none is asked for");

    // An unclaimed grant lapses with its claim window, and the vanished head's place with it.
    let floor = take("u", "a2", 2000).await[1];
    assert_eq!(fence((floor + 1).to_string(), "a2").await[0], 1);
    assert_eq!(take("gone", "a1", 2000).await[0], 0);
    assert_eq!(release("u", 200).await, 1);
    assert_eq!(field("o").await.as_deref(), Some("gone"));
    assert_eq!(take("n", "a1", 0).await[0], 0, "held for the claim window");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let free = take("n", "a2", 0).await;
    assert_eq!(free[0], 4, "then free, the vanished head skipped, its token left for the next taker: {free:?}");
}

/// With nobody queued, the release leaves the next token on the free key: the next taker's
/// acquire answers it (`{4, token, floor}`) and takes it, once: after that taker's undo, the
/// next attempt is an ordinary grant; a single try takes it as well as a waiter.
#[tokio::test]
async fn a_release_leaves_the_next_token_for_whoever_takes_the_free_key() {
    let (_server, _client, c, k) = fresh_lock("m1", "next", Keys::new).await;
    let conn = c.clone();
    let take =
        |owner: &'static str, id: &'static str, reg: u64| attempt(&k, owner, id, reg, 100, "").on("n:boot", &conn);
    let release = |owner: &'static str| {
        RedlockRelease { keys: &k, owner, reserve_ms: RESERVE, wake: "", claim_ms: 1000, token: 0 }.on(&conn)
    };
    let t = take("h", "a0", 0).await[1] + 1;
    assert_eq!(RedlockFence { keys: &k, token: &t.to_string(), attempt: "a0" }.on(&conn).await, vec![1, t]);
    assert_eq!(release("h").await, 1);
    let next = take("x", "a1", 0).await;
    assert_eq!(next[..2], [4, t + 1], "a single try takes the token left: {next:?}");
    let undo = RedlockUndo { keys: &k, owner: "x", attempt: "a1", reserve_ms: RESERVE, wake: "" };
    assert_eq!(undo.on(&conn).await, 1);
    assert_eq!(take("y", "a1", 0).await[0], 1, "a token left is taken once");
    assert_eq!(release("y").await, 1, "a lease whose token this master never stored");
    assert_eq!(take("z", "a1", 2000).await[0], 1, "leaves no token");
}

/// The release carries the releaser's token: a master that knew a lower one (its push was
/// outvoted by the majority's token and the grant never claimed) leaves the next token above the
/// releaser's, as the others do; a lower or absent one never lowers what the master leaves.
#[tokio::test]
async fn a_release_leaves_the_next_token_above_the_releaser_s_token() {
    let (_server, _client, c, k) = fresh_lock("m1", "carried", Keys::new).await;
    let conn = c.clone();
    let take =
        |owner: &'static str, id: &'static str, reg: u64| attempt(&k, owner, id, reg, 100, "").on("n:boot", &conn);
    let release = |owner: &'static str, token: i64| {
        let token = u64::try_from(token).unwrap();
        RedlockRelease { keys: &k, owner, reserve_ms: RESERVE, wake: "", claim_ms: 1000, token }.on(&conn)
    };
    let t = take("h", "a0", 0).await[1] + 1;
    assert_eq!(RedlockFence { keys: &k, token: &t.to_string(), attempt: "a0" }.on(&conn).await, vec![1, t]);
    assert_eq!(release("h", t + 10).await, 1);
    let next = take("x", "a1", 0).await;
    assert_eq!(next[..2], [4, t + 11], "the token left is above the releaser's: {next:?}");
    assert_eq!(release("x", 7).await, 1, "a lower token than the master's own");
    let after = take("y", "a2", 0).await;
    assert_eq!(after[..2], [4, t + 12], "a lower carried token never lowers the next: {after:?}");
}

/// What a master holds of `k`'s lease: owner, token, grant token and pushed mark (`o`, `t`, `g`,
/// `p`), and its fence-by.
async fn lease_fields(c: &mut redis::aio::MultiplexedConnection, k: &Keys) -> (Vec<Option<String>>, Option<String>) {
    let l: Vec<Option<String>> =
        redis::cmd("HMGET").arg(&k.lock).arg("o").arg("t").arg("g").arg("p").query_async(c).await.unwrap();
    let by: Option<String> = redis::cmd("GET").arg(&k.fence_by).query_async(c).await.unwrap();
    (l, by)
}

/// Blocking delivery on a master (`redlock/blocking.rs`): a release that grants a head armed
/// there takes the token it leaves (`push:<token>`), pushes it to the head's list and publishes
/// no hint; the head's own lease step is not handed it again, and the undo of that step keeps
/// the pushed lease; the claim extends only the owner's lease, never grants, and leaves the
/// master the majority's token (set-if-greater). An unarmed head is hinted and granted as
/// before, and its claim takes the token left for it.
#[tokio::test]
async fn a_release_pushes_to_an_armed_head_and_takes_its_token() {
    for armed in [true, false] {
        let (_server, client, mut c, k) = fresh_lock("t", "push", Keys::new).await;
        let mut messages = listen(&client, &["wch"]).await;
        assert_eq!(attempt(&k, "h", "a0", 0, 0, "").invoke("t:boot", &mut c).await.unwrap()[0], 1);
        let fenced = RedlockFence { keys: &k, token: "100", attempt: "a0" }.invoke(&mut c).await.unwrap();
        assert_eq!(fenced, vec![1, 100]);
        let queued = attempt(&k, "w", "b0", 60_000, 5, "wch").invoke("t:boot", &mut c).await.unwrap();
        assert_eq!(queued[0], 0, "held: the waiter queues");
        let list = k.pushes("w");
        if armed {
            let arm = RedlockArm { keys: &k, owner: "w", wake: "wch", list: &list, block_ms: 2000 };
            assert_eq!(arm.invoke(&mut c).await.unwrap(), 1, "queued: armed");
        }
        let release = RedlockRelease { keys: &k, owner: "h", reserve_ms: RESERVE, wake: "", claim_ms: 1000, token: 0 };
        assert_eq!(release.invoke(&mut c).await.unwrap(), 1);
        let pushed: Vec<String> = redis::cmd("LRANGE").arg(&list).arg(0).arg(-1).query_async(&mut c).await.unwrap();
        let (lease, by) = lease_fields(&mut c, &k).await;
        let hints = heard(&mut messages, Duration::from_millis(200)).await;
        let pttl: i64 = redis::cmd("PTTL").arg(&k.lock).query_async(&mut c).await.unwrap();
        assert!(pttl > 0 && pttl <= 1000, "granted for the claim window: {pttl} ms");
        let some = |v: &str| Some(v.to_owned());
        if armed {
            assert_eq!(pushed, vec!["101"], "the token pushed to the armed head");
            assert_eq!(by, some("push:101"), "taken on the head's behalf");
            assert_eq!(lease, vec![some("w"), some("101"), None, some("1")]);
            assert!(hints.is_empty(), "pushed, not hinted: {hints:?}");
        } else {
            assert!(pushed.is_empty(), "nothing pushed to an unarmed head");
            assert_eq!(by, some("next:101"), "left for the head's lease step");
            assert_eq!(lease, vec![some("w"), None, some("101"), None]);
            assert_eq!(hints, vec!["@w"], "an unarmed head is hinted");
        }
        if armed {
            // The head's own lease step (a hint, or its timer) is not handed the taken token,
            // and the undo of that failed step leaves the pushed lease alone.
            let step = attempt(&k, "w", "b1", 60_000, 5, "wch").invoke("t:boot", &mut c).await.unwrap();
            assert_eq!(step[0], 1, "its own lease: granted, not handed: {step:?}");
            let undo = RedlockUndo { keys: &k, owner: "w", attempt: "b1", reserve_ms: RESERVE, wake: "wch" };
            assert_eq!(undo.invoke(&mut c).await.unwrap(), 0, "the undo keeps a pushed lease");
            assert_eq!(lease_fields(&mut c, &k).await.0[0], some("w"));
        }
        // A majority named 103 (this master's counter had fallen behind): the claim makes the
        // master keep it, as the lease's token and its counter.
        let claim = |owner, token| RedlockClaim { keys: &k, owner, ttl_ms: 5000, token };
        assert_eq!(claim("x", 103).invoke(&mut c).await.unwrap(), 0, "another owner's claim changes nothing");
        assert_eq!(lease_fields(&mut c, &k).await.0[0], some("w"));
        assert_eq!(claim("w", 103).invoke(&mut c).await.unwrap(), 1, "claimed");
        let pttl: i64 = redis::cmd("PTTL").arg(&k.lock).query_async(&mut c).await.unwrap();
        assert!(pttl > 4000, "claimed for the ttl: {pttl} ms");
        let (lease, by) = lease_fields(&mut c, &k).await;
        assert_eq!(lease, vec![some("w"), some("103"), None, None], "an ordinary lease with the majority's token");
        assert_eq!(by, some("claim:103"), "no longer left for anyone");
        let counter: u64 = redis::cmd("GET").arg(&k.fence).query_async(&mut c).await.unwrap();
        assert_eq!(counter, 103, "the counter raised to the claimed token");
        // The undo of a failed attempt of the head that arrives after the claim (its lease step
        // fell back before the pushes made a majority) leaves the claimed lease alone.
        let undo = RedlockUndo { keys: &k, owner: "w", attempt: "b1", reserve_ms: RESERVE, wake: "wch" };
        assert_eq!(undo.invoke(&mut c).await.unwrap(), 0, "a late undo keeps a claimed lease");
        // A claim never lowers the counter, and never grants: released, the lease stays so.
        assert_eq!(claim("w", 90).invoke(&mut c).await.unwrap(), 1);
        let counter: u64 = redis::cmd("GET").arg(&k.fence).query_async(&mut c).await.unwrap();
        assert_eq!(counter, 103, "set-if-greater");
        let release =
            RedlockRelease { keys: &k, owner: "w", reserve_ms: RESERVE, wake: "wch", claim_ms: 1000, token: 0 };
        assert_eq!(release.invoke(&mut c).await.unwrap(), 1);
        assert_eq!(claim("w", 103).invoke(&mut c).await.unwrap(), 0, "a late claim grants nothing");
        assert_eq!(lease_fields(&mut c, &k).await.0[0], None);
    }
}

/// The arm drains what was pushed before it, answered as the hint `h` (counted from this arm a
/// grant pushed earlier could have lapsed), and answers `x` to an owner not queued on the
/// master; either is on the list for the `BLPOP` that follows.
#[tokio::test]
async fn the_arm_drains_an_earlier_push_and_refuses_an_owner_not_queued() {
    let (_server, _client, mut c, k) = fresh_lock("t", "arm", Keys::new).await;
    let list = k.pushes("w");
    let arm = RedlockArm { keys: &k, owner: "w", wake: "wch", list: &list, block_ms: 2000 };
    let range = |c: &mut redis::aio::MultiplexedConnection| {
        let mut c = c.clone();
        let list = list.clone();
        async move {
            let got: Vec<String> = redis::cmd("LRANGE").arg(&list).arg(0).arg(-1).query_async(&mut c).await.unwrap();
            got
        }
    };
    assert_eq!(arm.invoke(&mut c).await.unwrap(), 0);
    assert_eq!(range(&mut c).await, vec!["x"], "not queued");
    let _: () = redis::cmd("DEL").arg(&list).query_async(&mut c).await.unwrap();
    assert_eq!(attempt(&k, "h", "a0", 0, 0, "").invoke("t:boot", &mut c).await.unwrap()[0], 1);
    assert_eq!(attempt(&k, "w", "b0", 60_000, 5, "wch").invoke("t:boot", &mut c).await.unwrap()[0], 0);
    let _: () = redis::cmd("RPUSH").arg(&list).arg("77").query_async(&mut c).await.unwrap();
    assert_eq!(arm.invoke(&mut c).await.unwrap(), 0);
    assert_eq!(range(&mut c).await, vec!["h"], "an earlier push is drained as a hint");
    let _: () = redis::cmd("DEL").arg(&list).query_async(&mut c).await.unwrap();
    assert_eq!(arm.invoke(&mut c).await.unwrap(), 1, "queued, nothing pushed: armed");
    let mark: Option<i64> = redis::cmd("HGET").arg(&k.armed).arg("w").query_async(&mut c).await.unwrap();
    assert!(mark.is_some(), "the mark a release looks for");
}
