//! `min_replicas_ack` counts the acknowledgements of the write that granted or renewed, on the
//! connection that made it: one primary, one replica, the client behind a
//! fault proxy.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_testkit::servers::redis::RedisServer;
use lock_conformance::proxy::FaultProxy;
use lock_conformance::ClientLink;
use lock_core::{AcquireOptions, DistributedRwLock, DistributedSemaphore, LockError, LockName};

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// A renewal's `WAIT` blocks while the only replica is paused, and a connection reset cuts it:
/// the read-write lock's and the semaphore's renewals answer `Unavailable` (not acknowledged,
/// or outcome unknown), never "renewed". (On one node a `WAIT` sent again alone on the fresh
/// connection happens to block too, on Redis 7.0: this case passes without the fix
/// as well; the fix — the renewal and its `WAIT` retried together — matters when the
/// fresh connection reaches another node, a new primary.)
#[tokio::test]
async fn a_kinds_renewal_counts_acks_of_its_own_write_after_a_reconnect() {
    let primary = RedisServer::start_local().await.unwrap();
    let replica = RedisServer::start_local().await.unwrap();
    let (Some(p), Some(pause)) = (primary.addr(), replica.control()) else {
        eprintln!("NOT APPLICABLE a_kinds_renewal_counts_acks_of_its_own_write_after_a_reconnect: external servers");
        return;
    };
    let mut r = raw(replica.url()).await;
    let _: () = redis::cmd("REPLICAOF").arg(p.ip().to_string()).arg(p.port()).query_async(&mut r).await.unwrap();
    let mut c = raw(primary.url()).await;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query_async(&mut c).await.unwrap();
        if info.contains("connected_slaves:1") && info.contains("state=online") {
            break;
        }
        assert!(Instant::now() < until, "the replica never came online: {info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let options = lock_redis::RedisOptions { min_replicas_ack: 1, ..common::test_options() };
    common::mark_fresh(primary.url(), &options.key_prefix).await.unwrap();
    let proxy: Arc<FaultProxy> = FaultProxy::start(p).await.unwrap();
    let url = format!("redis://{}", proxy.local_addr());
    let rw = lock_redis::connect_rw(&url, options.clone()).await.unwrap();
    let sem = lock_redis::connect_semaphore(&url, options.clone()).await.unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(10)).request_timeout(Duration::from_secs(2));
    let name = LockName::new("acks").unwrap();
    let leases = [
        ("write", rw.try_acquire_write(&name, &opts).await.unwrap().expect("free, acknowledged")),
        ("permit", sem.try_acquire_permit(&LockName::new("acks-sem").unwrap(), 2, &opts).await.unwrap().expect("free")),
    ];
    pause.pause(true).await.unwrap();
    let mut answers = Vec::new();
    for (kind, lease) in leases {
        let renew = tokio::spawn(async move { lease.renew().await });
        // Inside the renewal's WAIT (up to request_timeout / 2 = 375 ms).
        tokio::time::sleep(Duration::from_millis(150)).await;
        proxy.reset_connections().await;
        let t = Instant::now();
        let r = renew.await.unwrap();
        eprintln!("{kind}: {r:?} {:?} after the reset", t.elapsed());
        answers.push((kind, r));
    }
    pause.pause(false).await.unwrap();
    for (kind, r) in answers {
        assert!(
            matches!(r, Err(LockError::Unavailable { .. })),
            "a {kind} renewal no replica acknowledged was answered {r:?}"
        );
    }
}
