//! Redis Sentinel with the primary cut off from its replicas and the Sentinels while its clients
//! still reach it (`RedisSentinelDeployment::partition`: the peers' connections are black-holed by
//! source address, the clients' pass). Sentinel promotes a replica while the old primary keeps
//! answering the clients connected to it — the split brain a SIGKILL never shows.

mod common;

use std::time::{Duration, Instant};

use common::split_brain::{split_brain, split_brain_tests, Window};
use dlock_testkit::servers::redis_sentinel::{RedisSentinelDeployment, SentinelNode};
use lock_core::LockName;
use lock_redis::RedisOptions;

async fn primary_partition(acks: u32) -> Window {
    let d = RedisSentinelDeployment::start().await.unwrap();
    let options = RedisOptions { key_prefix: "dlock".to_owned(), min_replicas_ack: acks, ..common::test_options() };
    let name = LockName::new("sentinel-partition").unwrap();
    let old = d.primary_index().await.unwrap();
    let cut = || async {
        let at = Instant::now();
        d.partition(SentinelNode::Data(old), true);
        let promoted = d.wait_promoted(old, at, Duration::from_secs(30)).await.unwrap();
        promoted.expect("Sentinel promoted no replica within 30 s of the cut");
    };
    let heal = || async {
        d.partition(SentinelNode::Data(old), false);
        // Sentinel demotes the old primary once it has been reachable for a while (its INFO
        // period and a settling delay: several seconds), then it resyncs.
        d.wait_synced().await.unwrap();
        assert_ne!(d.primary_index().await.unwrap(), old, "the old primary came back as primary");
    };
    split_brain("sentinel primary", &d.url(), (&options, &options), &name, cut, heal).await
}

// With `min_replicas_ack = 1` the isolated primary cannot have a renewal acknowledged: the
// holder's renewals fail there (its lost signal fires) instead of silently extending a lease the
// promoted replica never sees. Without it the isolated primary keeps acknowledging them, so the
// holder goes on believing it holds while the promoted replica lets the last lease it received
// expire and grants the lock again — until Sentinel demotes the old primary after the heal.
split_brain_tests!(
    primary_partition,
    partitioned_primary_grants_no_second_holder_with_acks,
    partitioned_primary_without_acks_documents_the_limit
);
