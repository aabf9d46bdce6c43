//! Which credentials reach a Sentinel: a fake Sentinel (testkit's, a RESP responder that
//! records every command) names a real, password-protected data node. The client logs in to the
//! Sentinel with `sentinel_username`/`sentinel_password` only; the data password goes to the
//! data node alone.

mod common;

use std::time::Duration;

use dlock_testkit::servers::fake_sentinel::{protected_redis, FakeSentinel, MASTER_NAME};
use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_redis::RedisOptions;

const DATA_PASSWORD: &str = "data-secret-c41d";
const SENTINEL_PASSWORD: &str = "sentinel-secret-8a2f";

/// The lock works through the fake Sentinel; the Sentinel got `AUTH <sentinel user>
/// <sentinel password>` and never the data password; the data node was reached with its own.
/// The same for the primary lookup of `dlock`'s clean-up (`sentinel_primary`).
#[tokio::test]
async fn the_data_password_never_reaches_a_sentinel() {
    let (data, _server, _dir) = protected_redis(DATA_PASSWORD).await.unwrap();
    let sentinel = FakeSentinel::start(data).await.unwrap();
    let url = format!(
        "redis+sentinel://:{DATA_PASSWORD}@{}/{MASTER_NAME}?sentinel_username=watcher&sentinel_password={SENTINEL_PASSWORD}",
        sentinel.addr
    );
    let options = RedisOptions { restart_quiet_period: Some(Duration::ZERO), ..common::test_options() };
    let client = lock_redis::connect(&url, options.clone()).await.expect("connects through the fake Sentinel");
    let opts = AcquireOptions::new(Duration::from_secs(2)).wait(Duration::from_secs(1));
    client.acquire(&LockName::new("fake-sentinel").unwrap(), &opts).await.unwrap().release().await.unwrap();
    let primary = lock_redis::sentinel_primary(&url, &options).await.unwrap();
    assert_eq!(primary, format!("redis://:{DATA_PASSWORD}@{data}"));

    let seen = sentinel.commands();
    let auths: Vec<&Vec<String>> = seen.iter().filter(|a| a[0].eq_ignore_ascii_case("AUTH")).collect();
    assert!(!auths.is_empty(), "the client logged in to the Sentinel: {seen:?}");
    for a in &auths {
        assert_eq!(a[1..], ["watcher", SENTINEL_PASSWORD], "the Sentinel's own credentials, nothing else");
    }
    assert!(
        !seen.iter().flatten().any(|arg| arg.contains(DATA_PASSWORD)),
        "the data password reached the Sentinel: {seen:?}"
    );
}
