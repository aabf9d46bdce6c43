//! A session holding many leases: past the first 64, they share one recursive watch on the root
//! (`lock-zk/src/root_watch.rs`) instead of a watch per node. Loss detection must be the same:
//! a deleted node (also while the connection was down) and an ended session fire the lost
//! signal, long before `valid_until` (renewals are off and the session is long, so nothing else
//! could fire it in time).

mod common;

use std::time::Duration;

use common::{name, nodes, opts, ZkFixture};
use lock_conformance::proxy::FaultProxy;
use lock_conformance::ClientLink;
use lock_core::{DistributedLock, Lease, LockError};
use lock_zk::ZkLock;
use tokio::time::{sleep, timeout};

/// More than the 64 leases a session watches node by node.
const MANY: usize = 70;

/// Long enough that `valid_until` (about half of it, `lease::server_bound`) cannot explain a loss seen in 3 s.
const LONG_SESSION: Duration = Duration::from_secs(20);

async fn hold_many(lock: &ZkLock, tag: &str) -> Vec<Lease> {
    let mut leases = Vec::with_capacity(MANY);
    for i in 0..MANY {
        let lease = lock.acquire(&name(&format!("{tag}-{i}")), &opts(20_000).auto_renew(false)).await.unwrap();
        leases.push(lease);
    }
    leases
}

/// Deletes the node of the last lease, which is under the root watch.
async fn delete_last(fx: &ZkFixture, lock: &ZkLock, tag: &str) {
    let n = name(&format!("{tag}-{}", MANY - 1));
    let children = nodes(fx, lock, &n).await;
    assert_eq!(children.len(), 1, "{children:?}");
    fx.raw().await.delete(&format!("{}/{}", lock.parent_path(&n), children[0]), None).await.unwrap();
}

#[tokio::test]
async fn under_the_root_watch_a_deleted_node_fires_lost_and_the_rest_stay_held() {
    let fx = ZkFixture::with_session_timeout(LONG_SESSION).await.unwrap();
    let (holder, other) = (fx.connect().await.unwrap(), fx.connect().await.unwrap());
    let leases = hold_many(&holder, "del").await;
    delete_last(&fx, &holder, "del").await;
    let last = leases.last().unwrap();
    timeout(Duration::from_secs(3), last.lost().fired()).await.expect("lost fires when the node is deleted");
    assert!(last.lost().reason().unwrap_or_default().contains("deleted"), "{:?}", last.lost().reason());
    assert!(other.try_acquire(&name(&format!("del-{}", MANY - 1)), &opts(3000)).await.unwrap().is_some());
    // Past a sweep: the others are neither lost nor released by the watch's bookkeeping.
    sleep(Duration::from_millis(1500)).await;
    for (i, lease) in leases.iter().enumerate().take(MANY - 1) {
        assert!(lease.is_valid(), "lease {i} lost: {:?}", lease.lost().reason());
    }
    assert!(matches!(last.release().await, Err(LockError::Lost { .. })));
    for lease in leases.iter().take(MANY - 1) {
        lease.release().await.unwrap();
    }
    // Released: every node is gone, and a lease taken now is watched again.
    for i in 0..MANY - 1 {
        assert!(nodes(&fx, &holder, &name(&format!("del-{i}"))).await.is_empty(), "node {i} left behind");
    }
    let again = hold_many(&holder, "again").await;
    delete_last(&fx, &holder, "again").await;
    timeout(Duration::from_secs(3), again.last().unwrap().lost().fired()).await.expect("lost fires again");
}

#[tokio::test]
async fn under_the_root_watch_a_node_deleted_while_disconnected_fires_lost_after_reconnecting() {
    let fx = ZkFixture::with_session_timeout(LONG_SESSION).await.unwrap();
    let (holder, link) = fx.connect_linked().await.unwrap();
    let leases = hold_many(&holder, "gap").await;
    // The check each lease gets when it joins the watch is done, so only the watch is left.
    sleep(Duration::from_millis(500)).await;
    link.set_partitioned(true).await;
    link.reset_connections().await;
    // A persistent watch replays nothing of what happened while the connection was down.
    delete_last(&fx, &holder, "gap").await;
    sleep(Duration::from_millis(500)).await;
    link.set_partitioned(false).await;
    let last = leases.last().unwrap();
    timeout(Duration::from_secs(5), last.lost().fired()).await.expect("lost fires once the connection is back");
    for (i, lease) in leases.iter().enumerate().take(MANY - 1) {
        assert!(lease.is_valid(), "lease {i} lost: {:?}", lease.lost().reason());
    }
}

#[tokio::test]
async fn under_the_root_watch_an_ended_session_fires_every_lost() {
    let fx = ZkFixture::with_session_timeout(LONG_SESSION).await.unwrap();
    let addr = fx.server.addr().expect("a local server");
    // The holder reaches the server through a proxy, so that it cannot take its session back
    // while a twin ends it (each connect with a session id closes the session's other
    // connection: a holder that reconnected first would close the twin's, and the session
    // would live on; seen on a loaded CI machine).
    let link = FaultProxy::start(addr).await.unwrap();
    let client = zookeeper_client::Client::connector()
        .with_session_timeout(LONG_SESSION)
        .connect(&link.local_addr().to_string())
        .await
        .unwrap();
    let holder = lock_zk::from_client(client.clone(), &fx.root, fx.options.clone()).await.unwrap();
    let leases = hold_many(&holder, "end").await;
    link.set_partitioned(true).await;
    link.reset_connections().await;
    // A twin takes the session over and closes it: the server ends it at once, and deletes its
    // nodes. The holder, cut off, has seen none of it.
    let twin = zookeeper_client::Client::connector()
        .with_session(client.session().clone())
        .connect(&addr.to_string())
        .await
        .expect("the twin takes the session over");
    drop(twin);
    let last_name = name(&format!("end-{}", MANY - 1));
    let gone = async {
        while !nodes(&fx, &holder, &last_name).await.is_empty() {
            sleep(Duration::from_millis(100)).await;
        }
    };
    timeout(Duration::from_secs(5), gone).await.expect("the twin's close ends the session and its nodes");
    for (i, lease) in leases.iter().enumerate() {
        assert!(lease.is_valid(), "lease {i} lost before the holder could know: {:?}", lease.lost().reason());
    }
    // Healed: the holder's held reconnect is told the session expired.
    link.set_partitioned(false).await;
    for (i, lease) in leases.iter().enumerate() {
        timeout(Duration::from_secs(5), lease.lost().fired()).await.unwrap_or_else(|_| panic!("lease {i} not lost"));
    }
    let last = leases.last().unwrap();
    assert!(last.lost().reason().unwrap_or_default().contains("session"), "{:?}", last.lost().reason());
}
