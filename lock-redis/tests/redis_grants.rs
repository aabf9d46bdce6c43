//! The single instance's hand-off: a grant message is a hint, never a grant, and a
//! grant its waiter does not take up lapses within the claim window.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lock_conformance::proxy::FaultProxy;
use lock_conformance::ClientLink;
use lock_core::{AcquireOptions, DistributedLock, Lease, LockError, LockName};

use crate::common::RedisFixture;

/// Every lease of these cases: long, so that a lease nobody takes up shows as a lock held for it.
const TTL: Duration = Duration::from_secs(10);

fn opts(wait: Duration) -> AcquireOptions {
    AcquireOptions::new(TTL).wait(wait).request_timeout(Duration::from_secs(1))
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// The first entry of the name's waiter queue (`queue`: its `waiters` key), `(owner, grant
/// terms, wake channel)`, once there is one (waits up to 5 s).
async fn queued_head(c: &mut redis::aio::MultiplexedConnection, queue: &str) -> (String, String, String) {
    let until = Instant::now() + Duration::from_secs(5);
    let entries = format!("{}waiter-entries", queue.strip_suffix("waiters").expect("a waiters key"));
    loop {
        let head: Vec<String> = redis::cmd("ZRANGE").arg(queue).arg(0).arg(0).query_async(c).await.unwrap();
        let entry: Option<String> = match head.first() {
            Some(owner) => redis::cmd("HGET").arg(&entries).arg(owner).query_async(c).await.unwrap(),
            None => None,
        };
        if let Some(entry) = entry.as_deref() {
            let (head, wake) = entry.split_once('~').expect("an entry with a wake channel");
            let (owner, terms) = head.split_once(':').unwrap_or((head, ""));
            return (owner.to_owned(), terms.to_owned(), wake.to_owned());
        }
        assert!(Instant::now() < until, "no waiter queued on {queue}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the cases with a client behind a fault proxy share: the fixture, the proxy, a raw
/// connection to the server, two clients straight to it, the first holding the name, and the
/// client behind the proxy queued for it.
struct Proxied {
    fx: RedisFixture,
    proxy: Arc<FaultProxy>,
    raw: redis::aio::MultiplexedConnection,
    direct: (lock_redis::RedisLock, lock_redis::RedisLock),
    name: LockName,
    /// The name's `waiters` key.
    queue: String,
    /// The first direct client's lease.
    held: Lease,
    /// The wait of the client behind the proxy, queued: the queue's head.
    behind: tokio::task::JoinHandle<Result<Lease, LockError>>,
    /// Its owner id.
    behind_owner: String,
}

/// The set-up of `case` on the lock `name`, the waiter behind the proxy with blocking delivery
/// or not (then armed before this returns): `None`, said as not applicable, when the server has
/// no address to proxy.
async fn proxied(case: &str, name: &str, blocking: bool) -> Option<Proxied> {
    let mut fx = RedisFixture::start().await.unwrap();
    fx.options.blocking_handoff = blocking;
    let Some(addr) = fx.server.addr() else {
        eprintln!("NOT APPLICABLE {case}: no address to proxy");
        return None;
    };
    let proxy = FaultProxy::start(addr).await.unwrap();
    let behind = lock_redis::connect(&format!("redis://{}", proxy.local_addr()), fx.options.clone()).await.unwrap();
    let direct = (fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap());
    let mut raw = raw(fx.server.url()).await;
    let name = LockName::new(name).unwrap();
    let queue = fx.key(&name.escaped(), "waiters");
    let held = direct.0.acquire(&name, &opts(Duration::from_secs(5))).await.unwrap();
    let behind = wait_in_task(behind, &name);
    let (behind_owner, _, _) = queued_head(&mut raw, &queue).await;
    if blocking {
        armed(&mut raw, &fx.key(&name.escaped(), "armed"), &behind_owner).await;
    }
    Some(Proxied { fx, proxy, raw, direct, name, queue, held, behind, behind_owner })
}

/// Waits until `owner` is armed for blocking delivery (its mark in `armed`), up to 5 s.
async fn armed(c: &mut redis::aio::MultiplexedConnection, armed: &str, owner: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let mark: Option<String> = redis::cmd("HGET").arg(armed).arg(owner).query_async(c).await.unwrap();
        if mark.is_some() {
            return;
        }
        assert!(Instant::now() < until, "{owner} never armed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `lock` waits up to 30 s for `name`, in a task of its own.
fn wait_in_task(lock: impl DistributedLock, name: &LockName) -> tokio::task::JoinHandle<Result<Lease, LockError>> {
    let name = name.clone();
    tokio::spawn(async move { lock.acquire(&name, &opts(Duration::from_secs(30))).await })
}

/// How long after `since` `lock` first takes `name` (and releases it at once); fails with
/// `stuck` when it is still taken 5 s after `since`.
async fn free_after(lock: &impl DistributedLock, name: &LockName, since: Instant, stuck: &str) -> Duration {
    loop {
        if let Some(l) = lock.try_acquire(name, &opts(Duration::ZERO)).await.unwrap() {
            l.release().await.unwrap();
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(5), "{stuck}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Releases `held`; the waiter `w` then gets the lock with a token above `held`'s, the one the
/// server holds (read through `lock`). Returns the waiter's lease.
async fn handed_on(
    held: Lease,
    w: tokio::task::JoinHandle<Result<Lease, LockError>>,
    lock: &impl DistributedLock,
    name: &LockName,
) -> Lease {
    let before = held.token();
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), w).await.expect("granted after the release").unwrap();
    let got = got.unwrap();
    assert!(got.token() > before, "{} after {before}", got.token());
    assert_eq!(held_token(lock, name).await, Some(got.token().0), "the server's token");
    got
}

/// The token the server holds for `name`, if anyone holds it.
async fn held_token(lock: &impl DistributedLock, name: &LockName) -> Option<u64> {
    lock.inspect(name).await.unwrap().map(|i| i.token.0)
}

/// Asserts that the waiter `w` is still waiting (has returned nothing) while `holder` holds.
async fn still_waiting(
    w: &mut tokio::task::JoinHandle<Result<Lease, LockError>>,
    holder: &Lease,
    lock: &impl DistributedLock,
    what: &str,
) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    if w.is_finished() {
        let got = w.await.unwrap();
        let token = got.as_ref().map(|l| l.token().0);
        panic!("{what}: the waiter returned {token:?} while another client holds the lock (token {})", holder.token());
    }
    assert_eq!(held_token(lock, holder.name()).await, Some(holder.token().0), "{what}: the holder still holds");
}

/// A Redis user that may read every key and publish, but write nothing, reads the waiter's queue
/// entry and publishes a forged grant `!<owner>:<i64::MAX>:<n>` on its wake channel for every
/// attempt number it can guess: the waiter keeps waiting while the holder holds, and then returns
/// the server's token, not the forged one.
#[tokio::test]
async fn a_forged_grant_from_a_read_only_user_grants_nothing() {
    let fx = RedisFixture::start().await.unwrap();
    let Some(addr) = fx.server.addr() else {
        eprintln!("NOT APPLICABLE a_forged_grant_from_a_read_only_user_grants_nothing: no address to log in at");
        return;
    };
    let (holder, waiter) = (fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap());
    let name = LockName::new("forged").unwrap();
    let mut admin = raw(fx.server.url()).await;
    let user = format!("dlock-forger-{:08x}", rand::random::<u32>());
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", &user, "on", ">forger-pw", "~*", "&*", "-@all", "+@read", "+publish"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut forger = raw(&format!("redis://{user}:forger-pw@{addr}")).await;
    let write: redis::RedisResult<()> =
        redis::cmd("SET").arg(format!("{}:x", fx.options.key_prefix)).arg(1).query_async(&mut forger).await;
    assert!(write.is_err(), "the forger may not write");

    let held = holder.acquire(&name, &opts(Duration::from_secs(5))).await.unwrap();
    let mut w = wait_in_task(waiter, &name);
    let queue = fx.key(&name.escaped(), "waiters");
    queued_head(&mut forger, &queue).await;
    // Let the wait settle (its attempt after subscribing rewrites the entry).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (owner, terms, wake) = queued_head(&mut forger, &queue).await;
    // The attempt number the entry names, if any, first; then every small one.
    let mut guesses: Vec<u64> = terms.split(':').skip(1).filter_map(|n| n.parse().ok()).collect();
    guesses.extend(1..=5);
    for n in guesses {
        let forged = format!("!{owner}:{}:{n}", i64::MAX);
        let heard: i64 = redis::cmd("PUBLISH").arg(&wake).arg(&forged).query_async(&mut forger).await.unwrap();
        assert_eq!(heard, 1, "the waiter's client listens on {wake}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    still_waiting(&mut w, &held, &holder, "forged grants").await;

    let got = handed_on(held, w, &holder, &name).await;
    assert!(got.token().0 < (i64::MAX / 2) as u64, "the forged token: {}", got.token());
    got.release().await.unwrap();
    let _: i64 = redis::cmd("ACL").arg("DELUSER").arg(&user).query_async(&mut admin).await.unwrap();
}

/// A genuine grant delivered late — held back on the waiter's link while the lease it granted was
/// force-released and another client took the lock — and then replayed, makes the waiter hold
/// nothing while that client holds.
#[tokio::test]
async fn a_late_and_replayed_genuine_grant_grants_nothing() {
    let Some(Proxied { fx, proxy, raw: mut c, direct: (a, b), name, queue, held: held_a, behind: mut w, .. }) =
        proxied("a_late_and_replayed_genuine_grant_grants_nothing", "late", false).await
    else {
        return;
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (owner, _, wake) = queued_head(&mut c, &queue).await;
    let mut spy = redis::Client::open(fx.server.url()).unwrap().get_async_pubsub().await.unwrap();
    spy.subscribe(&wake).await.unwrap();
    let mut spy = spy.into_on_message();

    proxy.set_partitioned(true).await;
    held_a.release().await.unwrap();
    let grant = tokio::time::timeout(Duration::from_secs(2), spy.next()).await.expect("the release's message").unwrap();
    let grant = String::from_utf8(grant.get_payload_bytes().to_vec()).unwrap();
    assert!(grant[1..].starts_with(&owner), "a message to the waiter: {grant}");
    // The lease that message granted ends (an operator's release) and `b` takes the lock.
    a.force_release(&name).await.unwrap();
    let held_b = b.try_acquire(&name, &opts(Duration::ZERO)).await.unwrap().expect("free after the force-release");
    proxy.set_partitioned(false).await;
    still_waiting(&mut w, &held_b, &b, "the late grant").await;
    for _ in 0..3 {
        let _: i64 = redis::cmd("PUBLISH").arg(&wake).arg(&grant).query_async(&mut c).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    still_waiting(&mut w, &held_b, &b, "the replayed grant").await;

    handed_on(held_b, w, &b, &name).await.release().await.unwrap();
}

/// A grant pushed to an armed waiter (blocking delivery) whose delivery is held back on the
/// waiter's link until the grant's claim window has passed and another client took the lock:
/// the late token is a hint, and the waiter keeps waiting while that client holds (taken, it
/// would be a second holder, with a token below the holder's).
#[tokio::test]
async fn a_late_push_grants_nothing() {
    let Some(Proxied { fx: _server, proxy, direct: (a, b), name, held: held_a, behind: mut w, .. }) =
        proxied("a_late_push_grants_nothing", "late-push", true).await
    else {
        return;
    };
    proxy.set_partitioned(true).await;
    held_a.release().await.unwrap();
    // The push is on the waiter's held-back link; the grant lapses after the claim window.
    let held_b = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(l) = b.try_acquire(&name, &opts(Duration::ZERO)).await.unwrap() {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the unclaimed grant lapsed");
    proxy.set_partitioned(false).await;
    still_waiting(&mut w, &held_b, &b, "the late push").await;
    handed_on(held_b, w, &a, &name).await.release().await.unwrap();
}

/// A head granted in the release whose client is gone (cut off, its wait dropped, so nothing
/// reaches the server any more) holds the lock for the claim window only: the waiter behind it
/// gets the lock well within the ttl.
#[tokio::test]
async fn a_grant_to_a_vanished_head_lapses_within_the_claim_window() {
    let Some(Proxied { fx, proxy, raw: mut c, direct: (_a, next), name, queue, held, behind: head, behind_owner }) =
        proxied("a_grant_to_a_vanished_head_lapses_within_the_claim_window", "ghost", true).await
    else {
        return;
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let w = tokio::spawn({
        let name = name.clone();
        async move { next.acquire(&name, &opts(Duration::from_secs(30))).await.map(|l| (Instant::now(), l)) }
    });
    // Both queued, the ghost first.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let n: usize = redis::cmd("ZCARD").arg(&queue).query_async(&mut c).await.unwrap();
        if n == 2 {
            break;
        }
        assert!(Instant::now() < until, "the second waiter never queued: {n} waiting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set_partitioned(true).await;
    head.abort();
    let released = Instant::now();
    held.release().await.unwrap();
    let granted: Option<String> =
        redis::cmd("HGET").arg(fx.key(&name.escaped(), "lock")).arg("o").query_async(&mut c).await.unwrap();
    assert_eq!(granted.as_deref(), Some(behind_owner.as_str()), "the release granted the vanished head");
    let (at, lease) =
        tokio::time::timeout(Duration::from_secs(25), w).await.expect("the next waiter").unwrap().unwrap();
    let delay = at - released;
    eprintln!("the next waiter got the lock {delay:?} after the release to a vanished head");
    assert!(delay < Duration::from_secs(5), "{delay:?} behind a vanished head granted for a ttl of {TTL:?}");
    lease.release().await.unwrap();
    proxy.set_partitioned(false).await;
}

/// A wait that ends — its future dropped, or its deadline passed — at the instant a release grants
/// it leaves the lock free for another client at once, whatever the timing of the race.
#[tokio::test]
async fn a_wait_that_ends_as_it_is_granted_leaves_the_lock_free() {
    let fx = RedisFixture::start().await.unwrap();
    let (a, waiter, other) = (
        fx.redis_client().await.unwrap(),
        Arc::new(fx.redis_client().await.unwrap()),
        fx.redis_client().await.unwrap(),
    );
    let mut c = raw(fx.server.url()).await;
    for round in 0..12u64 {
        let name = LockName::new(format!("left-{round}")).unwrap();
        let queue = fx.key(&name.escaped(), "waiters");
        let held = a.acquire(&name, &opts(Duration::from_secs(5))).await.unwrap();
        // Even rounds drop the future; odd ones let the wait's deadline pass.
        let by_deadline = round % 2 == 1;
        let wait = if by_deadline { Duration::from_millis(600) } else { Duration::from_secs(30) };
        let begun = Instant::now();
        let w = tokio::spawn({
            let (name, waiter) = (name.clone(), Arc::clone(&waiter));
            async move { (waiter.acquire(&name, &opts(wait)).await, Instant::now()) }
        });
        queued_head(&mut c, &queue).await;
        // Release around the moment the wait ends.
        let end = begun + Duration::from_millis(600);
        // Round r releases r − 6 ms from the wait's end, 6 ms before it to 5 ms after.
        let at = end - Duration::from_millis(6) + Duration::from_millis(round);
        tokio::time::sleep_until(at.into()).await;
        let release = tokio::spawn(async move { held.release().await });
        let mut left = None;
        if !by_deadline {
            tokio::time::sleep_until(end.into()).await;
            w.abort();
            left = Some(Instant::now());
        }
        release.await.unwrap().unwrap();
        let (outcome, left) = match w.await {
            // Granted before it ended: the lease is released like any other.
            Ok((Ok(lease), _)) => {
                lease.release().await.unwrap();
                ("granted before it ended", Instant::now())
            }
            Ok((Err(e), at)) => {
                assert!(matches!(e, LockError::Timeout { .. }), "{e}");
                ("deadline", at)
            }
            Err(e) => {
                assert!(e.is_cancelled(), "{e}");
                ("dropped", left.unwrap())
            }
        };
        let took = free_after(&other, &name, left, &format!("round {round}: the lock stayed taken")).await;
        eprintln!("round {round} ({outcome}): free {took:?} after the wait ended");
        // The contract's 100 ms, with a margin for a loaded machine; below the claim window
        // (1 s), which is how long a grant the wait left behind would hold.
        assert!(
            took < Duration::from_millis(700),
            "round {round} ({outcome}): free only {took:?} after the wait ended"
        );
    }
}

/// Many waits cancelled at every point of their wait (before, during and after their first
/// attempt, their subscription and their queued attempt) leave no entry behind that keeps a
/// free lock from a fresh `try_acquire`.
#[tokio::test]
async fn cancelled_waiters_leave_a_free_lock_free() {
    let fx = RedisFixture::start().await.unwrap();
    let (a, fresh) = (fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap());
    let waiters = Arc::new(fx.redis_client().await.unwrap());
    let name = LockName::new("cancelled").unwrap();
    let held = a.acquire(&name, &opts(Duration::from_secs(5))).await.unwrap();
    let mut waits = Vec::new();
    for i in 0..40u64 {
        let (name, waiters) = (name.clone(), Arc::clone(&waiters));
        let w = tokio::spawn(async move { waiters.acquire(&name, &opts(Duration::from_secs(30))).await });
        // 0 to 9 ms into the wait: its first attempt, subscription and queued attempt.
        tokio::time::sleep(Duration::from_micros(i % 10 * 1000 + i * 37)).await;
        w.abort();
        waits.push(w);
    }
    for w in waits {
        assert!(w.await.unwrap_err().is_cancelled(), "no wait may get the lock while it is held");
    }
    held.release().await.unwrap();
    let released = Instant::now();
    let took = free_after(&fresh, &name, released, "the free lock stayed unavailable").await;
    eprintln!("free for a fresh try {took:?} after the release");
    assert!(took < Duration::from_millis(700), "free for a fresh try only {took:?} after the release");
}

/// Blocking delivery (the crate's `blocking.rs`): a waiter armed on its own connection is handed
/// the lock by the release's push, with no hint published on its wake channel, holds it with the
/// grant's token, and its claim extends the lease to a whole ttl. With `blocking_handoff` off,
/// the same hand-off goes by the hint.
#[tokio::test]
async fn a_release_pushes_the_grant_to_an_armed_waiter() {
    for blocking in [true, false] {
        let mut fx = RedisFixture::start().await.unwrap();
        fx.options.blocking_handoff = blocking;
        let (a, waiter) = (fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap());
        let mut c = raw(fx.server.url()).await;
        let name = LockName::new("pushed").unwrap();
        let (queue, armed) = (fx.key(&name.escaped(), "waiters"), fx.key(&name.escaped(), "armed"));
        let held = a.acquire(&name, &opts(Duration::from_secs(5))).await.unwrap();
        let w = wait_in_task(waiter, &name);
        let (owner, _, wake) = queued_head(&mut c, &queue).await;
        let mut hints = redis::Client::open(fx.server.url()).unwrap().get_async_pubsub().await.unwrap();
        hints.subscribe(&wake).await.unwrap();
        if blocking {
            self::armed(&mut c, &armed, &owner).await;
        }
        held.release().await.unwrap();
        let lease = tokio::time::timeout(Duration::from_secs(5), w).await.expect("handed over").unwrap().unwrap();
        let fence: u64 =
            redis::cmd("HGET").arg(fx.key(&name.escaped(), "lock")).arg("f").query_async(&mut c).await.unwrap();
        assert_eq!(lease.token().0, fence, "the server's token");
        let mut messages = hints.on_message();
        let heard = tokio::time::timeout(Duration::from_millis(300), messages.next()).await;
        let hint = heard.ok().flatten().map(|m| m.get_payload::<String>().unwrap());
        if blocking {
            assert_eq!(hint, None, "pushed, not hinted");
        } else {
            assert_eq!(hint, Some(format!("@{owner}")), "hinted");
        }
        let claimed = Instant::now() + Duration::from_secs(2);
        while lease.valid_until() < tokio::time::Instant::now() + TTL / 2 {
            assert!(Instant::now() < claimed, "the lease was never claimed for its ttl");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        lease.release().await.unwrap();
    }
}

/// A pushed grant's claim is deferred a third into its window (`PushedGrant::claim_deferred`):
/// right after the hand-off the server holds the lock for the claim window only, a short hold
/// released then leaves it free with no claim, and a longer one is claimed for the ttl.
#[tokio::test]
async fn a_pushed_grant_is_claimed_a_third_into_its_window_not_at_once() {
    let fx = RedisFixture::start().await.unwrap();
    let (a, waiter, other) =
        (fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap());
    let mut c = raw(fx.server.url()).await;
    let name = LockName::new("claimed-later").unwrap();
    let (queue, armed) = (fx.key(&name.escaped(), "waiters"), fx.key(&name.escaped(), "armed"));
    for hold in [Duration::from_millis(50), Duration::from_millis(800)] {
        let held = a.acquire(&name, &opts(Duration::from_secs(5))).await.unwrap();
        let w = wait_in_task(waiter.clone(), &name);
        let (owner, _, _) = queued_head(&mut c, &queue).await;
        self::armed(&mut c, &armed, &owner).await;
        held.release().await.unwrap();
        let lease = tokio::time::timeout(Duration::from_secs(5), w).await.expect("handed over").unwrap().unwrap();
        let got = Instant::now();
        let remaining = || async { waiter.inspect(&name).await.unwrap().and_then(|h| h.remaining) };
        let first = remaining().await.expect("held");
        assert!(first <= Duration::from_secs(1), "the server holds it for the claim window only: {first:?}");
        tokio::time::sleep(hold.saturating_sub(got.elapsed())).await;
        let later = remaining().await.expect("held");
        if hold < Duration::from_millis(200) {
            assert!(later <= Duration::from_secs(1), "not claimed {hold:?} into the hold: {later:?}");
            lease.release().await.unwrap();
            let taken = other.try_acquire(&name, &opts(Duration::ZERO)).await.unwrap();
            assert!(taken.is_some(), "a short hold released unclaimed leaves the lock free");
            taken.unwrap().release().await.unwrap();
        } else {
            assert!(later > TTL / 2, "claimed for the ttl {hold:?} into the hold: {later:?}");
            assert!(lease.is_valid() && lease.valid_until() > tokio::time::Instant::now() + TTL / 2);
            lease.release().await.unwrap();
        }
    }
}

/// Blocking delivery takes a connection per waiting `acquire`, at most 64 per client at once
/// (`MAX_BLOCKED` in the crate's `blocking.rs`): the waits beyond are woken by hints, so that
/// 100 waiters open about 64 connections, not 100, and every one of them is still handed its lock.
#[tokio::test]
async fn blocking_delivery_caps_the_connections_of_one_client() {
    const WAITERS: usize = 100;
    let fx = RedisFixture::start().await.unwrap();
    let (holder, waiter) = (fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap());
    let mut c = raw(fx.server.url()).await;
    let names: Vec<LockName> = (0..WAITERS).map(|i| LockName::new(format!("cap-{i}")).unwrap()).collect();
    let mut held = Vec::new();
    for name in &names {
        held.push(holder.acquire(name, &opts(Duration::from_secs(5))).await.unwrap());
    }
    let clients = |c: &mut redis::aio::MultiplexedConnection| {
        let mut c = c.clone();
        async move {
            let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut c).await.unwrap();
            list.lines().count()
        }
    };
    let before = clients(&mut c).await;
    let waits: Vec<_> = names.iter().map(|n| wait_in_task(waiter.clone(), n)).collect();
    let armed = fx.key("*", "armed");
    let until = Instant::now() + Duration::from_secs(10);
    let mut marks;
    loop {
        let keys: Vec<String> = redis::cmd("KEYS").arg(&armed).query_async(&mut c).await.unwrap();
        marks = keys.len();
        if marks >= 64 || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let opened = clients(&mut c).await - before;
    eprintln!("{marks} names with an armed waiter, {opened} connections opened for {WAITERS} waits");
    assert_eq!(marks, 64, "64 waits armed, the others wait for hints");
    assert!(opened <= 64 + 2, "{opened} connections for {WAITERS} waits: at most 64 blocking ones and the pub/sub one");
    for lease in held {
        lease.release().await.unwrap();
    }
    for w in waits {
        let lease = tokio::time::timeout(Duration::from_secs(10), w).await.expect("handed over").unwrap().unwrap();
        lease.release().await.unwrap();
    }
}

/// A waiter's blocking connection breaks while its mark is live (a server killing clients, as
/// Sentinel does around a promotion): a release then would push to a list nobody pops, with no
/// hint. The waiter arms again on a new connection, so the release's push reaches it at once,
/// not at its next timed re-try.
#[tokio::test]
async fn a_broken_blocking_connection_arms_again() {
    let fx = RedisFixture::start().await.unwrap();
    let (holder, waiter) = (fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap());
    let mut c = raw(fx.server.url()).await;
    let name = LockName::new("rearm").unwrap();
    let held = holder.acquire(&name, &opts(Duration::from_secs(5))).await.unwrap();
    let w = wait_in_task(waiter, &name);
    let (owner, _, _) = queued_head(&mut c, &fx.key(&name.escaped(), "waiters")).await;
    armed(&mut c, &fx.key(&name.escaped(), "armed"), &owner).await;
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut c).await.unwrap();
    let blocked: Vec<&str> = list
        .lines()
        .filter(|l| l.contains("cmd=blpop"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .collect();
    assert_eq!(blocked.len(), 1, "one waiter blocks: {list}");
    let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(blocked[0]).query_async(&mut c).await.unwrap();
    // Within the killed connection's mark (2 s), after the waiter armed again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(5), w).await.expect("handed over").unwrap().unwrap();
    let took = released.elapsed();
    assert!(
        took < Duration::from_millis(250),
        "the waiter got the lock {took:?} after the release: it did not arm again"
    );
    lease.release().await.unwrap();
}
