//! Blocking delivery on Redlock (the crate's `redlock/blocking.rs`) against three fresh
//! masters: a release pushes the grant to a waiter armed on every master, which holds on a
//! majority of pops naming one token, with no hint and no lease step; one master's push, or a
//! forged hint, makes nobody hold.

use std::time::{Duration, Instant};

use futures::StreamExt;
use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_redis::scripts::Keys;

use crate::common::RedlockFixture;

fn opts(wait: Duration) -> AcquireOptions {
    AcquireOptions::new(Duration::from_secs(5)).wait(wait).request_timeout(Duration::from_secs(1))
}

async fn raw(fx: &RedlockFixture, i: usize) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{}", fx.servers[i].addr().unwrap())).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// The waiter armed on master `c` (its owner id), once one is, up to 5 s.
async fn armed_owner(c: &mut redis::aio::MultiplexedConnection, k: &Keys) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let owners: Vec<String> = redis::cmd("HKEYS").arg(&k.armed).query_async(c).await.unwrap();
        if let Some(owner) = owners.first() {
            return owner.clone();
        }
        assert!(Instant::now() < until, "nobody armed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `owner` is armed on every master, up to 5 s, and returns its wake channel.
async fn armed_everywhere(masters: &mut [redis::aio::MultiplexedConnection], k: &Keys, owner: &str) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    for c in masters.iter_mut() {
        loop {
            let mark: Option<String> = redis::cmd("HGET").arg(&k.armed).arg(owner).query_async(c).await.unwrap();
            if mark.is_some() {
                break;
            }
            assert!(Instant::now() < until, "{owner} never armed on every master");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let entries: Vec<String> =
        redis::cmd("ZRANGE").arg(&k.redlock_waiters).arg(0).arg(-1).query_async(&mut masters[0]).await.unwrap();
    let wake = entries.iter().find_map(|e| e.strip_prefix(&format!("{owner}~")));
    wake.expect("the armed waiter is queued with its wake channel").to_owned()
}

/// Three masters, two clients, a lease of the first on `name`, and the second waiting for it,
/// armed on every master: the fixture, the lease, the wait, the raw connections, the keys, the
/// waiter's owner id and wake channel.
struct Armed {
    _fx: RedlockFixture,
    held: lock_core::Lease,
    wait: tokio::task::JoinHandle<Result<lock_core::Lease, lock_core::LockError>>,
    masters: Vec<redis::aio::MultiplexedConnection>,
    keys: Keys,
    owner: String,
    wake: String,
    hints: Vec<redis::aio::PubSubStream>,
}

async fn armed(name: &str) -> Armed {
    let fx = RedlockFixture::start_n(3).await.unwrap();
    let (holder, waiter) = (fx.redlock_client().await.unwrap(), fx.redlock_client().await.unwrap());
    let name = LockName::new(name).unwrap();
    let keys = Keys::new(&fx.options.key_prefix, &name);
    let held = holder.acquire(&name, &opts(Duration::ZERO)).await.unwrap();
    let wait = {
        let name = name.clone();
        tokio::spawn(async move { waiter.acquire(&name, &opts(Duration::from_secs(30))).await })
    };
    let mut masters = Vec::new();
    for i in 0..3 {
        masters.push(raw(&fx, i).await);
    }
    let owner = armed_owner(&mut masters[0], &keys).await;
    let wake = armed_everywhere(&mut masters, &keys, &owner).await;
    let mut hints = Vec::new();
    for i in 0..3 {
        let client = redis::Client::open(format!("redis://{}", fx.servers[i].addr().unwrap())).unwrap();
        let mut sub = client.get_async_pubsub().await.unwrap();
        sub.subscribe(&wake).await.unwrap();
        hints.push(sub.into_on_message());
    }
    Armed { _fx: fx, held, wait, masters, keys, owner, wake, hints }
}

/// A release hands the lock to the waiter armed on every master by its pushes alone: it holds
/// with the token the release took for it on every master (`push:<token>`), no hint reaches its
/// wake channel on any master, and its claim extends the lease to a whole ttl.
#[tokio::test]
async fn a_release_pushes_the_grant_to_a_waiter_armed_on_every_master() {
    let mut a = armed("pushed").await;
    let released = Instant::now();
    a.held.release().await.unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(5), a.wait).await.expect("handed over").unwrap().unwrap();
    eprintln!("held {:?} after the release", released.elapsed());
    let token = lease.token().0;
    let mut taken = 0;
    for c in &mut a.masters {
        let by: Option<String> = redis::cmd("GET").arg(&a.keys.fence_by).query_async(c).await.unwrap();
        // Taken by the push, then by the claim (which may not have landed yet).
        taken += usize::from(by == Some(format!("push:{token}")) || by == Some(format!("claim:{token}")));
    }
    assert_eq!(taken, 3, "the token {token} was pushed and taken on every master");
    for (i, hints) in a.hints.iter_mut().enumerate() {
        let heard = tokio::time::timeout(Duration::from_millis(200), hints.next()).await;
        let heard = heard.ok().flatten().map(|m| m.get_payload::<String>().unwrap());
        assert_eq!(heard, None, "master {i}: pushed, not hinted ({})", a.wake);
    }
    let claimed = Instant::now() + Duration::from_secs(2);
    while lease.valid_until() < tokio::time::Instant::now() + Duration::from_millis(2500) {
        assert!(Instant::now() < claimed, "the lease was never claimed for its ttl");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    lease.release().await.unwrap();
}

/// One master's push (a release that reached a minority, or anyone with write rights on one
/// master) and a forged hint on every master make the waiter hold nothing while the lock is
/// held; the real release then hands it over with the token a majority pushed, not the forged one.
#[tokio::test]
async fn one_master_s_push_or_a_forged_hint_does_not_hold() {
    let mut a = armed("forged").await;
    let list = a.keys.pushes(&a.owner);
    let _: () = redis::cmd("RPUSH").arg(&list).arg("999999").query_async(&mut a.masters[0]).await.unwrap();
    for c in &mut a.masters {
        let _: () = redis::cmd("PUBLISH").arg(&a.wake).arg(format!("@{}", a.owner)).query_async(c).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!a.wait.is_finished(), "the waiter holds on one master's push or a hint: {:?}", a.wait.await);
    let before = a.held.token();
    a.held.release().await.unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(5), a.wait).await.expect("handed over").unwrap().unwrap();
    assert_ne!(lease.token().0, 999_999, "the forged token is never held");
    assert!(lease.token() > before, "token {} after {before}", lease.token());
    lease.release().await.unwrap();
}

/// A master whose counter fell behind (it missed fence stores, or restarted) pushes the waiter
/// a lower token than the others: the waiter holds on the majority's token, and its claim makes
/// that master keep it, as the lease's token and as its counter, so the next release leaves
/// every master the same token again (before, the lagging master stayed behind and every later
/// push there split from the majority).
#[tokio::test]
async fn the_claim_brings_a_lagging_master_to_the_majority_s_token() {
    let mut a = armed("lagging").await;
    let held = a.held.token().0;
    let behind = held - 5;
    let _: () = redis::cmd("SET").arg(&a.keys.fence).arg(behind).query_async(&mut a.masters[0]).await.unwrap();
    let _: () = redis::cmd("HSET").arg(&a.keys.lock).arg("t").arg(behind).query_async(&mut a.masters[0]).await.unwrap();
    a.held.release().await.unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(5), a.wait).await.expect("handed over").unwrap().unwrap();
    assert_eq!(lease.token().0, held + 1, "the majority's token");
    let claimed = Instant::now() + Duration::from_secs(2);
    while lease.valid_until() < tokio::time::Instant::now() + Duration::from_millis(2500) {
        assert!(Instant::now() < claimed, "the lease was never claimed for its ttl");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let c = &mut a.masters[0];
    let counter: u64 = redis::cmd("GET").arg(&a.keys.fence).query_async(c).await.unwrap();
    let token: u64 = redis::cmd("HGET").arg(&a.keys.lock).arg("t").query_async(c).await.unwrap();
    assert_eq!((counter, token), (held + 1, held + 1), "the lagging master keeps the claimed token");
    lease.release().await.unwrap();
}
