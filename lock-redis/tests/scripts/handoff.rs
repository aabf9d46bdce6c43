//! Grants in the release (`scripts/queue.rs`, "Grants in the release"; `handoff.rs` in the
//! crate): a release grants the queue's head that takes grants provisionally, the head's acquire
//! claims it.

use std::time::Duration;

use lock_redis::scripts::HandOffScript::{Abandon, Release};
use lock_redis::scripts::{Acquire, Arm, ClaimPushed, Keys};

use crate::{acquire, fresh_lock, hand_off, heard, listen, Attempt, Call, CLAIM_MS};

const RESERVE: u64 = 150;

/// A waiting attempt of `owner` for `ttl_ms`, woken on `fq:wake:A`, with grant terms `grant`
/// (`"<ttl ms>"`, `""`: none).
fn waiting<'a>(k: &'a Keys, owner: &'a str, ttl_ms: u64, grant: &'a str) -> Acquire<'a> {
    Acquire { ttl_ms, grant, ..acquire(k, owner, 20_000, RESERVE, "fq:wake:A") }
}

/// The lease's owner and the ms it has left by the server's clock (the name's hash: `o`, `e`).
async fn lease(c: &mut redis::aio::MultiplexedConnection, k: &Keys) -> (Option<String>, i64) {
    let (o, e): (Option<String>, Option<i64>) =
        redis::cmd("HMGET").arg(&k.lock).arg("o").arg("e").query_async(c).await.unwrap();
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(c).await.unwrap();
    (o, e.map_or(-2, |e| e - (s * 1000 + us / 1000)))
}

/// A release grants the lock to a head whose entry takes grants: the lease is the head's, for
/// the claim window, with a higher token, and the head's wake channel alone hears `@owner` (no
/// token); the head's script claims it for its ttl; a head without grant terms (or an older
/// client's `<ttl>:<attempt>` terms) is woken as before; a waiter that abandons a grant it
/// never claimed releases it and hands the lock on.
#[tokio::test]
async fn a_release_grants_the_lock_to_a_head_that_takes_grants() {
    let (_server, client, mut c, k) = fresh_lock("fq", "g", Keys::new).await;
    let mut on_wake = listen(&client, &["fq:wake:A"]).await;
    let quiet = Duration::from_millis(300);
    let conn = c.clone();
    let attempt = |owner: &'static str, grant: &'static str| waiting(&k, owner, 5000, grant).on("fq:boot", &conn);
    let release = |owner: &'static str| hand_off(Release, &k, owner, RESERVE, "").on(&conn);

    let first = acquire(&k, "a", 0, RESERVE, "").invoke("fq:boot", &mut c).await.unwrap();
    assert_eq!(first[0], 1);
    assert_eq!(attempt("w", "9000").await[0], 0);
    assert_eq!(attempt("w", "9000").await[0], 0, "re-registering");
    assert_eq!(attempt("v", "").await[0], 0, "behind w, no grant terms");
    assert_eq!(release("a").await, 1);
    let (o, pttl) = lease(&mut c, &k).await;
    assert_eq!(o.as_deref(), Some("w"), "the release granted the head");
    let claim = CLAIM_MS as i64;
    assert!(pttl > claim - 500 && pttl <= claim, "for the claim window: {pttl}");
    assert_eq!(heard(&mut on_wake, quiet).await, ["@w"], "one wake-up, no token");
    let token: i64 = redis::cmd("HGET").arg(&k.lock).arg("f").query_async(&mut c).await.unwrap();
    assert!(token > first[1], "a higher token: {token} after {}", first[1]);
    // The head's script claims what it was granted: same token, its own ttl.
    assert_eq!(attempt("w", "9000").await, [1, token]);
    assert!(lease(&mut c, &k).await.1 > 4000, "claimed for the ttl of its attempt (5 s)");

    // `v` has no grant terms: woken, not granted; nor is `u`, whose terms are not `<ttl ms>`.
    assert_eq!(attempt("u", "9000:3").await[0], 0);
    assert_eq!(release("w").await, 1);
    assert_eq!(lease(&mut c, &k).await.0, None, "no grant terms: the lock stays free for v to take");
    // Within v's reservation (RESERVE ms).
    assert_eq!(attempt("v", "").await[0], 1);
    assert_eq!(heard(&mut on_wake, quiet).await, ["@v"]);
    assert_eq!(release("v").await, 1);
    assert_eq!(lease(&mut c, &k).await.0, None, "malformed terms: woken, not granted");
    assert_eq!(attempt("u", "").await[0], 1);
    assert_eq!(heard(&mut on_wake, quiet).await, ["@u"]);

    // `x` is granted, never takes it, and abandons: the grant is released and `y` granted.
    assert_eq!(attempt("x", "9000").await[0], 0);
    assert_eq!(attempt("y", "9000").await[0], 0);
    assert_eq!(release("u").await, 1);
    assert_eq!(lease(&mut c, &k).await.0.as_deref(), Some("x"));
    assert_eq!(hand_off(Abandon, &k, "x", RESERVE, "fq:wake:A").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(lease(&mut c, &k).await.0.as_deref(), Some("y"), "the untaken grant went on to the next head");
    assert_eq!(heard(&mut on_wake, quiet).await, ["@x", "@y"]);
    assert_eq!(release("y").await, 1);
    assert_eq!(crate::queue_keys(&mut c, &k).await, 0, "every entry gone");
}

/// The release grants the head for the claim window only and tells it `@<owner>`, no token;
/// the head's script claims the grant (same token, its full ttl); a grant nobody claims lapses
/// after the window and the next waiter takes the lock then, not after the head's ttl.
#[tokio::test]
async fn a_grant_in_the_release_is_provisional_until_claimed() {
    let (_server, client, mut c, k) = fresh_lock("ho", "claim", Keys::new).await;
    let mut wake = listen(&client, &["fq:wake:A"]).await;
    let conn = c.clone();
    let attempt = |owner: &'static str, ttl_ms: u64| {
        let (conn, k, grant) = (&conn, &k, ttl_ms.to_string());
        async move { waiting(k, owner, ttl_ms, &grant).on("ho:boot", conn).await }
    };
    let release = |owner: &'static str| hand_off(Release, &k, owner, RESERVE, "").on(&conn);
    let within = Duration::from_secs(2);

    assert_eq!(attempt("a", 60_000).await[0], 1);
    assert_eq!(attempt("w", 60_000).await[0], 0);
    assert_eq!(attempt("v", 60_000).await[0], 0);
    assert_eq!(release("a").await, 1);
    let (o, pttl) = lease(&mut c, &k).await;
    assert_eq!(o.as_deref(), Some("w"), "the release granted the head");
    assert!(pttl > 0 && pttl <= CLAIM_MS as i64, "for the claim window only: {pttl}");
    assert_eq!(crate::next(&mut wake, within).await.as_deref(), Some("@w"), "a wake-up naming no token");
    let token: i64 = redis::cmd("HGET").arg(&k.lock).arg("f").query_async(&mut c).await.unwrap();
    assert_eq!(attempt("w", 60_000).await, [1, token], "the claim: the grant's token");
    assert!(lease(&mut c, &k).await.1 > 59_000, "claimed: the head's ttl");

    // `v` is granted and never claims: the lock is free once the window has passed.
    assert_eq!(attempt("x", 60_000).await[0], 0, "x queues behind v");
    assert_eq!(release("w").await, 1);
    assert_eq!(crate::next(&mut wake, within).await.as_deref(), Some("@v"));
    assert_eq!(lease(&mut c, &k).await.0.as_deref(), Some("v"));
    assert_eq!(attempt("x", 60_000).await[0], 0, "v holds the grant in its window");
    tokio::time::sleep(Duration::from_millis(CLAIM_MS + 100)).await;
    assert_eq!(attempt("x", 60_000).await[0], 1, "the unclaimed grant lapsed");

    // A head with a ttl below the window is granted for its ttl.
    assert_eq!(attempt("y", 300).await[0], 0);
    assert_eq!(release("x").await, 1);
    let (o, pttl) = lease(&mut c, &k).await;
    assert!(o.as_deref() == Some("y") && pttl > 0 && pttl <= 300, "{o:?} {pttl}");
}

/// A waiter whose provisional grant lapsed, queued again behind another waiter, and leaves once
/// that one has gone (it is the head then): its abandon must free the lock, not grant it back to
/// the leaver. A lapsed grant's owner stays in the name's hash, so the abandon releases it and
/// hands the lock on; with the leaver's own entry still queued at that moment, the hand-on
/// granted the leaver again, and the lock stayed with a waiter that had left for a claim window.
#[tokio::test]
async fn an_abandon_never_grants_the_leaver() {
    let (_server, _client, mut c, k) = fresh_lock("lv", "leaver", Keys::new).await;
    let conn = c.clone();
    let attempt = |owner: &'static str, registration_ms: u64| {
        Acquire { registration_ms, ..waiting(&k, owner, 60_000, "60000") }.on("lv:boot", &conn)
    };
    assert_eq!(attempt("a", 20_000).await[0], 1);
    assert_eq!(attempt("w", 20_000).await[0], 0);
    assert_eq!(hand_off(Release, &k, "a", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(lease(&mut c, &k).await.0.as_deref(), Some("w"), "the release granted w, provisionally");
    // x queues behind w's grant, registered a little longer than the claim window.
    assert_eq!(attempt("x", CLAIM_MS + 600).await[0], 0);
    tokio::time::sleep(Duration::from_millis(CLAIM_MS + 100)).await;
    // w's grant lapsed unclaimed; its next attempt finds the free lock owed to x, and queues.
    assert_eq!(attempt("w", 20_000).await[0], 0, "the free lock is owed to the head, x");
    // x's registration ends (its process died): w is the head, and leaves.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(hand_off(Abandon, &k, "w", RESERVE, "fq:wake:A").invoke(&mut c).await.unwrap(), 1);
    let (owner, left) = lease(&mut c, &k).await;
    assert!(
        !(owner.as_deref() == Some("w") && left >= 0),
        "the leaver w was granted the lock by its own abandon ({left} ms left)"
    );
    assert_eq!(attempt("n", 20_000).await[0], 1, "a newcomer takes the free lock at once");
}

/// Blocking delivery (`crate::blocking`): an armed head is granted by the release with the
/// token pushed onto its own list and no hint published; the mark goes with its queue place; an
/// arm answers on the list itself when no push can come (`x`: not queued, or no grant terms) or
/// when it drained a push made before it (`h`: a hint, since counted from this arm it could be a
/// lapsed lease); an abandon deletes a list not popped, and releases its grant.
#[tokio::test]
async fn an_armed_head_is_pushed_its_grant() {
    let (_server, client, mut c, k) = fresh_lock("bd", "push", Keys::new).await;
    let mut wake = listen(&client, &["fq:wake:A"]).await;
    let conn = c.clone();
    let attempt = |owner: &'static str, grant: &'static str| waiting(&k, owner, 5000, grant).on("bd:boot", &conn);
    let release = |owner: &'static str| hand_off(Release, &k, owner, RESERVE, "").on(&conn);
    let (lw, lv, lu) = (k.pushes("w"), k.pushes("v"), k.pushes("u"));
    let arm = |owner: &'static str, list: &str| {
        let (mut c, k, list) = (conn.clone(), k.clone(), list.to_owned());
        async move { Arm { keys: &k, owner, list: &list, block_ms: 2000 }.invoke(&mut c).await.unwrap() }
    };
    let quiet = Duration::from_millis(300);

    assert_eq!(arm("w", &lw).await, 0, "not queued yet");
    assert_eq!(items(&mut c, &lw).await, ["x"], "answered on the list: no push will come");
    redis::cmd("DEL").arg(&lw).query_async::<i64>(&mut c).await.unwrap();
    assert_eq!(attempt("a", "").await[0], 1);
    assert_eq!(attempt("w", "5000").await[0], 0);
    assert_eq!(attempt("u", "").await[0], 0);
    assert_eq!(arm("u", &lu).await, 0, "u takes no grants");
    assert_eq!(items(&mut c, &lu).await, ["x"]);
    assert_eq!(arm("w", &lw).await, 1, "w is queued with grant terms: armed");

    assert_eq!(release("a").await, 1);
    let (o, pttl) = lease(&mut c, &k).await;
    assert_eq!(o.as_deref(), Some("w"), "the release granted the armed head");
    assert!(pttl > 0 && pttl <= CLAIM_MS as i64, "for the claim window: {pttl}");
    let token: i64 = redis::cmd("HGET").arg(&k.lock).arg("f").query_async(&mut c).await.unwrap();
    assert_eq!(items(&mut c, &lw).await, [token.to_string()], "its token on its list");
    let list_ttl: i64 = redis::cmd("PTTL").arg(&lw).query_async(&mut c).await.unwrap();
    assert!(list_ttl > 0 && list_ttl <= CLAIM_MS as i64, "the list lasts no longer than the grant: {list_ttl}");
    assert!(heard(&mut wake, quiet).await.is_empty(), "no hint races the push");
    let marks: i64 = redis::cmd("HLEN").arg(&k.armed).query_async(&mut c).await.unwrap();
    assert_eq!(marks, 0, "the mark went with the queue place");
    // An arm after a push it did not pop drains it and answers a hint.
    let claim = |owner: &'static str, token: i64| {
        let (mut c, lock) = (conn.clone(), k.lock.clone());
        async move {
            let call = ClaimPushed { lock: &lock, owner, ttl_ms: 5000, fence_ms: 0, token: token as u64 };
            call.invoke(&mut c).await.unwrap()
        }
    };
    assert_eq!(claim("w", token + 1).await, 0, "another token: not this grant");
    assert_eq!(claim("v", token).await, 0, "another owner");
    assert_eq!(claim("w", token).await, 1, "w claims its grant");
    assert!(lease(&mut c, &k).await.1 > 4000, "for its ttl");
    assert_eq!(attempt("v", "5000").await[0], 0);
    redis::cmd("RPUSH").arg(&lv).arg("123").query_async::<i64>(&mut c).await.unwrap();
    assert_eq!(arm("v", &lv).await, 0);
    assert_eq!(items(&mut c, &lv).await, ["h"], "drained, answered as a hint");
    redis::cmd("DEL").arg(&lv).query_async::<i64>(&mut c).await.unwrap();

    // u leaves; v, armed, is granted by w's release, never pops, and leaves: list gone, lease
    // released, nobody left to hand it to.
    assert_eq!(hand_off(Abandon, &k, "u", RESERVE, "fq:wake:A").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(arm("v", &lv).await, 1);
    assert_eq!(release("w").await, 1);
    assert_eq!(lease(&mut c, &k).await.0.as_deref(), Some("v"));
    assert_eq!(items(&mut c, &lv).await.len(), 1);
    assert_eq!(hand_off(Abandon, &k, "v", RESERVE, "fq:wake:A").invoke(&mut c).await.unwrap(), 1);
    assert!(items(&mut c, &lv).await.is_empty(), "the abandon deleted the list");
    assert_eq!(lease(&mut c, &k).await.0, None, "and released the grant");
    let pushed: i64 = redis::cmd("HGET").arg(&k.lock).arg("f").query_async(&mut c).await.unwrap();
    assert_eq!(claim("v", pushed).await, 0, "a claim after the release grants nothing");
    assert_eq!(lease(&mut c, &k).await.0, None);
    assert!(heard(&mut wake, quiet).await.is_empty());
    assert_eq!(crate::queue_keys(&mut c, &k).await, 0, "every entry gone");
}

/// The items of the list `key`.
async fn items(c: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE").arg(key).arg(0).arg(-1).query_async(c).await.unwrap()
}
