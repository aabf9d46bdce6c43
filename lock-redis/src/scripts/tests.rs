//! The scripts against a real server.

use lock_core::LockName;

use super::*;

/// The boot marker of these tests; quiet period 0 except where the quiet period is the point.
const BOOT: &str = "t:boot";

#[test]
fn keys_share_a_tag_and_never_collide() {
    let a = Keys::new("p", &LockName::new("a/b").unwrap());
    let b = Keys::new("p", &LockName::new("a%2Fb").unwrap());
    assert_ne!(a.lock, b.lock);
    assert_eq!(a.lock, "p:{a%2Fb}:lock");
    assert_eq!(a.fence, "p:{a%2Fb}:fence");
    let braces = Keys::new("p", &LockName::new("x}{y").unwrap());
    assert_eq!(braces.lock.matches('{').count(), 1);
    assert_eq!(a.channel, "p:{a%2Fb}:released");
}

/// The scripts themselves, against a fresh local server.
#[tokio::test]
async fn scripts_against_a_server() {
    let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let k = Keys::new("t", &LockName::new("s").unwrap());

    // Single instance: same owner re-attempt returns the stored token; others see the PTTL.
    let first: Vec<i64> =
        ACQUIRE.key(&k.lock).key(&k.fence).key(BOOT).arg("o1").arg(5000).arg(0).invoke_async(&mut c).await.unwrap();
    let again: Vec<i64> =
        ACQUIRE.key(&k.lock).key(&k.fence).key(BOOT).arg("o1").arg(5000).arg(0).invoke_async(&mut c).await.unwrap();
    assert_eq!(first[0], 1);
    assert_eq!(first, again, "a re-attempt by the same owner returns the same grant");
    let other: Vec<i64> =
        ACQUIRE.key(&k.lock).key(&k.fence).key(BOOT).arg("o2").arg(5000).arg(0).invoke_async(&mut c).await.unwrap();
    assert_eq!(other[0], 0);
    assert!(other[1] > 4000 && other[1] <= 5000, "PTTL {}", other[1]);
    let not_ours: i64 = RELEASE.key(&k.lock).arg("o2").arg(&k.channel).invoke_async(&mut c).await.unwrap();
    assert_eq!(not_ours, 0);
    let renewed: i64 = RENEW.key(&k.lock).arg("o2").arg(5000).invoke_async(&mut c).await.unwrap();
    assert_eq!(renewed, 0);
    let released: i64 = RELEASE.key(&k.lock).arg("o1").arg(&k.channel).invoke_async(&mut c).await.unwrap();
    assert_eq!(released, 1);
    let next: Vec<i64> =
        ACQUIRE.key(&k.lock).key(&k.fence).key(BOOT).arg("o2").arg(5000).arg(0).invoke_async(&mut c).await.unwrap();
    assert!(next[1] > first[1]);

    // Read-write lock: a reader's re-attempt returns its token; a refused waiting writer's
    // claim holds new readers back (not the readers already in); the writer's token is
    // above the readers'; a single try (claim 0) leaves no claim.
    let rw = RwKeys::new("t", &LockName::new("s").unwrap());
    let conn = c.clone();
    let read = |owner: &'static str| {
        let mut c = conn.clone();
        let k = RwKeys::new("t", &LockName::new("s").unwrap());
        async move {
            let r: Vec<i64> = RW_READ
                .key(&k.readers)
                .key(&k.tokens)
                .key(&k.writer)
                .key(&k.waiting)
                .key(&k.fence)
                .key(BOOT)
                .arg(owner)
                .arg(5000)
                .arg(0)
                .invoke_async(&mut c)
                .await
                .unwrap();
            r
        }
    };
    let write = |owner: &'static str, claim: u64| {
        let mut c = conn.clone();
        let k = RwKeys::new("t", &LockName::new("s").unwrap());
        async move {
            let r: Vec<i64> = RW_WRITE
                .key(&k.readers)
                .key(&k.tokens)
                .key(&k.writer)
                .key(&k.waiting)
                .key(&k.fence)
                .key(BOOT)
                .arg(owner)
                .arg(5000)
                .arg(claim)
                .arg(0)
                .invoke_async(&mut c)
                .await
                .unwrap();
            r
        }
    };
    let r1 = read("r1").await;
    assert_eq!(r1[0], 1);
    assert_eq!(read("r1").await, r1, "a reader's re-attempt returns the same grant");
    assert_eq!(write("w1", 0).await[0], 0);
    assert_eq!(read("r2").await[0], 1, "a single try leaves no claim");
    let refused = write("w1", 3000).await;
    assert_eq!(refused[0], 0);
    assert!(refused[1] > 4000 && refused[1] <= 5000, "the readers' remaining lease: {}", refused[1]);
    assert_eq!(read("r3").await[0], 0, "a waiting writer's claim holds new readers back");
    assert_eq!(read("r1").await, r1, "a reader already in keeps its grant");
    for owner in ["r1", "r2"] {
        let done: i64 = ZSET_RELEASE
            .key(&rw.readers)
            .key(&rw.tokens)
            .arg(owner)
            .arg(&rw.to_writers)
            .arg("1")
            .invoke_async(&mut c)
            .await
            .unwrap();
        assert_eq!(done, 1);
    }
    let w = write("w1", 3000).await;
    assert_eq!(w[0], 1);
    assert!(w[1] > r1[1]);
    assert_eq!(write("w1", 3000).await, w, "a writer's re-attempt returns the same grant");
    let claims: i64 = redis::cmd("EXISTS").arg(&rw.waiting).query_async(&mut c).await.unwrap();
    assert_eq!(claims, 0, "the granted writer's claim is gone");
    let not_ours: i64 = RW_WRITE_RELEASE
        .key(&rw.writer)
        .key(&rw.waiting)
        .arg("w2")
        .arg(&rw.to_readers)
        .arg(&rw.to_writers)
        .invoke_async(&mut c)
        .await
        .unwrap();
    assert_eq!(not_ours, 0);

    // Semaphore: permits must agree while held; an empty semaphore starts afresh.
    let sk = SemKeys::new("t", &LockName::new("s").unwrap());
    let permit = |owner: &'static str, n: u32| {
        let mut c = conn.clone();
        let k = SemKeys::new("t", &LockName::new("s").unwrap());
        async move {
            let r: Vec<i64> = SEM_ACQUIRE
                .key(&k.holders)
                .key(&k.tokens)
                .key(&k.permits)
                .key(&k.fence)
                .key(BOOT)
                .arg(owner)
                .arg(5000)
                .arg(n)
                .arg(0)
                .invoke_async(&mut c)
                .await
                .unwrap();
            r
        }
    };
    let p1 = permit("p1", 1).await;
    assert_eq!(p1[0], 1);
    assert_eq!(permit("p1", 1).await, p1, "a re-attempt returns the same grant");
    assert_eq!(permit("p2", 1).await[0], 0);
    assert_eq!(permit("p2", 2).await, vec![-1, 1], "in use with 1 permit");
    let done: i64 = ZSET_RELEASE
        .key(&sk.holders)
        .key(&sk.tokens)
        .key(&sk.permits)
        .arg("p1")
        .arg(&sk.channel)
        .arg("0")
        .invoke_async(&mut c)
        .await
        .unwrap();
    assert_eq!(done, 1);
    let p2 = permit("p2", 2).await;
    assert_eq!(p2[0], 1, "an empty semaphore takes a new number of permits");
    assert!(p2[1] > p1[1]);

    // Redlock: an undo of an earlier attempt leaves a later attempt's grant alone.
    let r = Keys::new("t", &LockName::new("r").unwrap());
    for attempt in ["a1", "a2"] {
        let g: Vec<i64> = REDLOCK_ACQUIRE
            .key(&r.lock)
            .key(&r.fence)
            .key(BOOT)
            .arg("o1")
            .arg(5000)
            .arg(attempt)
            .arg(0)
            .invoke_async(&mut c)
            .await
            .unwrap();
        assert_eq!(g[0], 1);
    }
    let stale: i64 =
        REDLOCK_ABANDON.key(&r.lock).arg("o1").arg("a1").arg(&r.channel).invoke_async(&mut c).await.unwrap();
    assert_eq!(stale, 0, "a stale undo must not free a later attempt's grant");
    let undone: i64 =
        REDLOCK_ABANDON.key(&r.lock).arg("o1").arg("a2").arg(&r.channel).invoke_async(&mut c).await.unwrap();
    assert_eq!(undone, 1);

    // Set-if-greater: only the attempt that stored a token counts it as stored; an equal
    // counter from another attempt is a token already taken.
    let big = "9000000000000001";
    let big_n: i64 = big.parse().unwrap();
    let fence = |token: &'static str, attempt: &'static str| {
        let mut c = conn.clone();
        let r = Keys::new("t", &LockName::new("r").unwrap());
        async move {
            let v: Vec<i64> = REDLOCK_FENCE
                .key(&r.fence)
                .key(BOOT)
                .key(&r.fence_by)
                .arg(token)
                .arg(attempt)
                .invoke_async(&mut c)
                .await
                .unwrap();
            v
        }
    };
    assert_eq!(fence(big, "f1").await, vec![1, big_n], "a greater token is stored");
    assert_eq!(fence(big, "f1").await, vec![1, big_n], "a re-delivery of the same attempt still counts");
    assert_eq!(fence(big, "f2").await, vec![0, big_n], "an equal counter stored by another attempt is not ours");
    assert_eq!(fence("5", "f3").await, vec![0, big_n], "a lower token never overwrites");
    let g: Vec<i64> = REDLOCK_ACQUIRE
        .key(&r.lock)
        .key(&r.fence)
        .key(BOOT)
        .arg("o3")
        .arg(5000)
        .arg("a")
        .arg(0)
        .invoke_async(&mut c)
        .await
        .unwrap();
    assert_eq!(g[1].to_string(), big, "the floor is the stored counter when it is ahead of the clock");
}

/// A server that lost its state (no boot marker) refuses every fresh grant, of every kind, for
/// the quiet period, answering the time left; a marker whose quiet time has passed lets grants
/// through; losing the data again (FLUSHALL) starts a new quiet period.
#[tokio::test]
async fn quiet_period_after_lost_state() {
    let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let conn = c.clone();
    let name = LockName::new("q").unwrap();
    let (k, rw, sk) = (Keys::new("q", &name), RwKeys::new("q", &name), SemKeys::new("q", &name));
    // The writer on a name of its own: the reader granted on `q` would refuse it.
    let rw2 = RwKeys::new("q", &LockName::new("qw").unwrap());
    let quiet = 4000;
    let attempts = |owner: &'static str| {
        let mut c = conn.clone();
        let (k, rw, rw2, sk) = (&k, &rw, &rw2, &sk);
        async move {
            let mut replies = Vec::new();
            let r: Vec<i64> = ACQUIRE
                .key(&k.lock)
                .key(&k.fence)
                .key("q:boot")
                .arg(owner)
                .arg(5000)
                .arg(quiet)
                .invoke_async(&mut c)
                .await
                .unwrap();
            replies.push(("exclusive", r));
            fn rw_keys<'a>(s: &'a Script, rw: &'a RwKeys) -> redis::ScriptInvocation<'a> {
                let mut call = s.prepare_invoke();
                call.key(&rw.readers).key(&rw.tokens).key(&rw.writer).key(&rw.waiting).key(&rw.fence).key("q:boot");
                call
            }
            let r: Vec<i64> = rw_keys(&RW_READ, rw).arg(owner).arg(5000).arg(quiet).invoke_async(&mut c).await.unwrap();
            replies.push(("read", r));
            let r: Vec<i64> = rw_keys(&RW_WRITE, rw2)
                .arg(format!("{owner}w"))
                .arg(5000)
                .arg(0)
                .arg(quiet)
                .invoke_async(&mut c)
                .await
                .unwrap();
            replies.push(("write", r));
            let r: Vec<i64> = SEM_ACQUIRE
                .key(&sk.holders)
                .key(&sk.tokens)
                .key(&sk.permits)
                .key(&sk.fence)
                .key("q:boot")
                .arg(owner)
                .arg(5000)
                .arg(2)
                .arg(quiet)
                .invoke_async(&mut c)
                .await
                .unwrap();
            replies.push(("permit", r));
            let r: Vec<i64> = REDLOCK_ACQUIRE
                .key(format!("{}-redlock", k.lock))
                .key(&k.fence)
                .key("q:boot")
                .arg(owner)
                .arg(5000)
                .arg("a")
                .arg(quiet)
                .invoke_async(&mut c)
                .await
                .unwrap();
            replies.push(("redlock", r));
            replies
        }
    };
    for (kind, r) in attempts("o1").await {
        assert_eq!(r[0], 0, "{kind}: no grant right after the state was lost: {r:?}");
        assert!(r[1] > quiet - 1000 && r[1] <= quiet, "{kind}: answers the quiet time left: {r:?}");
    }
    let marker: i64 = redis::cmd("GET").arg("q:boot").query_async(&mut c).await.unwrap();
    assert!(marker > 0, "the first script wrote the quiet-until marker");
    let _: () = redis::cmd("SET").arg("q:boot").arg(marker - quiet).query_async(&mut c).await.unwrap();
    for (kind, r) in attempts("o2").await {
        assert_eq!(r[0], 1, "{kind}: granted once the quiet period is over: {r:?}");
    }
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    for (kind, r) in attempts("o3").await {
        assert_eq!(r[0], 0, "{kind}: losing the data again starts a new quiet period: {r:?}");
    }
}
