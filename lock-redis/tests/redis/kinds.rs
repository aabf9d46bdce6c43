//! Read-write locks and semaphores on one Redis server: what the shared `rw_lock` and
//! `semaphore` cases do not reach.

use std::time::{Duration, Instant};

use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName, LockService};

use crate::common::RedisFixture;

use crate::redis_extra::{acl_server, acl_user, opts, raw, timed, woken, woken_by, LEAST_EXCLUSIVE, LEAST_KINDS};

/// A fresh fixture, two read-write lock clients of it (two processes) and the lock `name`.
async fn two_rw_clients(name: &str) -> (RedisFixture, lock_redis::RedisRwLock, lock_redis::RedisRwLock, LockName) {
    let fx = RedisFixture::start().await.unwrap();
    let (a, b) = (fx.rw().await.unwrap(), fx.rw().await.unwrap());
    (fx, a, b, LockName::new(name).unwrap())
}

#[tokio::test]
async fn capabilities_and_labels() {
    let fx = RedisFixture::start().await.unwrap();
    let rw = fx.rw().await.unwrap();
    let sem = fx.semaphore().await.unwrap();
    let lock = fx.redis_client().await.unwrap();
    // Every kind has a waiter queue: readers, writers and permits are served in
    // arrival order too.
    for caps in [rw.capabilities(), sem.capabilities(), lock.capabilities()] {
        assert!(caps.rw_lock && caps.semaphore && caps.durable_fencing && caps.fifo, "{caps:?}");
    }
    assert_eq!((rw.backend(), sem.backend()), ("redis", "redis"));
    let name = LockName::new("zero").unwrap();
    assert!(matches!(sem.try_acquire_permit(&name, 0, &opts(1000)).await, Err(LockError::InvalidOptions { .. })));
    assert!(matches!(sem.acquire_permit(&name, 0, &opts(1000)).await, Err(LockError::InvalidOptions { .. })));
    let bad = lock_redis::connect_rw("http://x", crate::common::test_options()).await;
    assert!(matches!(bad, Err(LockError::Config { .. })));
    let port = dlock_testkit::process::free_port().unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let down = lock_redis::connect_semaphore(&url, crate::common::test_options()).await;
    assert!(matches!(down, Err(LockError::Unavailable { .. })));
}

/// A reader that stops renewing (a crashed process) frees its place after its ttl: a
/// waiting writer gets in then, not before, with a higher token.
#[tokio::test]
async fn silent_reader_frees_its_place_after_ttl() {
    let (fx, a, b, name) = two_rw_clients("silent-reader").await;
    let ttl = 800;
    let t0 = Instant::now();
    let reader = a.acquire_read(&name, &opts(ttl).auto_renew(false)).await.unwrap();
    let writer = b.acquire_write(&name, &opts(5000)).await.unwrap();
    let waited = t0.elapsed();
    eprintln!("writer got in {waited:?} after the silent reader took its lease (ttl {ttl} ms)");
    assert!(waited >= Duration::from_millis(ttl - 20), "writer got in after only {waited:?}");
    assert!(waited < Duration::from_millis(ttl + 1500), "writer took {waited:?}");
    assert!(writer.token() > reader.token());
    assert!(matches!(reader.renew().await, Err(LockError::Lost { .. })), "the reader's lease is gone");
    writer.release().await.unwrap();

    // Same for a permit, next to a permit that keeps renewing.
    let sem = LockName::new("silent-permit").unwrap();
    let (s1, s2) = (fx.semaphore().await.unwrap(), fx.semaphore().await.unwrap());
    let keeper = s1.acquire_permit(&sem, 2, &opts(ttl)).await.unwrap();
    let silent = s1.acquire_permit(&sem, 2, &opts(ttl).auto_renew(false)).await.unwrap();
    let t0 = Instant::now();
    let next = s2.acquire_permit(&sem, 2, &opts(5000)).await.unwrap();
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(ttl - 100), "permit freed after only {waited:?}");
    assert!(next.token() > silent.token() && next.token() > keeper.token());
    assert!(keeper.is_valid(), "the renewing permit holder keeps its lease");
    assert!(s2.try_acquire_permit(&sem, 2, &opts(ttl)).await.unwrap().is_none(), "a third permit of two");
    keeper.release().await.unwrap();
    next.release().await.unwrap();
}

/// A Redis without persistence restarts empty: read, write and permit tokens keep rising.
#[tokio::test]
async fn restart_empty_keeps_tokens_monotonic() {
    let Some((fx, server)) = crate::common::owned_server("restart_empty_keeps_tokens_monotonic").await else {
        return;
    };
    let rw = fx.rw().await.unwrap();
    let sem = fx.semaphore().await.unwrap();
    let name = LockName::new("restart").unwrap();
    let mut last = 0;
    for round in 0..4 {
        let r = rw.acquire_read(&name, &opts(1000)).await.unwrap();
        let r2 = rw.acquire_read(&name, &opts(1000)).await.unwrap();
        assert!(r.token().0 > last && r2.token() > r.token());
        r.release().await.unwrap();
        r2.release().await.unwrap();
        let w = rw.acquire_write(&name, &opts(1000)).await.unwrap();
        assert!(w.token() > r2.token());
        last = w.token().0;
        w.release().await.unwrap();
        if round == 1 {
            crate::common::restart(&*server).await;
        }
    }
    let mut last = 0;
    for round in 0..4 {
        let p = sem.acquire_permit(&name, 2, &opts(1000)).await.unwrap();
        let p2 = sem.acquire_permit(&name, 2, &opts(1000)).await.unwrap();
        assert!(p.token().0 > last && p2.token() > p.token(), "{last} then {} / {}", p.token(), p2.token());
        last = p2.token().0;
        p.release().await.unwrap();
        p2.release().await.unwrap();
        if round == 1 {
            crate::common::restart(&*server).await;
        }
    }
}

/// Holders of every kind are told when an empty restart forgets their leases.
#[tokio::test]
async fn restart_fires_lost_signal_for_every_kind() {
    let Some((fx, server)) = crate::common::owned_server("restart_fires_lost_signal_for_every_kind").await else {
        return;
    };
    let (rw, sem) = (fx.rw().await.unwrap(), fx.semaphore().await.unwrap());
    let (a, b) = (LockName::new("lost-r").unwrap(), LockName::new("lost-w").unwrap());
    let reader = rw.acquire_read(&a, &opts(1000)).await.unwrap();
    let writer = rw.acquire_write(&b, &opts(1000)).await.unwrap();
    let permit = sem.acquire_permit(&a, 2, &opts(1000)).await.unwrap();
    crate::common::restart(&*server).await;
    for (what, lease) in [("reader", &reader), ("writer", &writer), ("permit", &permit)] {
        tokio::time::timeout(Duration::from_secs(3), lease.lost().fired())
            .await
            .unwrap_or_else(|_| panic!("the {what}'s lost signal did not fire"));
        assert!(!lease.is_valid());
    }
    // And the names are free again once the quiet period is over, with higher tokens.
    let w = rw.acquire_write(&a, &opts(1000)).await.unwrap();
    assert!(w.token() > reader.token());
    w.release().await.unwrap();
}

/// Hostile names: escaped, one hash tag per key, no collisions, and the three kinds of one
/// name are three different locks.
#[tokio::test]
async fn hostile_names_and_separate_kinds() {
    let fx = RedisFixture::start().await.unwrap();
    let (rw, sem, lock) = (fx.rw().await.unwrap(), fx.semaphore().await.unwrap(), fx.redis_client().await.unwrap());
    let names = [
        "a/b",
        "a%2Fb",
        "../x",
        "{tag}",
        "}{",
        "x}:rw:writer",
        "'; DROP TABLE locks; --",
        "ключ 🔒",
        "*",
        "a:b",
        "rw",
        &"x".repeat(255),
    ];
    let mut leases = Vec::new();
    for n in names {
        let name = LockName::new(n).unwrap();
        let w = rw.try_acquire_write(&name, &opts(5000)).await.unwrap();
        leases.push(w.unwrap_or_else(|| panic!("rw {n:?} collided")));
        let p = sem.try_acquire_permit(&name, 1, &opts(5000)).await.unwrap();
        leases.push(p.unwrap_or_else(|| panic!("semaphore {n:?} collided")));
        let l = lock.try_acquire(&name, &opts(5000)).await.unwrap();
        leases.push(l.unwrap_or_else(|| panic!("lock {n:?} collided with another kind")));
    }
    let mut conn = raw(&fx).await;
    for suffix in ["rw:writer", "sem:holders", "sem:permits", "rw:fence", "sem:fence"] {
        let pattern = format!("{}:*:{suffix}", fx.options.key_prefix);
        let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut conn).await.unwrap();
        assert_eq!(keys.len(), names.len(), "{pattern}: {keys:?}");
        for k in &keys {
            assert_eq!((k.matches('{').count(), k.matches('}').count()), (1, 1), "{k}");
        }
    }
    for l in leases {
        l.release().await.unwrap();
    }
    // Released: no lease keys are left behind (fence counters stay, the exclusive lock's in its
    // hash, which then holds no lease).
    let left: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}:*", fx.options.key_prefix)).query_async(&mut conn).await.unwrap();
    let boot = format!("{}:boot", fx.options.key_prefix);
    assert!(left.iter().all(|k| k.ends_with(":fence") || k.ends_with(":lock") || *k == boot), "{left:?}");
    for k in left.iter().filter(|k| k.ends_with(":lock")) {
        let owner: Option<String> = redis::cmd("HGET").arg(k).arg("o").query_async(&mut conn).await.unwrap();
        assert_eq!(owner, None, "{k} still names an owner");
    }
}

/// The last reader's release wakes a waiting writer through pub/sub: well before its timed
/// re-try (a third of the writer's claim, ≈ 667 ms here), three times in a row.
#[tokio::test]
async fn last_reader_wakes_waiting_writer() {
    let (_fx, a, b, name) = two_rw_clients("wake-writer").await;
    let ttl = 10_000;
    for round in 0..3 {
        let r1 = a.acquire_read(&name, &opts(ttl)).await.unwrap();
        let r2 = a.acquire_read(&name, &opts(ttl)).await.unwrap();
        let waiter = timed({
            let (b, name) = (b.clone(), name.clone());
            async move { b.acquire_write(&name, &opts(ttl).wait(Duration::from_secs(8))).await }
        });
        tokio::time::sleep(Duration::from_millis(400 + 150 * round)).await;
        assert!(a.try_acquire_read(&name, &opts(ttl)).await.unwrap().is_none(), "reader overtook the writer");
        r1.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the writer got in while a reader held");
        let what = format!("round {round}: the writer");
        let lease = woken_by(r2.release(), waiter, Duration::from_millis(200), &what).await;
        assert!(lease.token() > r2.token());
        lease.release().await.unwrap();
    }
}

/// A writer's release wakes every waiting reader of a client at once (not one by one on
/// timers), and a released permit wakes a waiter.
#[tokio::test]
async fn writer_release_wakes_all_readers_and_permits_wake_waiters() {
    let (fx, a, b, name) = two_rw_clients("wake-readers").await;
    let ttl = 10_000;
    let w = a.acquire_write(&name, &opts(ttl)).await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (b, name) = (b.clone(), name.clone());
        readers.push(timed(async move { b.acquire_read(&name, &opts(ttl).wait(Duration::from_secs(8))).await }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    w.release().await.unwrap();
    let mut held = Vec::new();
    for r in readers {
        let lease = woken(r, released, Duration::from_millis(300), "a reader").await;
        assert!(lease.token() > w.token());
        held.push(lease);
    }
    for l in held {
        l.release().await.unwrap();
    }

    let (s1, s2) = (fx.semaphore().await.unwrap(), fx.semaphore().await.unwrap());
    let sem = LockName::new("wake-permit").unwrap();
    let p = s1.acquire_permit(&sem, 1, &opts(ttl)).await.unwrap();
    let waiter = timed({
        let sem = sem.clone();
        async move { s2.acquire_permit(&sem, 1, &opts(ttl).wait(Duration::from_secs(8))).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lease = woken_by(p.release(), waiter, Duration::from_millis(300), "the permit waiter").await;
    lease.release().await.unwrap();
}

/// A refused single try leaves no place in the queue; a write wait that times out or is
/// dropped leaves the queue at once; the place of a writer that vanished (a crashed process)
/// holds readers back only until its registration lapses.
#[tokio::test]
async fn writer_claims_end_with_the_wait() {
    let (fx, a, b, name) = two_rw_clients("claim").await;
    let r = a.acquire_read(&name, &opts(5000)).await.unwrap();
    assert!(b.try_acquire_write(&name, &opts(5000)).await.unwrap().is_none());
    let r2 = a.try_acquire_read(&name, &opts(5000)).await.unwrap();
    assert!(r2.is_some(), "a refused try_acquire_write left a claim behind");

    // A wait that times out.
    let t = b.acquire_write(&name, &opts(5000).wait(Duration::from_millis(300))).await;
    assert!(matches!(t, Err(LockError::Timeout { .. })), "{t:?}");
    let t0 = Instant::now();
    let r3 = a.acquire_read(&name, &opts(5000)).await.unwrap();
    let after_timeout = t0.elapsed();

    // A wait whose future is dropped.
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        b.acquire_write(&name, &opts(5000).wait(Duration::from_secs(5))),
    )
    .await;
    assert!(dropped.is_err(), "the writer should still be waiting");
    let t0 = Instant::now();
    let r4 = a.acquire_read(&name, &opts(5000)).await.unwrap();
    let after_drop = t0.elapsed();
    eprintln!("a reader got in {after_timeout:?} after a timed-out write wait, {after_drop:?} after a dropped one");
    // The claim of a 5 s ttl lasts 2 s: these are withdrawals, not lapses.
    assert!(after_timeout < Duration::from_millis(500), "{after_timeout:?}");
    assert!(after_drop < Duration::from_millis(500), "{after_drop:?}");

    // A vanished writer's place in the queue (written as the scripts do, its registration
    // ending 400 ms from now).
    let mut conn = raw(&fx).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let ends = secs * 1000 + micros / 1000 + 400;
    let key = |suffix: &str| fx.key(&name.escaped(), suffix);
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(key("rw:waiters"))
        .arg(1)
        .arg("w:ghost")
        .cmd("ZADD")
        .arg(key("rw:waiting-writers"))
        .arg(1)
        .arg("w:ghost")
        .cmd("ZADD")
        .arg(key("rw:waiter-ends"))
        .arg(ends)
        .arg("w:ghost")
        .cmd("HSET")
        .arg(key("rw:waiter-entries"))
        .arg("w:ghost")
        .arg("w:ghost")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(a.try_acquire_read(&name, &opts(5000)).await.unwrap().is_none(), "a queued writer holds readers back");
    let t0 = Instant::now();
    let r5 = a.acquire_read(&name, &opts(5000)).await.unwrap();
    let lapsed = t0.elapsed();
    eprintln!("a vanished writer's place held a reader back {lapsed:?}");
    assert!(lapsed >= Duration::from_millis(250) && lapsed < Duration::from_millis(1000), "{lapsed:?}");
    for l in [Some(r), r2, Some(r3), Some(r4), Some(r5)].into_iter().flatten() {
        l.release().await.unwrap();
    }
}

/// The least ACL user the crate docs name for read-write locks and semaphores suffices.
#[tokio::test]
async fn least_acl_user() {
    let Some((fx, addr, mut conn)) = acl_server("least_acl_user").await else { return };
    let least: Vec<&str> = LEAST_EXCLUSIVE.iter().chain(LEAST_KINDS).copied().collect();
    acl_user(&mut conn, &fx.options.key_prefix, "kinds", "pw3", &least).await;
    let url = format!("redis://kinds:pw3@{addr}");
    let rw = lock_redis::connect_rw(&url, fx.options.clone()).await.unwrap();
    let sem = lock_redis::connect_semaphore(&url, fx.options.clone()).await.unwrap();
    let other = fx.rw().await.unwrap();
    let name = LockName::new("acl-kinds").unwrap();
    let r = other.acquire_read(&name, &opts(5000)).await.unwrap();
    let waiter = tokio::spawn({
        let (rw, name) = (rw.clone(), name.clone());
        async move { rw.acquire_write(&name, &opts(5000)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    r.release().await.unwrap();
    let w = waiter.await.unwrap().unwrap();
    w.renew().await.unwrap();
    w.release().await.unwrap();
    let r = rw.acquire_read(&name, &opts(5000)).await.unwrap();
    r.renew().await.unwrap();
    r.release().await.unwrap();
    let p = sem.acquire_permit(&name, 2, &opts(5000)).await.unwrap();
    p.renew().await.unwrap();
    assert!(matches!(sem.try_acquire_permit(&name, 3, &opts(5000)).await, Err(LockError::InvalidOptions { .. })));
    p.release().await.unwrap();
}

/// Every holder's lease is its own: renewing keeps a reader (or a permit) past its ttl,
/// and releasing twice is `NotOwner`-safe (`Lost` never frees someone else).
#[tokio::test]
async fn renew_and_release_are_owner_checked() {
    let fx = RedisFixture::start().await.unwrap();
    let rw = fx.rw().await.unwrap();
    let sem = fx.semaphore().await.unwrap();
    let name = LockName::new("owners").unwrap();
    let r1 = rw.acquire_read(&name, &opts(300)).await.unwrap();
    let r2 = rw.acquire_read(&name, &opts(300).auto_renew(false)).await.unwrap();
    let p1 = sem.acquire_permit(&name, 1, &opts(300)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(r1.is_valid() && p1.is_valid(), "auto-renew keeps the leases");
    assert!(!r2.is_valid(), "the silent reader's lease ended");
    assert!(rw.try_acquire_write(&name, &opts(300)).await.unwrap().is_none(), "r1 still reads");
    assert!(sem.try_acquire_permit(&name, 1, &opts(300)).await.unwrap().is_none(), "p1 still holds");
    assert!(r2.release().await.is_err(), "releasing an ended read lease is Lost");
    assert!(rw.try_acquire_write(&name, &opts(300)).await.unwrap().is_none(), "r2's release freed nothing");
    r1.release().await.unwrap();
    p1.release().await.unwrap();
}
