//! The keys of one lock share a hash tag, so every script touches one slot and runs on Redis
//! Cluster. Checked against a real cluster-mode server (one node owning all 16384 slots), which
//! rejects any multi-key command whose keys hash to different slots with CROSSSLOT — for the
//! exclusive lock, the read-write lock and the semaphore, with hostile names.

use std::time::Duration;

use dlock_testkit::servers::redis::RedisServer;
use lock_core::{AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockName};
use lock_redis::RedisOptions;

async fn cluster_node() -> RedisServer {
    // The bus port is chosen too: by default it is the client port + 10000, which lands in the
    // ephemeral range where any outgoing connection may hold it, and the node then exits at
    // start (CI saw "Connection reset by peer" from a node whose bus port was taken).
    let bus = dlock_testkit::process::free_port().expect("a free bus port").to_string();
    let args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", &bus];
    let server = RedisServer::start_local_with(&args).await.expect("a cluster-mode redis-server");
    let client = redis::Client::open(server.url()).expect("url");
    let mut con = client.get_multiplexed_async_connection().await.expect("connect");
    let _: () =
        redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383).query_async(&mut con).await.expect("slots");
    for _ in 0..100 {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut con).await.expect("info");
        if info.contains("cluster_state:ok") {
            // Prove the node enforces slots: keys in two slots in one command are refused.
            let cross: redis::RedisResult<()> =
                redis::cmd("MSET").arg("a").arg(1).arg("b").arg(2).query_async(&mut con).await;
            let refused = cross
                .as_ref()
                .is_err_and(|e| e.to_string().to_ascii_uppercase().replace(' ', "").contains("CROSSSLOT"));
            assert!(refused, "the node must enforce slots: {cross:?}");
            return server;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the cluster-mode node never reached cluster_state:ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_stays_in_one_slot() {
    let server = cluster_node().await;
    let opts = AcquireOptions::new(Duration::from_secs(2)).wait(Duration::from_secs(5));
    // A fresh node: no leases to outwait. (On a cluster node the boot marker is per name, so
    // with a quiet period every name would wait it on first use.)
    let fresh = RedisOptions { restart_quiet_period: Some(Duration::ZERO), ..RedisOptions::default() };
    let names = ["plain", "a/b", "../x", "{braces}", "}{", "'; DROP TABLE x; --", "ключ 🔒", &"n".repeat(255)];

    let lock = lock_redis::connect(server.url(), fresh.clone()).await.expect("connect");
    let waiter = lock_redis::connect(server.url(), fresh.clone()).await.expect("connect");
    for raw in names {
        let name = LockName::new(raw).expect("valid");
        let lease = lock.acquire(&name, &opts).await.unwrap_or_else(|e| panic!("{raw:?}: acquire: {e}"));
        lease.renew().await.unwrap_or_else(|e| panic!("{raw:?}: renew: {e}"));
        // A waiter subscribed to the name's channel is woken by the release's publish.
        let (w, n, o) = (waiter.clone(), name.clone(), opts.clone());
        let blocked = tokio::spawn(async move { w.acquire(&n, &o).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        lease.release().await.unwrap_or_else(|e| panic!("{raw:?}: release: {e}"));
        let next = blocked.await.expect("joined").unwrap_or_else(|e| panic!("{raw:?}: waiter: {e}"));
        assert!(next.token() > lease.token());
        next.release().await.expect("release");
    }

    let rw = lock_redis::connect_rw(server.url(), fresh.clone()).await.expect("connect rw");
    let sem = lock_redis::connect_semaphore(server.url(), fresh.clone()).await.expect("connect semaphore");
    for raw in names {
        let name = LockName::new(raw).expect("valid");
        let r = rw.acquire_read(&name, &opts).await.unwrap_or_else(|e| panic!("{raw:?}: read: {e}"));
        assert!(rw
            .try_acquire_write(&name, &opts)
            .await
            .unwrap_or_else(|e| panic!("{raw:?}: try write: {e}"))
            .is_none());
        r.renew().await.unwrap_or_else(|e| panic!("{raw:?}: renew read: {e}"));
        r.release().await.unwrap_or_else(|e| panic!("{raw:?}: release read: {e}"));
        let w = rw.acquire_write(&name, &opts).await.unwrap_or_else(|e| panic!("{raw:?}: write: {e}"));
        w.renew().await.unwrap_or_else(|e| panic!("{raw:?}: renew write: {e}"));
        w.release().await.unwrap_or_else(|e| panic!("{raw:?}: release write: {e}"));
        let p = sem.acquire_permit(&name, 2, &opts).await.unwrap_or_else(|e| panic!("{raw:?}: permit: {e}"));
        p.renew().await.unwrap_or_else(|e| panic!("{raw:?}: renew permit: {e}"));
        p.release().await.unwrap_or_else(|e| panic!("{raw:?}: release permit: {e}"));
    }
}
