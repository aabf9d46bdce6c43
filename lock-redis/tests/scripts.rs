//! The Lua scripts against fresh local `redis-server`s, called through the typed calls the
//! stores use (`lock_redis::scripts`), so a test and the backend send the same keys and
//! arguments in the same order.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use lock_core::LockName;
use lock_redis::scripts::{
    Acquire, HandOff, HandOffScript, Keys, RedlockAcquire, RedlockFence, RedlockRelease, RedlockUndo, RwAcquire,
    RwKeys, RwRelease, SemAcquire, SemKeys, SemRelease, Terms,
};
use redis::aio::MultiplexedConnection;

#[path = "scripts/exclusive.rs"]
mod exclusive;
#[path = "scripts/free_path.rs"]
mod free_path;
#[path = "scripts/handoff.rs"]
mod handoff;
#[path = "scripts/kinds.rs"]
mod kinds;
#[path = "scripts/kinds_scale.rs"]
mod kinds_scale;
#[path = "scripts/queue_scale.rs"]
mod queue_scale;
#[path = "scripts/quiet.rs"]
mod quiet;
#[path = "scripts/redlock.rs"]
mod redlock;

/// A fresh local server (kept alive by the first half), its client and a connection to it.
async fn fresh_server() -> (dlock_testkit::servers::redis::RedisServer, redis::Client, redis::aio::MultiplexedConnection)
{
    let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let c = client.get_multiplexed_async_connection().await.unwrap();
    (server, client, c)
}

/// [`fresh_server`] and the keys `keys` makes of the lock `name` under `prefix` (`Keys::new`,
/// `RwKeys::new`, [`kinds_keys`]): the lock a case works on.
async fn fresh_lock<K>(
    prefix: &str,
    name: &str,
    keys: impl FnOnce(&str, &LockName) -> K,
) -> (dlock_testkit::servers::redis::RedisServer, redis::Client, MultiplexedConnection, K) {
    let (server, client, c) = fresh_server().await;
    (server, client, c, keys(prefix, &LockName::new(name).unwrap()))
}

/// The keys of the semaphore and of the read-write lock of `name` under `prefix`.
fn kinds_keys(prefix: &str, name: &LockName) -> (SemKeys, RwKeys) {
    (SemKeys::new(prefix, name), RwKeys::new(prefix, name))
}

/// The messages of `channels`, from now on.
async fn listen(client: &redis::Client, channels: &[&str]) -> redis::aio::PubSubStream {
    let mut sub = client.get_async_pubsub().await.unwrap();
    for channel in channels {
        sub.subscribe(*channel).await.unwrap();
    }
    sub.into_on_message()
}

/// The payloads that arrive on `messages`, until none comes within `within`.
async fn heard(messages: &mut redis::aio::PubSubStream, within: Duration) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(within, messages.next()).await {
        got.push(String::from_utf8_lossy(m.get_payload_bytes()).into_owned());
    }
    got
}

/// The next payload on `messages`, if one comes within `within`.
async fn next(messages: &mut redis::aio::PubSubStream, within: Duration) -> Option<String> {
    let m = tokio::time::timeout(within, messages.next()).await.ok()??;
    Some(String::from_utf8_lossy(m.get_payload_bytes()).into_owned())
}

/// An exclusive acquire of `owner` for 5 s: `reg` 0 a single try, else a waiting attempt
/// registering for `reg` ms, with wake channel `wake` (`""`: none) and no grant terms.
fn acquire<'a>(k: &'a Keys, owner: &'a str, reg: u64, reserve_ms: u64, wake: &'a str) -> Acquire<'a> {
    Acquire {
        keys: k,
        owner,
        ttl_ms: 5000,
        quiet_ms: 0,
        holder: "",
        metadata: "",
        fence_ms: 0,
        registration_ms: reg,
        reserve_ms,
        wake,
        grant: "",
        max_waiters: 10_000,
    }
}

/// The terms of an attempt of `owner` for 5 s, without a quiet period, as [`acquire`]'s: `reg` 0
/// a single try, else a waiting attempt; `wake` (`""`: none).
fn terms<'a>(owner: &'a str, reg: u64, reserve_ms: u64, wake: &'a str) -> Terms<'a> {
    Terms { owner, ttl_ms: 5000, quiet_ms: 0, registration_ms: reg, reserve_ms, wake, max_waiters: 10_000 }
}

/// How many of the exclusive queue's three keys exist (0: the queue left no key behind).
async fn queue_keys(c: &mut redis::aio::MultiplexedConnection, k: &Keys) -> usize {
    let keys = [&k.waiters, &k.waiter_ends, &k.waiter_entries];
    redis::cmd("EXISTS").arg(&keys[..]).query_async(c).await.unwrap()
}

/// A release (or abandon) of `owner` of the exclusive lock, with a claim window of 1 s.
fn hand_off<'a>(script: HandOffScript, k: &'a Keys, owner: &'a str, reserve_ms: u64, wake: &'a str) -> HandOff<'a> {
    HandOff { script, keys: k, owner, reserve_ms, wake, claim_ms: CLAIM_MS }
}

/// The claim window of a grant in the release these tests use (the backend's is 1 s too).
const CLAIM_MS: u64 = 1000;

/// An acquire that runs on its own clone of a test's connection with the boot marker `marker`,
/// its reply unwrapped: the closures of a test build the call and run it this way, so the test
/// may call them while it uses the connection itself.
trait Attempt: Copy {
    fn on(self, marker: &'static str, c: &MultiplexedConnection) -> impl Future<Output = Vec<i64>> + use<Self>;
}

/// A call without a boot marker (a release, an undo, a fence) run as [`Attempt::on`] runs an
/// acquire.
trait Call: Copy {
    type Reply;
    fn on(self, c: &MultiplexedConnection) -> impl Future<Output = Self::Reply> + use<Self>;
}

macro_rules! run_on_a_clone {
    (attempts [$($a:ident),*] calls [$($r:ident -> $reply:ty),*]) => {
        $(impl<'a> Attempt for $a<'a> {
            fn on(self, marker: &'static str, c: &MultiplexedConnection) -> impl Future<Output = Vec<i64>> + use<'a> {
                let mut c = c.clone();
                async move { self.invoke(marker, &mut c).await.unwrap() }
            }
        })*
        $(impl<'a> Call for $r<'a> {
            type Reply = $reply;
            fn on(self, c: &MultiplexedConnection) -> impl Future<Output = $reply> + use<'a> {
                let mut c = c.clone();
                async move { self.invoke(&mut c).await.unwrap() }
            }
        })*
    };
}

run_on_a_clone! {
    attempts [Acquire, RwAcquire, SemAcquire, RedlockAcquire]
    calls [HandOff -> i64, RwRelease -> i64, SemRelease -> i64, RedlockRelease -> i64, RedlockUndo -> i64, RedlockFence -> Vec<i64>]
}
