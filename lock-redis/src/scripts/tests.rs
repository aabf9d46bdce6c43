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

/// Runs `script` with `keys`, then `args` as the strings the server sees anyway.
async fn run<T: redis::FromRedisValue>(
    c: &mut redis::aio::MultiplexedConnection,
    script: &Script,
    keys: &[&str],
    args: &[&dyn std::fmt::Display],
) -> T {
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(*key);
    }
    for arg in args {
        call.arg(arg.to_string());
    }
    call.invoke_async(c).await.unwrap()
}

/// A fresh local server (kept alive by the first half) and a connection to it.
async fn fresh_server() -> (dlock_testkit::servers::redis::RedisServer, redis::aio::MultiplexedConnection) {
    let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let c = client.get_multiplexed_async_connection().await.unwrap();
    (server, c)
}

/// The keys a read-write grant takes, in the scripts' order.
fn rw_keys<'a>(k: &'a RwKeys, boot: &'a str) -> [&'a str; 6] {
    [&k.readers, &k.tokens, &k.writer, &k.queue, &k.fence, boot]
}

/// The keys a semaphore grant takes, in the script's order.
fn sem_keys<'a>(k: &'a SemKeys, boot: &'a str) -> [&'a str; 6] {
    [&k.holders, &k.tokens, &k.permits, &k.queue, &k.fence, boot]
}

/// The scripts themselves, against a fresh local server.
#[tokio::test]
async fn scripts_against_a_server() {
    let (_server, mut c) = fresh_server().await;
    let k = Keys::new("t", &LockName::new("s").unwrap());
    let lock_keys = [k.lock.as_str(), &k.fence, BOOT];

    // Single instance: same owner re-attempt returns the stored token; others see the PTTL.
    let first: Vec<i64> = run(&mut c, &ACQUIRE, &lock_keys, &[&"o1", &5000, &0]).await;
    let again: Vec<i64> = run(&mut c, &ACQUIRE, &lock_keys, &[&"o1", &5000, &0]).await;
    assert_eq!(first[0], 1);
    assert_eq!(first, again, "a re-attempt by the same owner returns the same grant");
    let other: Vec<i64> = run(&mut c, &ACQUIRE, &lock_keys, &[&"o2", &5000, &0]).await;
    assert_eq!(other[0], 0);
    assert!(other[1] > 4000 && other[1] <= 5000, "PTTL {}", other[1]);
    let not_ours: i64 = run(&mut c, &RELEASE, &[&k.lock], &[&"o2", &k.channel]).await;
    assert_eq!(not_ours, 0);
    let renewed: i64 = run(&mut c, &RENEW, &[&k.lock], &[&"o2", &5000]).await;
    assert_eq!(renewed, 0);
    let released: i64 = run(&mut c, &RELEASE, &[&k.lock], &[&"o1", &k.channel]).await;
    assert_eq!(released, 1);
    let next: Vec<i64> = run(&mut c, &ACQUIRE, &lock_keys, &[&"o2", &5000, &0]).await;
    assert!(next[1] > first[1]);

    // Read-write lock: a reader's re-attempt returns its token; a refused waiting writer's
    // place in the queue holds new readers back (not the readers already in); the writer's
    // token is above the readers'; a single try (registration 0) takes no place.
    let rw = RwKeys::new("t", &LockName::new("s").unwrap());
    let conn = c.clone();
    let read = |owner: &'static str| {
        let mut c = conn.clone();
        let rw = &rw;
        async move {
            let args: [&dyn std::fmt::Display; 7] = [&owner, &5000, &0, &0, &150, &rw.to_readers, &rw.to_writers];
            run::<Vec<i64>>(&mut c, &RW_READ, &rw_keys(rw, BOOT), &args).await
        }
    };
    let write = |owner: &'static str, reg: u64| {
        let mut c = conn.clone();
        let rw = &rw;
        async move {
            let args: [&dyn std::fmt::Display; 7] = [&owner, &5000, &reg, &0, &150, &rw.to_readers, &rw.to_writers];
            run::<Vec<i64>>(&mut c, &RW_WRITE, &rw_keys(rw, BOOT), &args).await
        }
    };
    let r1 = read("r1").await;
    assert_eq!(r1[0], 1);
    assert_eq!(read("r1").await, r1, "a reader's re-attempt returns the same grant");
    assert_eq!(write("w1", 0).await[0], 0);
    assert_eq!(read("r2").await[0], 1, "a single try takes no place");
    let refused = write("w1", 3000).await;
    assert_eq!(refused[0], 0);
    assert!(refused[1] > 4000 && refused[1] <= 5000, "the readers' remaining lease: {}", refused[1]);
    assert_eq!(read("r3").await[0], 0, "a queued writer holds new readers back");
    assert_eq!(read("r1").await, r1, "a reader already in keeps its grant");
    for owner in ["r1", "r2"] {
        let args: [&dyn std::fmt::Display; 4] = [&owner, &150, &rw.to_readers, &rw.to_writers];
        let keys = [rw.readers.as_str(), &rw.tokens, &rw.writer, &rw.queue];
        let done: i64 = run(&mut c, &RW_READ_RELEASE, &keys, &args).await;
        assert_eq!(done, 1);
    }
    let w = write("w1", 3000).await;
    assert_eq!(w[0], 1);
    assert!(w[1] > r1[1]);
    assert_eq!(write("w1", 3000).await, w, "a writer's re-attempt returns the same grant");
    let queued: i64 = redis::cmd("EXISTS").arg(&rw.queue).query_async(&mut c).await.unwrap();
    assert_eq!(queued, 0, "the granted writer left the queue, and an empty queue leaves no key");
    let release_args: [&dyn std::fmt::Display; 4] = [&"w2", &150, &rw.to_readers, &rw.to_writers];
    let keys = [rw.writer.as_str(), &rw.queue, &rw.readers, &rw.tokens];
    let not_ours: i64 = run(&mut c, &RW_WRITE_RELEASE, &keys, &release_args).await;
    assert_eq!(not_ours, 0);

    // Semaphore: permits must agree while held; an empty semaphore starts afresh.
    let sk = SemKeys::new("t", &LockName::new("s").unwrap());
    let permit = |owner: &'static str, n: u32| {
        let mut c = conn.clone();
        let sk = &sk;
        async move {
            let args: [&dyn std::fmt::Display; 7] = [&owner, &5000, &n, &0, &0, &150, &sk.channel];
            run::<Vec<i64>>(&mut c, &SEM_ACQUIRE, &sem_keys(sk, BOOT), &args).await
        }
    };
    let p1 = permit("p1", 1).await;
    assert_eq!(p1[0], 1);
    assert_eq!(permit("p1", 1).await, p1, "a re-attempt returns the same grant");
    assert_eq!(permit("p2", 1).await[0], 0);
    assert_eq!(permit("p2", 2).await, vec![-1, 1], "in use with 1 permit");
    let sem_release = [sk.holders.as_str(), &sk.tokens, &sk.permits, &sk.queue];
    let done: i64 = run(&mut c, &SEM_RELEASE, &sem_release, &[&"p1", &150, &sk.channel]).await;
    assert_eq!(done, 1);
    let p2 = permit("p2", 2).await;
    assert_eq!(p2[0], 1, "an empty semaphore takes a new number of permits");
    assert!(p2[1] > p1[1]);

    // Redlock: an undo of an earlier attempt leaves a later attempt's grant alone.
    let r = Keys::new("t", &LockName::new("r").unwrap());
    let redlock_keys = [r.lock.as_str(), &r.fence, BOOT];
    for attempt in ["a1", "a2"] {
        let g: Vec<i64> = run(&mut c, &REDLOCK_ACQUIRE, &redlock_keys, &[&"o1", &5000, &attempt, &0]).await;
        assert_eq!(g[0], 1);
    }
    let stale: i64 = run(&mut c, &REDLOCK_ABANDON, &[&r.lock], &[&"o1", &"a1", &r.channel]).await;
    assert_eq!(stale, 0, "a stale undo must not free a later attempt's grant");
    let undone: i64 = run(&mut c, &REDLOCK_ABANDON, &[&r.lock], &[&"o1", &"a2", &r.channel]).await;
    assert_eq!(undone, 1);

    // Set-if-greater: only the attempt that stored a token counts it as stored; an equal
    // counter from another attempt is a token already taken.
    let big = "9000000000000001";
    let big_n: i64 = big.parse().unwrap();
    let fence = |token: &'static str, attempt: &'static str| {
        let mut c = conn.clone();
        let r = &r;
        async move { run::<Vec<i64>>(&mut c, &REDLOCK_FENCE, &[&r.fence, BOOT, &r.fence_by], &[&token, &attempt]).await }
    };
    assert_eq!(fence(big, "f1").await, vec![1, big_n], "a greater token is stored");
    assert_eq!(fence(big, "f1").await, vec![1, big_n], "a re-delivery of the same attempt still counts");
    assert_eq!(fence(big, "f2").await, vec![0, big_n], "an equal counter stored by another attempt is not ours");
    assert_eq!(fence("5", "f3").await, vec![0, big_n], "a lower token never overwrites");
    let g: Vec<i64> = run(&mut c, &REDLOCK_ACQUIRE, &redlock_keys, &[&"o3", &5000, &"a", &0]).await;
    assert_eq!(g[1].to_string(), big, "the floor is the stored counter when it is ahead of the clock");
}

/// A server that lost its state (no boot marker) refuses every fresh grant, of every kind, for
/// the quiet period, answering the time left; a marker whose quiet time has passed lets grants
/// through; losing the data again (FLUSHALL) starts a new quiet period.
#[tokio::test]
async fn quiet_period_after_lost_state() {
    let (_server, mut c) = fresh_server().await;
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
            let r: Vec<i64> = run(&mut c, &ACQUIRE, &[&k.lock, &k.fence, "q:boot"], &[&owner, &5000, &quiet]).await;
            replies.push(("exclusive", r));
            let chans: [&dyn std::fmt::Display; 3] = [&150, &rw.to_readers, &rw.to_writers];
            let args: Vec<&dyn std::fmt::Display> =
                [&owner as &dyn std::fmt::Display, &5000, &0, &quiet].into_iter().chain(chans).collect();
            let r: Vec<i64> = run(&mut c, &RW_READ, &rw_keys(rw, "q:boot"), &args).await;
            replies.push(("read", r));
            let writer = format!("{owner}w");
            let args: Vec<&dyn std::fmt::Display> =
                [&writer as &dyn std::fmt::Display, &5000, &0, &quiet].into_iter().chain(chans).collect();
            let r: Vec<i64> = run(&mut c, &RW_WRITE, &rw_keys(rw2, "q:boot"), &args).await;
            replies.push(("write", r));
            let args: [&dyn std::fmt::Display; 7] = [&owner, &5000, &2, &0, &quiet, &150, &sk.channel];
            let r: Vec<i64> = run(&mut c, &SEM_ACQUIRE, &sem_keys(sk, "q:boot"), &args).await;
            replies.push(("permit", r));
            let redlock = format!("{}-redlock", k.lock);
            let r: Vec<i64> =
                run(&mut c, &REDLOCK_ACQUIRE, &[&redlock, &k.fence, "q:boot"], &[&owner, &5000, &"a", &quiet]).await;
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
