//! `redis+cluster://…?tls=true` with `tls_ca_file`: every node verified against the given CA,
//! by the cluster client and the pub/sub clients alike. A one-node TLS-only cluster (all 16384
//! slots, `tls-cluster yes`) started here, certificates made with `openssl`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::tls::{admin, make_certs, start_server, tls_lines};
use dlock_testkit::process::{free_port, ChildServer};
use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_redis::RedisOptions;

/// A one-node cluster on a TLS-only port; returns it with its port.
async fn tls_cluster(d: &Path) -> (ChildServer, u16) {
    make_certs(d);
    let (port, bus) = (free_port().unwrap(), free_port().unwrap());
    let conf = format!(
        "{}cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-port {bus}\ntls-cluster yes\n\
         tls-replication yes\n",
        tls_lines(d, port, "server", "ca")
    );
    let node = start_server(d, "node", conf, port, false).await;
    let url = format!("rediss://127.0.0.1:{port}");
    let mut c = admin(&url, &d.join("ca.pem")).await;
    let _: () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383).query_async(&mut c).await.unwrap();
    for _ in 0..200 {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut c).await.unwrap();
        if info.contains("cluster_state:ok") {
            return (node, port);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the TLS cluster never reported cluster_state:ok");
}

fn options(ca: Option<&Path>) -> RedisOptions {
    RedisOptions {
        tls_ca_file: ca.map(Path::to_path_buf),
        // A new node: nothing can have been forgotten.
        restart_quiet_period: Some(Duration::ZERO),
        ..common::test_options()
    }
}

fn opts(wait_ms: u64) -> AcquireOptions {
    AcquireOptions::new(Duration::from_secs(5))
        .wait(Duration::from_millis(wait_ms))
        .request_timeout(Duration::from_secs(2))
}

/// With the cluster's CA the lock works over TLS (a waiter is woken by the release through the
/// pub/sub client, which verifies the node too); with no CA (the webpki roots) or another CA's
/// the connection is refused, never made unverified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nodes_are_verified_against_tls_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_node, port) = tls_cluster(d).await;
    let url = format!("redis+cluster://127.0.0.1:{port}?tls=true");
    let name = LockName::new("tls-cluster").unwrap();

    let (holder, waiter) = (
        lock_redis::connect(&url, options(Some(&d.join("ca.pem")))).await.expect("connect with the cluster's CA"),
        lock_redis::connect(&url, options(Some(&d.join("ca.pem")))).await.expect("connect with the cluster's CA"),
    );
    let lease = holder.acquire(&name, &opts(1000)).await.expect("acquire over TLS");
    let t1 = lease.token();
    let n = name.clone();
    let waiting = tokio::spawn(async move { waiter.acquire(&n, &opts(10_000)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the waiter got the lock while it was held");
    let released = std::time::Instant::now();
    lease.release().await.expect("release over TLS");
    let next = waiting.await.unwrap().expect("the waiter gets the lock after the release");
    let woken = released.elapsed();
    assert!(next.token() > t1, "token went from {t1} to {}", next.token());
    next.release().await.unwrap();
    eprintln!("MEASURED TLS cluster: the waiter held {woken:?} after the release");

    for (label, ca) in [("no tls_ca_file (webpki roots)", None), ("another CA", Some(d.join("ca2.pem")))] {
        let refused = match lock_redis::connect(&url, options(ca.as_deref())).await {
            Err(e) => e.to_string(),
            Ok(c) => match c.try_acquire(&name, &opts(0)).await {
                Err(e) => e.to_string(),
                Ok(got) => panic!("with {label} the client reached the node unverified: {got:?}"),
            },
        };
        eprintln!("MEASURED TLS cluster with {label}: refused with {refused}");
    }
}
