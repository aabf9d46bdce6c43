//! Nested namespaces (issue 30 item 8): one application's Redis `key_prefix` may be the start of
//! another's (`nest` and `nest:b`). Their locks stay apart: every key is
//! `<prefix>:{<escaped name>}:…`, and no prefix holds `{`, so `nest`'s keys (`nest:{…`) and
//! `nest:b`'s (`nest:b:{…`) never meet, and `list`'s `SCAN` pattern of one never matches the
//! other's. What the two do share is ACL scope: `~nest:*` covers `nest:b`'s keys too, so the
//! README tells operators not to nest prefixes of applications that must not touch each other.

use std::time::Duration;

use dlock::{AcquireOptions, Config, Holder, LockName};
use dlock_testkit::servers::redis::RedisServer;

fn config(url: &str, prefix: &str) -> Config {
    let mut config = Config::from_url(url);
    config.redis.key_prefix = prefix.to_owned();
    // A new prefix on a new server: no quiet period to wait out in a test.
    config.redis.restart_quiet_period = Some(Duration::ZERO);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_inside_another_keeps_its_locks_apart() {
    let server = RedisServer::start().await.expect("a Redis server for the test");
    // Unique per run: the server may be shared with other runs.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let prefix = format!("nest{}-{nanos}", std::process::id());
    let outer = dlock::connect_with(&config(server.url(), &prefix)).await.expect("outer client");
    let inner = dlock::connect_with(&config(server.url(), &format!("{prefix}:b"))).await.expect("inner client");
    let opts = |who: &str| {
        AcquireOptions::new(Duration::from_secs(30))
            .wait(Duration::from_secs(20))
            .holder(Holder::new(who).expect("valid"))
    };
    // The same name, and names spelled like the other's key pieces, are separate locks.
    let names = ["x", "b", "b:{x}:lock", "{x}"].map(|n| LockName::new(n).expect("valid"));
    let mut held = Vec::new();
    for name in &names {
        let a = outer.try_acquire(name, &opts("outer")).await.expect("outer asks").expect("outer gets it");
        let b = inner.try_acquire(name, &opts("inner")).await.expect("inner asks");
        let b = b.unwrap_or_else(|| panic!("{name:?} held by the outer prefix blocked the inner one"));
        held.push(a);
        held.push(b);
    }
    for name in &names {
        let a = outer.inspect(name).await.expect("inspect").expect("held");
        let b = inner.inspect(name).await.expect("inspect").expect("held");
        assert_eq!((a.holder.as_deref(), b.holder.as_deref()), (Some("outer"), Some("inner")), "{name:?}");
    }
    let listed = |infos: Vec<dlock::HolderInfo>, who: &str| {
        assert_eq!(infos.len(), names.len(), "{who} lists only its own locks: {infos:?}");
        assert!(infos.iter().all(|i| i.holder.as_deref() == Some(who)), "{who}: {infos:?}");
    };
    listed(outer.list("", 100).await.expect("outer lists"), "outer");
    listed(inner.list("", 100).await.expect("inner lists"), "inner");
    // A force release on one side frees only that side's lock.
    outer.force_release(&names[0]).await.expect("force release");
    assert!(outer.inspect(&names[0]).await.expect("inspect").is_none());
    assert_eq!(inner.inspect(&names[0]).await.expect("inspect").and_then(|i| i.holder).as_deref(), Some("inner"));
    for lease in held {
        let _ = lease.release().await;
    }
}
