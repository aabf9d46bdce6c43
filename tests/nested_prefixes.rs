//! Nested namespaces: one application's Redis `key_prefix` may be the start of
//! another's (`nest` and `nest:b`). Their locks stay apart: every key is
//! `<prefix>:{<escaped name>}:…`, and no prefix holds `{`, so `nest`'s keys (`nest:{…`) and
//! `nest:b`'s (`nest:b:{…`) never meet, and `list`'s `SCAN` pattern of one never matches the
//! other's. What the two do share is ACL scope: `~nest:*` covers `nest:b`'s keys too, so the
//! README tells operators not to nest prefixes of applications that must not touch each other.
//! ZooKeeper roots nested in each other are tested the same way.

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

/// ZooKeeper roots nested in each other (`/…/app` and `/…/app/b`): the outer root's lock named
/// `b` lives in the inner root's node. dlock tells its queue nodes from lock names, so the two
/// still lock apart and list only their own; the README still says not to nest roots (a node
/// the outer client created is a container node, which the server deletes once it is empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_zookeeper_roots_lock_apart() {
    let server = dlock_testkit::servers::zookeeper::ZkServer::start().await.expect("a ZooKeeper server");
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let root = format!("/nest{}-{nanos}", std::process::id());
    let outer = dlock::connect_with(&Config::from_url(&server.url_with_root(&root))).await.expect("outer client");
    let inner_url = server.url_with_root(&format!("{root}/b"));
    let inner = dlock::connect_with(&Config::from_url(&inner_url)).await.expect("inner client");
    let opts = |who: &str| {
        AcquireOptions::new(Duration::from_secs(30))
            .wait(Duration::from_secs(20))
            .holder(Holder::new(who).expect("valid"))
    };
    let (x, b) = (LockName::new("x").expect("valid"), LockName::new("b").expect("valid"));
    let inner_x = inner.try_acquire(&x, &opts("inner")).await.expect("inner asks").expect("inner gets x");
    let outer_b = outer.try_acquire(&b, &opts("outer")).await.expect("outer asks").expect("outer gets b");
    let outer_x = outer.try_acquire(&x, &opts("outer")).await.expect("outer asks").expect("outer gets its own x");
    let names = |infos: Vec<dlock::HolderInfo>| {
        let mut v: Vec<(String, Option<String>)> = infos.into_iter().map(|i| (i.name, i.holder)).collect();
        v.sort();
        v
    };
    let outer_seen = names(outer.list("", 100).await.expect("outer lists"));
    let want_outer = vec![("b".to_owned(), Some("outer".to_owned())), ("x".to_owned(), Some("outer".to_owned()))];
    assert_eq!(outer_seen, want_outer);
    let inner_seen = names(inner.list("", 100).await.expect("inner lists"));
    assert_eq!(inner_seen, vec![("x".to_owned(), Some("inner".to_owned()))]);
    // Held is held, on each side.
    assert!(outer.try_acquire(&b, &opts("outer-2")).await.expect("outer asks").is_none());
    assert!(inner.try_acquire(&x, &opts("inner-2")).await.expect("inner asks").is_none());
    for lease in [outer_b, outer_x, inner_x] {
        lease.release().await.expect("released");
    }
}
