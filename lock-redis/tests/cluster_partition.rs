//! Redis Cluster with a master cut off from the cluster bus and its replica while its clients
//! still reach it (`RedisCluster::partition`: the peers' connections are black-holed by source
//! address, the clients' pass). After `cluster-node-timeout` the majority promotes the replica
//! and the cut-off master, seeing itself in the minority, refuses commands (`CLUSTERDOWN`).

mod common;

use common::split_brain::{split_brain, split_brain_tests, Window};
use dlock_testkit::servers::redis_cluster::RedisCluster;
use lock_core::LockName;
use lock_redis::RedisOptions;

/// C1 asks for `acks`; the contender and the last client for none: what any client can get (the
/// promoted replica has no replica of its own until the old master rejoins, so an acknowledged
/// grant is impossible there during the cut).
async fn master_partition(acks: u32) -> Window {
    let cluster = RedisCluster::start().await.unwrap();
    let plain = RedisOptions { key_prefix: format!("dlock-p{:08x}", rand::random::<u32>()), ..common::test_options() };
    let first = RedisOptions { min_replicas_ack: acks, ..plain.clone() };
    let name = LockName::new("cluster-partition").unwrap();
    let slot = cluster.slot_of(&format!("{}:{{{}}}:lock", plain.key_prefix, name.escaped())).await.unwrap();
    let master = cluster.master_of(slot).await.expect("a master serves the slot");
    // What an operator does for a new cluster, for this slot: no restart quiet period.
    let marker = &lock_redis::cluster_boot_markers(&plain.key_prefix)[usize::from(slot)];
    let reply = dlock_testkit::servers::redis_cluster::command(cluster.addr(master), &["SET", marker, "0"]).await;
    assert!(reply.as_deref().is_ok_and(|r| r.starts_with("+OK")), "boot marker: {reply:?}");
    let cut = || async {
        let f = cluster.partition_master_of(slot).await.unwrap();
        assert_eq!(f.old, master);
    };
    let heal = || async {
        cluster.partition(master, false);
        // The old master rejoins, sees a newer epoch for its slots and follows the new master.
        cluster.wait_healthy().await.unwrap();
        assert_ne!(cluster.master_of(slot).await, Some(master), "the old master took its slots back");
    };
    split_brain("cluster master", &cluster.url(), (&first, &plain), &name, cut, heal).await
}

// With `min_replicas_ack = 1` the holder's renewals on the cut-off master cannot be acknowledged
// (then `CLUSTERDOWN`). Without it the cut-off master acknowledges them until it sees itself in
// the minority (about `cluster-node-timeout`), and the promoted replica never received those.
split_brain_tests!(
    master_partition,
    partitioned_master_grants_no_second_holder_with_acks,
    partitioned_master_without_acks_documents_the_limit
);
