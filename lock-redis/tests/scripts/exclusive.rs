//! The exclusive lock's scripts and its waiter queue (`scripts/queue.rs` has the rules).

use std::time::Duration;

use lock_redis::scripts::HandOffScript::{Abandon, Release};
use lock_redis::scripts::{Acquire, Inspect, Keys, LeaseEnd, Renew};

use crate::{acquire, fresh_lock, hand_off, heard, listen, Attempt, Call};

const RESERVE: u64 = 150;

/// A re-attempt by the same owner returns the stored token, others see the PTTL; release and
/// renew are owner-checked; the next grant's token is higher.
#[tokio::test]
async fn grants_are_owner_checked_and_tokens_rise() {
    let (_server, _client, mut c, k) = fresh_lock("t", "s", Keys::new).await;
    let first = acquire(&k, "o1", 0, RESERVE, "").invoke("t:boot", &mut c).await.unwrap();
    let again = acquire(&k, "o1", 0, RESERVE, "").invoke("t:boot", &mut c).await.unwrap();
    assert_eq!(first[0], 1);
    assert_eq!(first, again, "a re-attempt by the same owner returns the same grant");
    let other = acquire(&k, "o2", 0, RESERVE, "").invoke("t:boot", &mut c).await.unwrap();
    assert_eq!(other[0], 0);
    assert!(other[1] > 4000 && other[1] <= 5000, "PTTL {}", other[1]);
    assert_eq!(hand_off(Release, &k, "o2", RESERVE, "").invoke(&mut c).await.unwrap(), 0, "not ours");
    let renewed = Renew { lock: &k.lock, owner: "o2", ttl_ms: 5000, end: LeaseEnd::Hash { fence_ms: 0 } }
        .invoke(&mut c)
        .await
        .unwrap();
    assert_eq!(renewed, 0);
    assert_eq!(hand_off(Release, &k, "o1", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    let next = acquire(&k, "o2", 0, RESERVE, "").invoke("t:boot", &mut c).await.unwrap();
    assert!(next[1] > first[1]);
}

/// The lease ends by the server's clock (`e` in the name's hash), not by the key's expiry: an
/// ended lease is gone for every script although its fields stay until the next grant — renew
/// refuses it, inspect reports nobody, the next grant carries none of its holder id or metadata
/// — and a renewal moves the hash's idle expiry with the lease.
#[tokio::test]
async fn an_ended_lease_is_gone_though_its_fields_stay() {
    let (_server, _client, mut c, k) = fresh_lock("t", "ended", Keys::new).await;
    let () = redis::cmd("SET").arg("t:boot").arg(0).query_async(&mut c).await.unwrap();
    let short = Acquire { ttl_ms: 100, holder: "h1", metadata: "+m1", ..acquire(&k, "o1", 0, RESERVE, "") };
    assert_eq!(short.invoke("t:boot", &mut c).await.unwrap()[0], 1);
    assert_eq!(Inspect { keys: &k }.invoke(&mut c).await.unwrap()[2], "+h1");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let owner: Option<String> = redis::cmd("HGET").arg(&k.lock).arg("o").query_async(&mut c).await.unwrap();
    assert_eq!(owner.as_deref(), Some("o1"), "the ended lease's fields stay");
    let renew = Renew { lock: &k.lock, owner: "o1", ttl_ms: 5000, end: LeaseEnd::Hash { fence_ms: 0 } };
    assert_eq!(renew.invoke(&mut c).await.unwrap(), 0, "an ended lease is not renewed");
    assert!(Inspect { keys: &k }.invoke(&mut c).await.unwrap().is_empty(), "nobody holds it");
    let next = Acquire { fence_ms: 60_000, ..acquire(&k, "o2", 0, RESERVE, "") };
    assert_eq!(next.invoke("t:boot", &mut c).await.unwrap()[0], 1, "free for the next owner");
    let info = Inspect { keys: &k }.invoke(&mut c).await.unwrap();
    assert_eq!((info[2].as_str(), info[3].as_str()), ("", ""), "no holder id or metadata of the ended lease");
    let renew = Renew { lock: &k.lock, owner: "o2", ttl_ms: 5000, end: LeaseEnd::Hash { fence_ms: 90_000 } };
    assert_eq!(renew.invoke(&mut c).await.unwrap(), 1);
    let pttl: i64 = redis::cmd("PTTL").arg(&k.lock).query_async(&mut c).await.unwrap();
    assert!(pttl > 85_000, "the renewal moved the hash's idle expiry: {pttl}");
}

/// The queue's rules: a newcomer (single try or waiting) does not overtake a queued waiter, a
/// release wakes the head alone, a head that vanished is skipped once its reservation ends,
/// and a waiter that gives up leaves the queue.
#[tokio::test]
async fn queue_hands_off_in_order_and_skips_a_vanished_head() {
    let (_server, client, mut c, k) = fresh_lock("fq", "n", Keys::new).await;
    let mut messages = listen(&client, &[&k.channel]).await;
    let conn = c.clone();
    // `reg` 0: a single try; otherwise a waiting attempt registering for `reg` ms.
    let attempt = |owner: &'static str, reg: u64| acquire(&k, owner, reg, RESERVE, "").on("fq:boot", &conn);
    let release = |owner: &'static str| hand_off(Release, &k, owner, RESERVE, "").on(&conn);
    // The next hand-off; grants (`+`) and releases nobody waits for (`-`) are for observers.
    async fn next(messages: &mut redis::aio::PubSubStream) -> String {
        loop {
            let payload = crate::next(messages, Duration::from_secs(2)).await.expect("a message");
            if payload != "+" && payload != "-" {
                return payload;
            }
        }
    }

    assert_eq!(attempt("a", 0).await[0], 1, "a free lock with no queue goes to the first try");
    let w = attempt("w", 2000).await;
    assert!(w[0] == 0 && w[1] > 4000, "a waiter is refused with the holder's ttl: {w:?}");
    assert_eq!(attempt("w", 2000).await[0], 0, "re-registering is idempotent");
    assert_eq!(release("a").await, 1);
    assert_eq!(next(&mut messages).await, "@w", "the release wakes the head alone");
    let n = attempt("n", 0).await;
    assert!(n[0] == 0 && n[1] <= RESERVE as i64, "a single try does not overtake the reserved head: {n:?}");
    assert_eq!(attempt("n", 2000).await[0], 0, "nor does a waiting newcomer");
    assert_eq!(attempt("w", 2000).await[0], 1, "the head takes the lock");
    assert_eq!(release("w").await, 1);
    assert_eq!(next(&mut messages).await, "@n", "the next release wakes the next in line");

    // `n` vanishes: it holds the free lock back for its reservation only.
    assert_eq!(attempt("m", 0).await[0], 0, "the reserved head keeps the lock from a newcomer");
    tokio::time::sleep(Duration::from_millis(RESERVE + 50)).await;
    assert_eq!(attempt("m", 0).await[0], 1, "once its reservation ended the vanished head is skipped");

    // A waiter that gives up leaves the queue; the release wakes the one behind it.
    assert_eq!(attempt("y", 2000).await[0], 0);
    assert_eq!(attempt("z", 2000).await[0], 0);
    assert_eq!(hand_off(Abandon, &k, "y", RESERVE, "").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(release("m").await, 1);
    assert_eq!(next(&mut messages).await, "@z", "the waiter that gave up is not woken");
    assert_eq!(attempt("z", 2000).await[0], 1);
    assert_eq!(release("z").await, 1);
    assert_eq!(crate::queue_keys(&mut c, &k).await, 0, "an empty queue leaves no key behind");
}

/// A waiter queued with a wake channel is woken there, and only there: the name's channel,
/// which every client used to hear, carries no hand-off for it; a waiter without one is still
/// woken on the name's channel; abandoning with the wake channel removes the entry.
#[tokio::test]
async fn a_waiter_with_a_wake_channel_is_woken_on_it_alone() {
    let (_server, client, mut c, k) = fresh_lock("fq", "w", Keys::new).await;
    let (mut on_name, mut on_wake) = (listen(&client, &[&k.channel]).await, listen(&client, &["fq:wake:A"]).await);
    let quiet = Duration::from_millis(300);
    let conn = c.clone();
    let attempt = |owner: &'static str, reg: u64, wake: &'static str| {
        let call = acquire(&k, owner, reg, RESERVE, wake).on("fq:boot", &conn);
        async move { call.await[0] }
    };
    let release = |owner: &'static str| hand_off(Release, &k, owner, RESERVE, "").on(&conn);

    assert_eq!(attempt("a", 0, "").await, 1);
    assert_eq!(attempt("w", 2000, "fq:wake:A").await, 0);
    assert_eq!(attempt("v", 2000, "").await, 0);
    assert_eq!(attempt("w", 2000, "fq:wake:A").await, 0, "re-registering is idempotent");
    let _ = heard(&mut on_name, quiet).await;
    assert_eq!(release("a").await, 1);
    // Within the head's reservation (RESERVE ms), so it is not skipped.
    assert_eq!(attempt("v", 2000, "").await, 0, "the head keeps its place");
    assert_eq!(attempt("w", 2000, "fq:wake:A").await, 1, "the head, by its entry, takes the lock");
    assert_eq!(heard(&mut on_wake, quiet).await, ["@w"], "the head is woken on its wake channel");
    let named = heard(&mut on_name, quiet).await;
    assert!(named.iter().all(|m| !m.starts_with('@')), "no hand-off on the name's channel: {named:?}");
    assert_eq!(release("w").await, 1);
    assert!(heard(&mut on_name, quiet).await.contains(&"@v".to_owned()), "an entry without one: the name's channel");
    assert_eq!(attempt("v", 2000, "").await, 1);

    assert_eq!(attempt("x", 2000, "fq:wake:A").await, 0);
    assert_eq!(hand_off(Abandon, &k, "x", RESERVE, "fq:wake:A").invoke(&mut c).await.unwrap(), 1);
    assert_eq!(crate::queue_keys(&mut c, &k).await, 0, "abandoned by its entry");
    assert_eq!(release("v").await, 1);
    assert!(heard(&mut on_wake, quiet).await.is_empty(), "nobody queued: no wake");
}
