//! ZooKeeper-specific behaviour on a real server: session expiry, restarts, one wake-up per
//! release, FIFO, hostile names, cancel-safety, unreachable servers, ACLs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{ZkFixture, SESSION_TIMEOUT};
use lock_conformance::{ClientLink, Fixture};
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName};
use lock_zk::{ZkLock, ZkOptions};
use tokio::time::{sleep, timeout, Instant};

fn name(s: &str) -> LockName {
    LockName::new(s).expect("valid name")
}

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new(Duration::from_millis(ttl_ms))
}

/// The lock nodes queued under `name`.
async fn nodes(fx: &ZkFixture, lock: &ZkLock, name: &LockName) -> Vec<String> {
    let raw = fx.raw().await;
    match raw.list_children(&lock.parent_path(name)).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {}: {e}", lock.parent_path(name)),
    }
}

/// Waits until `cond` holds, up to `within`.
async fn eventually<F, Fut>(within: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + within;
    while !cond().await {
        assert!(Instant::now() < end, "not within {within:?}: {what}");
        sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn acquire_release_and_czxid_tokens() {
    let fx = ZkFixture::start().await.unwrap();
    let (a, b) = (fx.connect().await.unwrap(), fx.connect().await.unwrap());
    assert_eq!(a.backend(), "zookeeper");
    let caps = a.capabilities();
    assert!(caps.fifo && caps.durable_fencing && caps.durable_leases);
    let n = name("orders/42");
    let first = a.acquire(&n, &opts(2000)).await.unwrap();
    assert!(b.try_acquire(&n, &opts(2000)).await.unwrap().is_none());
    let raw = fx.raw().await;
    let children = nodes(&fx, &a, &n).await;
    assert_eq!(children.len(), 1, "{children:?}");
    let (_, stat) = raw.get_data(&format!("{}/{}", a.parent_path(&n), children[0])).await.unwrap();
    assert_eq!(stat.czxid as u64, first.token().get(), "the token is the node's czxid");
    assert_eq!(stat.ephemeral_owner, a.session_id().await.unwrap());
    first.release().await.unwrap();
    assert!(nodes(&fx, &a, &n).await.is_empty(), "release deletes the node at once");
    let second = b.try_acquire(&n, &opts(2000)).await.unwrap().expect("free after release");
    assert!(second.token() > first.token());
    // A different name gets its own parent and a token from the same global zxid order.
    let other = a.try_acquire(&name("orders/43"), &opts(2000)).await.unwrap().expect("independent name");
    assert!(other.token() > second.token());
}

#[tokio::test]
async fn session_expiry_of_holder_frees_lock_for_next_waiter() {
    let fx = ZkFixture::start().await.unwrap();
    let (holder, link) = fx.connect_linked().await.unwrap();
    let waiter = fx.connect().await.unwrap();
    let n = name("expiring");
    let lease = holder.acquire(&n, &opts(1500)).await.unwrap();
    let lost = lease.lost();
    let waiting = {
        let waiter = waiter.clone();
        let n = n.clone();
        tokio::spawn(async move { waiter.acquire(&n, &opts(1500).wait(Duration::from_secs(15))).await })
    };
    eventually(Duration::from_secs(3), "waiter queued", || async { nodes(&fx, &waiter, &n).await.len() == 2 }).await;

    let cut = Instant::now();
    link.set_partitioned(true).await;
    // The holder must give up before the server may hand the lock to someone else.
    timeout(SESSION_TIMEOUT, lost.fired()).await.expect("holder's lost signal fires within the session timeout");
    let lost_after = cut.elapsed();
    let next = timeout(fx.expiry_bound() * 3, waiting).await.expect("waiter granted").unwrap().unwrap();
    let granted_after = cut.elapsed();
    assert!(lost_after < granted_after, "lost at {lost_after:?} must precede the next grant at {granted_after:?}");
    eprintln!("partitioned holder: lost after {lost_after:?}, waiter granted after {granted_after:?}");
    assert!(next.token() > lease.token());
    assert!(!lease.is_valid());
    assert!(matches!(lease.renew().await, Err(LockError::Lost { .. })));

    // Healed, the same client works again on a new session (kazoo #282: no hang, no stale state).
    link.set_partitioned(false).await;
    next.release().await.unwrap();
    let again = holder.acquire(&n, &opts(1500).wait(Duration::from_secs(10))).await.unwrap();
    assert!(again.token() > next.token());
    assert!(matches!(lease.release().await, Err(LockError::Lost { .. })));
    assert!(again.is_valid(), "releasing the old lost lease must not touch the new one");
    again.release().await.unwrap();
}

#[tokio::test]
async fn server_restart_with_session_surviving_keeps_the_lock() {
    let fx = ZkFixture::with_session_timeout(Duration::from_secs(12)).await.unwrap();
    let server = fx.server().expect("a local server");
    let holder = fx.connect().await.unwrap();
    let other = fx.connect().await.unwrap();
    let n = name("survivor");
    let lease = holder.acquire(&n, &opts(12_000)).await.unwrap();
    let token = lease.token();
    let session = holder.session_id().await;

    let down = Instant::now();
    server.stop().await.unwrap();
    sleep(Duration::from_millis(300)).await;
    server.start().await.unwrap();
    let restart = down.elapsed();
    assert!(restart < Duration::from_secs(8), "restart took {restart:?}: too slow for this test's margins");

    eventually(Duration::from_secs(8), "holder renews after the restart", || async { lease.renew().await.is_ok() })
        .await;
    assert!(lease.is_valid(), "lost: {:?}", lease.lost().reason());
    assert!(!lease.lost().is_fired());
    assert_eq!(lease.token(), token);
    assert_eq!(holder.session_id().await, session, "the session survived the restart");
    assert!(other.try_acquire(&n, &opts(2000)).await.unwrap().is_none(), "nobody else got it");
    lease.release().await.unwrap();
    let next = other.try_acquire(&n, &opts(2000)).await.unwrap().expect("free after release");
    assert!(next.token() > token, "fencing stays monotonic across the restart");
}

async fn total_watch_events(clients: &[ZkLock]) -> u64 {
    clients.iter().map(ZkLock::watch_events).sum()
}

#[tokio::test]
async fn one_release_wakes_exactly_one_waiter_in_fifo_order() {
    let fx = ZkFixture::start().await.unwrap();
    let holder = fx.connect().await.unwrap();
    let n = name("herd");
    let first = holder.acquire(&n, &opts(3000)).await.unwrap();
    let mut waiters = Vec::new();
    let mut tasks = Vec::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..4usize {
        let w = fx.connect().await.unwrap();
        waiters.push(w.clone());
        let (n2, tx) = (n.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let lease = w.acquire(&n2, &opts(3000).wait(Duration::from_secs(30))).await.unwrap();
            tx.send((i, lease.token())).unwrap();
            lease
        }));
        // Queue them one after the other, so arrival order is known.
        eventually(Duration::from_secs(3), "waiter queued", || async { nodes(&fx, &holder, &n).await.len() == i + 2 })
            .await;
    }
    assert_eq!(total_watch_events(&waiters).await, 0, "nobody wakes while the holder holds");

    first.release().await.unwrap();
    let mut order = Vec::new();
    let mut last_token = first.token();
    for (k, task) in tasks.into_iter().enumerate() {
        let (i, token) = timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
        order.push(i);
        assert!(token > last_token);
        last_token = token;
        sleep(Duration::from_millis(300)).await;
        // Each release so far woke exactly one waiter: k+1 releases (the holder's, then k waiters').
        assert_eq!(total_watch_events(&waiters).await, k as u64 + 1, "wake-ups after {} releases", k + 1);
        let lease = task.await.unwrap();
        lease.release().await.unwrap();
    }
    assert_eq!(order, vec![0, 1, 2, 3], "granted in arrival order");
}

#[tokio::test]
async fn hostile_names_neither_collide_nor_escape_the_root() {
    let fx = ZkFixture::start().await.unwrap();
    let lock = fx.connect().await.unwrap();
    let long = "é".repeat(127) + "x";
    assert_eq!(long.len(), 255);
    let names = [
        "a/b",
        "a%2Fb",
        "a_b",
        "..",
        ".",
        "%2E.",
        "../x",
        "/",
        "zookeeper",
        "ключ",
        "🔒",
        "a b",
        "'; DROP TABLE x; --",
        &long,
    ];
    let mut leases = Vec::new();
    for s in names {
        let lease = lock.try_acquire(&name(s), &opts(3000)).await.unwrap();
        leases.push(lease.unwrap_or_else(|| panic!("{s:?} collided with an earlier name")));
    }
    let raw = fx.raw().await;
    let under_root = raw.list_children(&fx.root).await.unwrap();
    assert_eq!(under_root.len(), names.len(), "one parent per name, all directly under the root: {under_root:?}");
    let mut top = raw.list_children("/").await.unwrap();
    top.sort();
    assert_eq!(top, vec!["dlock-test".to_owned(), "zookeeper".into()], "nothing outside the root");
    for s in names {
        assert_eq!(nodes(&fx, &lock, &name(s)).await.len(), 1, "{s:?}");
    }
}

#[tokio::test]
async fn cancelled_and_timed_out_waits_leave_no_node() {
    let fx = ZkFixture::start().await.unwrap();
    let holder = fx.connect().await.unwrap();
    let waiter = fx.connect().await.unwrap();
    let n = name("cancel");
    let lease = holder.acquire(&n, &opts(3000)).await.unwrap();

    // Dropped while waiting (no wait limit of its own).
    let dropped = timeout(Duration::from_millis(500), waiter.acquire(&n, &opts(3000))).await;
    assert!(dropped.is_err());
    eventually(Duration::from_secs(3), "cancelled waiter's node deleted", || async {
        nodes(&fx, &holder, &n).await.len() == 1
    })
    .await;

    // Its own wait ran out.
    let begun = Instant::now();
    let err = waiter.acquire(&n, &opts(3000).wait(Duration::from_millis(400))).await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    assert!(begun.elapsed() < Duration::from_millis(1500), "{:?}", begun.elapsed());
    eventually(Duration::from_secs(3), "timed-out waiter's node deleted", || async {
        nodes(&fx, &holder, &n).await.len() == 1
    })
    .await;

    // Dropped at every early await point as well: no node may stay behind.
    for ms in [0u64, 1, 2, 5, 10, 20] {
        let _ = timeout(Duration::from_millis(ms), waiter.acquire(&n, &opts(3000))).await;
    }
    eventually(Duration::from_secs(3), "no orphan nodes", || async { nodes(&fx, &holder, &n).await.len() == 1 }).await;

    lease.release().await.unwrap();
    assert!(waiter.try_acquire(&n, &opts(3000)).await.unwrap().is_some(), "nothing queued ahead");
}

#[tokio::test]
async fn unreachable_server_is_unavailable_within_the_wait() {
    let port = lock_conformance::process::free_port().unwrap();
    let options = ZkOptions { connect_timeout: Duration::from_secs(1), ..ZkOptions::default() };
    let begun = Instant::now();
    let err = lock_zk::connect(&format!("zk://127.0.0.1:{port}/x"), options).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err}");
    assert!(begun.elapsed() < Duration::from_millis(1800), "{:?}", begun.elapsed());

    let err = lock_zk::connect("zk://127.0.0.1:2181/x/../y", ZkOptions::default()).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");

    // A connected client whose server goes away.
    let fx = ZkFixture::start().await.unwrap();
    let server = fx.server().expect("a local server");
    let lock = fx.connect().await.unwrap();
    server.stop().await.unwrap();
    let begun = Instant::now();
    let err = lock.acquire(&name("gone"), &opts(2000).wait(Duration::from_secs(1))).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err}");
    assert!(begun.elapsed() < Duration::from_millis(1800), "{:?}", begun.elapsed());
    let begun = Instant::now();
    let err = lock.try_acquire(&name("gone"), &opts(2000)).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err}");
    assert!(begun.elapsed() < Duration::from_secs(6), "{:?}", begun.elapsed());
}

#[tokio::test]
async fn deleting_the_node_fires_lost_and_frees_the_lock() {
    let fx = ZkFixture::start().await.unwrap();
    let holder = fx.connect().await.unwrap();
    let other = fx.connect().await.unwrap();
    let n = name("deleted");
    let lease = holder.acquire(&n, &opts(3000)).await.unwrap();
    let children = nodes(&fx, &holder, &n).await;
    fx.raw().await.delete(&format!("{}/{}", holder.parent_path(&n), children[0]), None).await.unwrap();
    timeout(Duration::from_secs(2), lease.lost().fired()).await.expect("lost fires when the node is deleted");
    assert!(other.try_acquire(&n, &opts(3000)).await.unwrap().is_some());
    assert!(matches!(lease.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test]
async fn a_lost_lease_dropped_without_release_frees_its_node() {
    let fx = ZkFixture::start().await.unwrap();
    let holder = fx.connect().await.unwrap();
    let other = fx.connect().await.unwrap();
    let n = name("abandoned");
    // No renewal: the lease ends after its ttl although the session lives on.
    let lease = holder.acquire(&n, &opts(600).auto_renew(false)).await.unwrap();
    timeout(Duration::from_secs(2), lease.lost().fired()).await.expect("lost after the ttl");
    drop(lease);
    let next = other.acquire(&n, &opts(600).wait(Duration::from_secs(3))).await;
    assert!(next.is_ok(), "the lock must not stay taken by a lease nobody holds: {next:?}");
}

#[tokio::test]
async fn digest_credentials_protect_the_nodes() {
    let fx = ZkFixture::start().await.unwrap();
    let root = format!("{}-acl", fx.root);
    let url = |creds: &str| fx.server.url_with_root(&root).replacen("zk://", &format!("zk://{creds}"), 1);
    let alice = lock_zk::connect(&url("alice:s3cret@"), fx.options.clone()).await.unwrap();
    assert!(!format!("{alice:?}").contains("s3cret"));
    let n = name("guarded");
    let lease = alice.acquire(&n, &opts(3000)).await.unwrap();
    let anonymous = fx.raw().await;
    assert_eq!(anonymous.list_children(&alice.parent_path(&n)).await.unwrap_err(), zookeeper_client::Error::NoAuth);
    let addr = fx.server.addr().unwrap().to_string();
    let raw = zookeeper_client::Client::connector().with_auth("digest", b"alice:s3cret").connect(&addr).await.unwrap();
    let (acls, _) = raw.get_acl(&alice.parent_path(&n)).await.unwrap();
    assert!(acls.iter().all(|a| a.scheme() == "digest" && a.id().starts_with("alice:")), "{acls:?}");

    // Without the credentials nobody can queue on (or delete) alice's locks: another user is
    // refused at connect, since alice's root is not theirs.
    let err = lock_zk::connect(&url("mallory:guess@"), fx.options.clone()).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
    lease.release().await.unwrap();
}

/// Issue 15.3: with credentials, an unauthenticated client can neither read, plant nor delete
/// anything under the root, held or idle, even where the root's parent is open to everyone; and
/// a root that others may change is refused.
#[tokio::test]
async fn an_unauthenticated_client_can_neither_read_plant_nor_delete_under_a_protected_root() {
    use zookeeper_client::{Acls, CreateMode, Error::NoAuth};
    let fx = ZkFixture::start().await.unwrap();
    let anon = fx.raw().await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    // One root whose ancestors dlock creates, one under a parent open to everyone.
    let open_parent = format!("{}-open-parent", fx.root);
    anon.mkdir(&open_parent, &open).await.unwrap();
    for root in [format!("{}-made/a/locks", fx.root), format!("{open_parent}/locks")] {
        let url = fx.server.url_with_root(&root).replacen("zk://", "zk://alice:s3cret@", 1);
        let alice = lock_zk::connect(&url, fx.options.clone()).await.unwrap();
        let n = name("guarded");
        let lease = alice.acquire(&n, &opts(3000)).await.unwrap();
        let parent = alice.parent_path(&n);
        let addr = fx.server.addr().unwrap().to_string();
        let authed =
            zookeeper_client::Client::connector().with_auth("digest", b"alice:s3cret").connect(&addr).await.unwrap();
        let holder = format!("{parent}/{}", authed.list_children(&parent).await.unwrap()[0]);

        // Read.
        assert_eq!(anon.list_children(&root).await.unwrap_err(), NoAuth, "{root}");
        assert_eq!(anon.list_children(&parent).await.unwrap_err(), NoAuth, "{root}");
        assert_eq!(anon.get_data(&holder).await.unwrap_err(), NoAuth, "{root}");
        // Plant: a fake node every waiter would queue behind, or a fake parent.
        let fake = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        assert_eq!(anon.create(&format!("{parent}/_c_fake-lock-"), &[], &fake).await.unwrap_err(), NoAuth);
        assert_eq!(anon.create(&format!("{root}/planted"), &[], &open).await.unwrap_err(), NoAuth);
        // Delete the holder's node, or the root and what is above it.
        assert_eq!(anon.delete(&holder, None).await.unwrap_err(), NoAuth, "{root}");
        assert!(lease.is_valid());
        lease.release().await.unwrap();
        // Idle (the server removes empty container parents; here we do it at once), the root
        // still cannot be deleted, and so not recreated open, by anyone else.
        authed.delete(&parent, None).await.unwrap();
        for path in [root.clone(), root.rsplit_once('/').unwrap().0.to_owned()] {
            if path == open_parent {
                continue;
            }
            assert!(anon.delete(&path, None).await.is_err(), "{path} could be deleted without credentials");
        }
        assert!(anon.check_stat(&root).await.unwrap().is_some());
        assert!(alice.try_acquire(&n, &opts(3000)).await.unwrap().is_some());
    }

    // A root others may change is refused, with a Config error that says so.
    let open_root = format!("{}-open-root", fx.root);
    anon.mkdir(&open_root, &open).await.unwrap();
    let url = fx.server.url_with_root(&open_root).replacen("zk://", "zk://alice:s3cret@", 1);
    let err = lock_zk::connect(&url, fx.options.clone()).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("can be changed by others"), "{err}");
    assert!(!err.to_string().contains("s3cret"), "{err}");
}

#[tokio::test]
async fn capabilities_and_fixture() {
    let fx = ZkFixture::start().await.unwrap();
    let client: Arc<dyn DistributedLock> = fx.client().await.unwrap();
    assert_eq!(client.backend(), "zookeeper");
    assert!(fx.linked_client().await.unwrap().is_some());
    assert!(fx.server().is_some_and(|s| s.persistent()));
}

#[tokio::test]
async fn a_create_whose_reply_is_lost_leaves_no_orphan_node() {
    let fx = ZkFixture::start().await.unwrap();
    let (client, link) = fx.connect_linked().await.unwrap();
    let other = fx.connect().await.unwrap();
    let n = name("lost-reply");
    // 100 ms each way: a reset 100–200 ms after the call lets the create reach the server and
    // drops its reply; earlier resets drop the request itself.
    link.set_latency(Duration::from_millis(100)).await;
    let mut granted = 0;
    for cut_ms in (0..=300).step_by(30) {
        let acquiring = {
            let (client, n) = (client.clone(), n.clone());
            tokio::spawn(async move { client.acquire(&n, &opts(4000).wait(Duration::from_secs(8))).await })
        };
        sleep(Duration::from_millis(cut_ms)).await;
        link.reset_connections().await;
        match acquiring.await.unwrap() {
            Ok(lease) => {
                granted += 1;
                let children = nodes(&fx, &other, &n).await;
                assert_eq!(children.len(), 1, "cut at {cut_ms} ms: exactly our node, no orphan: {children:?}");
                lease.release().await.unwrap();
            }
            // A reset may also end the call (e.g. the session could not be confirmed in time);
            // then nothing of it may stay behind either.
            Err(e) => assert!(e.is_retryable(), "cut at {cut_ms} ms: {e}"),
        }
        eventually(Duration::from_secs(5), "no node left behind", || async { nodes(&fx, &other, &n).await.is_empty() })
            .await;
    }
    assert!(granted > 0);
    link.set_latency(Duration::ZERO).await;
    let lease = other.try_acquire(&n, &opts(2000)).await.unwrap();
    assert!(lease.is_some(), "the lock is free after all the cut attempts");
}

#[tokio::test]
async fn a_suspended_holder_gives_up_before_its_session_can_expire_even_with_a_long_ttl() {
    let fx = ZkFixture::start().await.unwrap();
    let (holder, link) = fx.connect_linked().await.unwrap();
    let waiter = fx.connect().await.unwrap();
    let n = name("long-ttl");
    // A ttl far beyond the session timeout: only the session rules can stop the holder in time.
    let lease = holder.acquire(&n, &opts(20_000)).await.unwrap();
    let waiting = {
        let (waiter, n) = (waiter.clone(), n.clone());
        tokio::spawn(async move { waiter.acquire(&n, &opts(2000).wait(Duration::from_secs(15))).await })
    };
    eventually(Duration::from_secs(3), "waiter queued", || async { nodes(&fx, &waiter, &n).await.len() == 2 }).await;
    let cut = Instant::now();
    link.set_partitioned(true).await;
    timeout(SESSION_TIMEOUT * 2, lease.lost().fired()).await.expect("lost fires");
    let lost_after = cut.elapsed();
    let reason = lease.lost().reason().unwrap_or_default().to_owned();
    let next = timeout(Duration::from_secs(10), waiting).await.unwrap().unwrap().unwrap();
    let granted_after = cut.elapsed();
    assert!(
        // Safety: the holder stops claiming before anyone else is granted. Liveness: about one
        // session timeout after the last answer (plus scheduling slack on a busy machine).
        lost_after < granted_after && lost_after < SESSION_TIMEOUT + Duration::from_millis(300),
        "lost after {lost_after:?} ({reason}), next grant after {granted_after:?}"
    );
    // Either the session rule or the lease's own clock (valid_until is bounded by the session
    // timeout after the last confirmed contact) ends it; both come before the server can expire us.
    assert!(reason.contains("may have expired") || reason.contains("valid_until passed"), "{reason}");
    eprintln!("partitioned holder: lost after {lost_after:?}, waiter granted after {granted_after:?}");
    link.set_partitioned(false).await;
    next.release().await.unwrap();
}

#[tokio::test]
async fn after_a_process_stall_is_valid_is_false_by_the_clock_alone() {
    let fx = ZkFixture::start().await.unwrap();
    let lock = fx.connect().await.unwrap();
    let t0 = Instant::now();
    // A ttl far beyond the session timeout: the server keeps our node only as long as the session.
    let lease = lock.acquire(&name("stall"), &opts(30_000)).await.unwrap();
    let session = fx.options.session_timeout;
    assert!(lease.valid_until() <= t0 + session, "valid_until is t0 + {:?}", lease.valid_until() - t0);
    // Stall this current-thread runtime: no watchdog, monitor or client I/O task can run, as in a
    // process paused by the OS or a long GC-like stop. Only the clock can tell.
    std::thread::sleep(session + Duration::from_millis(200));
    assert!(!lease.is_valid(), "after a stall longer than the session, is_valid() still reads true");
}

/// What a create whose reply was lost leaves behind when the server we looked on had not applied
/// it yet: a node with the acquisition's own prefix. Injected by hand, ahead of the waiting node
/// and then behind the holding one; neither may block anyone nor outlive the acquisition.
#[tokio::test]
async fn stray_nodes_of_our_own_prefix_neither_block_nor_outlive_the_acquisition() {
    let fx = ZkFixture::start().await.unwrap();
    let (holder, acquirer, other) =
        (fx.connect().await.unwrap(), fx.connect().await.unwrap(), fx.connect().await.unwrap());
    let raw = fx.raw().await;
    let n = name("stray");
    let parent = holder.parent_path(&n);
    let seq = |c: &String| c.rsplit('-').next().and_then(|s| s.parse::<i64>().ok());
    // Move the parent's counter past 0, so that a stray named with sequence 0 sorts first.
    holder.acquire(&n, &opts(2000)).await.unwrap().release().await.unwrap();
    let held = holder.acquire(&n, &opts(2000)).await.unwrap();
    let waiting = {
        let (acquirer, n) = (acquirer.clone(), n.clone());
        tokio::spawn(async move { acquirer.acquire(&n, &opts(2000).wait(Duration::from_secs(6))).await })
    };
    eventually(Duration::from_secs(3), "waiter queued", || async { nodes(&fx, &other, &n).await.len() == 2 }).await;
    let children = nodes(&fx, &other, &n).await;
    let theirs = children.iter().max_by_key(|c| seq(c)).unwrap().clone();
    let prefix = &theirs[..theirs.len() - 10];
    let stray = |s: &str| format!("{parent}/{prefix}{s}");
    let open = zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
    raw.create(&stray("0000000000"), &[], &open).await.unwrap();
    held.release().await.unwrap();
    let lease = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the acquire hangs behind a stray node of its own prefix")
        .unwrap()
        .unwrap();
    assert_eq!(nodes(&fx, &other, &n).await, vec![theirs.clone()], "the stray ahead was deleted");
    // A stray behind the holder: the release must take it too, or every later waiter hangs.
    raw.create(&stray("0000000099"), &[], &open).await.unwrap();
    lease.release().await.unwrap();
    eventually(Duration::from_secs(3), "no node of the acquisition left", || async {
        nodes(&fx, &other, &n).await.is_empty()
    })
    .await;
    let next = other.try_acquire(&n, &opts(2000)).await.unwrap();
    assert!(next.is_some(), "the lock is free after the acquisition ended");
}

#[tokio::test]
async fn an_ensemble_url_with_a_dead_member_works() {
    let fx = ZkFixture::start().await.unwrap();
    let dead = lock_conformance::process::free_port().unwrap();
    let live = fx.server.addr().unwrap();
    let url = format!("zk://127.0.0.1:{dead},{live}{}", fx.root);
    let lock = lock_zk::connect(&url, fx.options.clone()).await.unwrap();
    let lease = lock.acquire(&name("ensemble"), &opts(2000).wait(Duration::from_secs(5))).await.unwrap();
    lease.release().await.unwrap();
}

// ---- Read-write lock and semaphore (docs/contract.md §5.2, §5.3) ----

/// The nodes queued under the read-write lock `name`.
async fn rw_nodes(fx: &ZkFixture, lock: &ZkLock, name: &LockName) -> Vec<String> {
    children_of(fx, &lock.rw_parent_path(name)).await
}

/// The nodes queued under the semaphore `name`.
async fn sem_nodes(fx: &ZkFixture, lock: &ZkLock, name: &LockName) -> Vec<String> {
    children_of(fx, &lock.semaphore_parent_path(name)).await
}

async fn children_of(fx: &ZkFixture, parent: &str) -> Vec<String> {
    let raw = fx.raw().await;
    match raw.list_children(parent).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {parent}: {e}"),
    }
}

fn long_wait(ttl_ms: u64) -> AcquireOptions {
    opts(ttl_ms).wait(Duration::from_secs(30))
}

#[tokio::test]
async fn readers_wake_only_on_their_writer() {
    use lock_core::DistributedRwLock;
    let fx = ZkFixture::start().await.unwrap();
    let n = name("rw-herd");
    let w1c = fx.connect().await.unwrap();
    let w1 = w1c.acquire_write(&n, &opts(3000)).await.unwrap();

    // Queue: W1 (holds), R1 R2 R3, W2, R4 R5 — each on its own client, in a known order.
    let plan = [false, false, false, true, false, false]; // true = writer
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for (i, write) in plan.into_iter().enumerate() {
        let c = fx.connect().await.unwrap();
        clients.push(c.clone());
        let n2 = n.clone();
        tasks.push(tokio::spawn(async move {
            if write {
                c.acquire_write(&n2, &long_wait(3000)).await
            } else {
                c.acquire_read(&n2, &long_wait(3000)).await
            }
        }));
        eventually(Duration::from_secs(3), "queued", || async { rw_nodes(&fx, &w1c, &n).await.len() == i + 2 }).await;
    }
    let events = |k: usize| clients[k].watch_events();
    assert_eq!(total_watch_events(&clients).await, 0, "nobody wakes while W1 holds");

    // W1 leaves: exactly the three readers that wait on it wake; W2 and the readers behind W2
    // sleep on.
    w1.release().await.unwrap();
    let mut r123 = Vec::new();
    for t in tasks.drain(..3) {
        r123.push(timeout(Duration::from_secs(5), t).await.unwrap().unwrap().unwrap());
    }
    sleep(Duration::from_millis(300)).await;
    assert_eq!((events(0), events(1), events(2)), (1, 1, 1), "each of R1..R3 woke once");
    assert_eq!(total_watch_events(&clients).await, 3, "W2, R4 and R5 did not wake");
    assert!(r123.iter().all(|r| r.token() > w1.token()));

    // Two of the three readers leave: W2 waits on R3 only, so nobody wakes.
    let r3 = r123.pop().unwrap();
    for r in r123 {
        r.release().await.unwrap();
    }
    sleep(Duration::from_millis(300)).await;
    assert_eq!(total_watch_events(&clients).await, 3, "releasing R1, R2 woke nobody");

    // R3 leaves: W2 (and only W2) wakes and holds.
    r3.release().await.unwrap();
    let w2 = timeout(Duration::from_secs(5), tasks.remove(0)).await.unwrap().unwrap().unwrap();
    sleep(Duration::from_millis(300)).await;
    assert_eq!(events(3), 1);
    assert_eq!(total_watch_events(&clients).await, 4, "only W2 woke");
    assert!(w2.token() > r3.token());

    // W2 leaves: R4 and R5 wake once each and share the lock.
    w2.release().await.unwrap();
    let mut last = Vec::new();
    for t in tasks {
        last.push(timeout(Duration::from_secs(5), t).await.unwrap().unwrap().unwrap());
    }
    sleep(Duration::from_millis(300)).await;
    assert_eq!((events(4), events(5)), (1, 1));
    assert_eq!(total_watch_events(&clients).await, 6, "one wake-up per waiter in all");
    assert!(last.iter().all(|l| l.is_valid() && l.token() > w2.token()));
    for l in last {
        l.release().await.unwrap();
    }
    assert!(rw_nodes(&fx, &w1c, &n).await.is_empty());
}

#[tokio::test]
async fn cancelled_reader_writer_and_permit_waits_leave_no_node() {
    use lock_core::{DistributedRwLock, DistributedSemaphore};
    let fx = ZkFixture::start().await.unwrap();
    let holder = fx.connect().await.unwrap();
    let waiter = fx.connect().await.unwrap();
    let n = name("cancel-kinds");

    // A writer holds: a reader and a writer queue, and are dropped while waiting.
    let w = holder.acquire_write(&n, &opts(3000)).await.unwrap();
    let dropped = timeout(Duration::from_millis(500), waiter.acquire_read(&n, &opts(3000))).await;
    assert!(dropped.is_err());
    let dropped = timeout(Duration::from_millis(500), waiter.acquire_write(&n, &opts(3000))).await;
    assert!(dropped.is_err());
    // Timed out by their own wait.
    let err = waiter.acquire_read(&n, &opts(3000).wait(Duration::from_millis(300))).await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    // And dropped at every early await point.
    for ms in [0u64, 1, 2, 5, 10, 20] {
        let _ = timeout(Duration::from_millis(ms), waiter.acquire_read(&n, &opts(3000))).await;
        let _ = timeout(Duration::from_millis(ms), waiter.acquire_write(&n, &opts(3000))).await;
    }
    eventually(Duration::from_secs(3), "only the writer's node is left", || async {
        rw_nodes(&fx, &holder, &n).await.len() == 1
    })
    .await;
    w.release().await.unwrap();
    let r = waiter.try_acquire_read(&n, &opts(3000)).await.unwrap().expect("nothing queued ahead of a reader");
    r.release().await.unwrap();

    // A full semaphore: permit waits dropped, timed out, and rejected for another count.
    let p = holder.acquire_permit(&n, 1, &opts(3000)).await.unwrap();
    let dropped = timeout(Duration::from_millis(500), waiter.acquire_permit(&n, 1, &opts(3000))).await;
    assert!(dropped.is_err());
    let err = waiter.acquire_permit(&n, 1, &opts(3000).wait(Duration::from_millis(300))).await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    let err = waiter.acquire_permit(&n, 2, &opts(3000).wait(Duration::from_millis(300))).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidOptions { .. }), "{err}");
    for ms in [0u64, 1, 2, 5, 10, 20] {
        let _ = timeout(Duration::from_millis(ms), waiter.acquire_permit(&n, 1, &opts(3000))).await;
    }
    eventually(Duration::from_secs(3), "only the holder's permit node is left", || async {
        sem_nodes(&fx, &holder, &n).await.len() == 1
    })
    .await;
    p.release().await.unwrap();
    let q = waiter.try_acquire_permit(&n, 1, &opts(3000)).await.unwrap().expect("nothing queued ahead");
    q.release().await.unwrap();
}

#[tokio::test]
async fn session_expiry_of_a_reader_frees_a_waiting_writer() {
    use lock_core::DistributedRwLock;
    let fx = ZkFixture::start().await.unwrap();
    let (reader, link) = fx.connect_linked().await.unwrap();
    let other_reader = fx.connect().await.unwrap();
    let writer = fx.connect().await.unwrap();
    let n = name("rw-expiry");
    let r1 = other_reader.acquire_read(&n, &opts(1500)).await.unwrap();
    let r2 = reader.acquire_read(&n, &opts(1500)).await.unwrap();
    let lost = r2.lost();
    r1.release().await.unwrap();
    let waiting = {
        let (writer, n) = (writer.clone(), n.clone());
        tokio::spawn(async move { writer.acquire_write(&n, &long_wait(1500)).await })
    };
    eventually(Duration::from_secs(3), "writer queued", || async { rw_nodes(&fx, &writer, &n).await.len() == 2 }).await;

    let cut = Instant::now();
    link.set_partitioned(true).await;
    timeout(SESSION_TIMEOUT, lost.fired()).await.expect("the cut-off reader's lost signal fires");
    let lost_after = cut.elapsed();
    let w = timeout(fx.expiry_bound() * 3, waiting).await.expect("writer granted").unwrap().unwrap();
    let granted_after = cut.elapsed();
    eprintln!("partitioned reader: lost after {lost_after:?}, writer granted after {granted_after:?}");
    assert!(lost_after < granted_after, "the reader gives up before the writer gets in");
    assert!(w.token() > r2.token());
    assert_eq!(writer.watch_events(), 1, "the writer woke once, when the reader's node went");
    link.set_partitioned(false).await;
    w.release().await.unwrap();
}

#[tokio::test]
async fn a_semaphore_waiter_is_woken_by_any_release() {
    use lock_core::DistributedSemaphore;
    let fx = ZkFixture::start().await.unwrap();
    let n = name("sem-wake");
    let (a, b, c, d) = (
        fx.connect().await.unwrap(),
        fx.connect().await.unwrap(),
        fx.connect().await.unwrap(),
        fx.connect().await.unwrap(),
    );
    let pa = a.acquire_permit(&n, 2, &opts(3000)).await.unwrap();
    let pb = b.acquire_permit(&n, 2, &opts(3000)).await.unwrap();
    assert!(c.try_acquire_permit(&n, 2, &opts(3000)).await.unwrap().is_none());
    let mut tasks = Vec::new();
    for (i, w) in [c.clone(), d.clone()].into_iter().enumerate() {
        let n2 = n.clone();
        tasks.push(tokio::spawn(async move { w.acquire_permit(&n2, 2, &long_wait(3000)).await }));
        eventually(Duration::from_secs(3), "waiter queued", || async { sem_nodes(&fx, &a, &n).await.len() == i + 3 })
            .await;
    }
    let data = fx.raw().await.get_data(&format!("{}/{}", a.semaphore_parent_path(&n), sem_nodes(&fx, &a, &n).await[0]));
    assert_eq!(data.await.unwrap().0, b"2", "the permits are stored with the node");

    // The *second* holder leaves (not the one the first waiter is queued right behind).
    let released = Instant::now();
    pb.release().await.unwrap();
    let pc = timeout(Duration::from_secs(5), tasks.remove(0)).await.unwrap().unwrap().unwrap();
    let handoff = released.elapsed();
    eprintln!("semaphore hand-off after {handoff:?}");
    assert!(handoff < Duration::from_secs(1), "the waiter was woken by the release, not by a timer: {handoff:?}");
    assert!(pc.token() > pb.token());
    assert_eq!(c.watch_events(), 1, "the first waiter woke once");
    sleep(Duration::from_millis(300)).await;
    assert_eq!(d.watch_events(), 1, "the second waiter woke once (C was granted) and waits on");
    assert!(!tasks[0].is_finished(), "two permits are in use: A and C");

    // The first holder leaves: the last waiter gets in.
    pa.release().await.unwrap();
    let pd = timeout(Duration::from_secs(5), tasks.remove(0)).await.unwrap().unwrap().unwrap();
    assert!(pd.token() > pc.token());
    assert_eq!(c.watch_events() + d.watch_events(), 3);
    pc.release().await.unwrap();
    pd.release().await.unwrap();
}

#[tokio::test]
async fn one_name_in_three_kinds_is_three_locks() {
    use lock_core::{DistributedRwLock, DistributedSemaphore};
    let fx = ZkFixture::start().await.unwrap();
    let a = fx.connect().await.unwrap();
    let n = name("rw~x");
    let lock = a.try_acquire(&n, &opts(3000)).await.unwrap().expect("exclusive");
    let write = a.try_acquire_write(&n, &opts(3000)).await.unwrap().expect("write lock of the same name");
    let permit = a.try_acquire_permit(&n, 1, &opts(3000)).await.unwrap().expect("permit of the same name");
    let parents = [a.parent_path(&n), a.rw_parent_path(&n), a.semaphore_parent_path(&n)];
    for p in &parents {
        assert_eq!(children_of(&fx, p).await.len(), 1, "{p}");
        assert!(p.starts_with(&format!("{}/", fx.root)) && p[fx.root.len() + 1..].find('/').is_none(), "{p}");
    }
    assert!(parents[0] != parents[1] && parents[1] != parents[2] && parents[0] != parents[2]);
    // A name that looks like a marked parent stays an exclusive lock of its own.
    assert_ne!(a.parent_path(&name("rw~x")), a.rw_parent_path(&name("x")));
    for l in [lock, write, permit] {
        l.release().await.unwrap();
    }
}

#[tokio::test]
async fn semaphore_under_churn_never_exceeds_its_permits_and_wakes_few() {
    use lock_core::DistributedSemaphore;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const PERMITS: u32 = 2;
    const ROUNDS: usize = 4;
    let fx = ZkFixture::start().await.unwrap();
    let n = name("sem-churn");
    let inside = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..6u64 {
        let c = fx.connect().await.unwrap();
        clients.push(c.clone());
        let (n, inside, peak) = (n.clone(), Arc::clone(&inside), Arc::clone(&peak));
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS as u64 {
                let lease = c.acquire_permit(&n, PERMITS, &long_wait(3000)).await?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                // Uneven hold times, so that holders leave out of queue order.
                sleep(Duration::from_millis(10 + (i * 7 + round * 13) % 40)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for t in tasks {
        timeout(Duration::from_secs(30), t).await.expect("everyone got all permits in time").unwrap().unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert_eq!(peak, PERMITS as usize, "at most (and, under load, exactly) {PERMITS} holders at once");
    let acquisitions = 6 * ROUNDS as u64;
    let wakes = total_watch_events(&clients).await;
    eprintln!("{acquisitions} permit acquisitions of {PERMITS}, {wakes} watch wake-ups in all");
    // Every release wakes the first waiter, and every grant the waiter behind it: about two
    // per acquisition, never one per waiter.
    assert!(wakes <= 3 * acquisitions, "{wakes} wake-ups for {acquisitions} acquisitions");
    assert!(sem_nodes(&fx, &clients[0], &n).await.is_empty());
}

#[tokio::test]
async fn lost_replies_in_read_write_and_permit_acquires_leave_no_orphan_node() {
    use lock_core::{DistributedRwLock, DistributedSemaphore};
    let fx = ZkFixture::start().await.unwrap();
    let (client, link) = fx.connect_linked().await.unwrap();
    let other = fx.connect().await.unwrap();
    let n = name("lost-reply-kinds");
    // 100 ms each way: resets land before, during and after the create (and, for a permit,
    // the grant mark that follows it).
    link.set_latency(Duration::from_millis(100)).await;
    for kind in ["read", "write", "permit"] {
        let mut granted = 0;
        for cut_ms in (0..=400).step_by(100) {
            let acquiring = {
                let (client, n) = (client.clone(), n.clone());
                let o = opts(4000).wait(Duration::from_secs(8));
                tokio::spawn(async move {
                    match kind {
                        "read" => client.acquire_read(&n, &o).await,
                        "write" => client.acquire_write(&n, &o).await,
                        _ => client.acquire_permit(&n, 1, &o).await,
                    }
                })
            };
            sleep(Duration::from_millis(cut_ms)).await;
            link.reset_connections().await;
            let queued = || async {
                if kind == "permit" {
                    sem_nodes(&fx, &other, &n).await
                } else {
                    rw_nodes(&fx, &other, &n).await
                }
            };
            match acquiring.await.unwrap() {
                Ok(lease) => {
                    granted += 1;
                    let children = queued().await;
                    assert_eq!(children.len(), 1, "{kind}, cut at {cut_ms} ms: exactly our node: {children:?}");
                    lease.release().await.unwrap();
                }
                Err(e) => assert!(e.is_retryable(), "{kind}, cut at {cut_ms} ms: {e}"),
            }
            eventually(Duration::from_secs(5), "no node left behind", || async { queued().await.is_empty() }).await;
        }
        assert!(granted > 0, "{kind}: never granted");
    }
    link.set_latency(Duration::ZERO).await;
    assert!(other.try_acquire_write(&n, &opts(2000)).await.unwrap().is_some(), "the rw lock is free");
    assert!(other.try_acquire_permit(&n, 1, &opts(2000)).await.unwrap().is_some(), "the semaphore is free");
}

#[tokio::test]
async fn busy_try_acquires_of_every_kind_create_no_node() {
    use lock_core::{DistributedRwLock, DistributedSemaphore};
    let fx = ZkFixture::start().await.unwrap();
    let (holder, waiter, prober) =
        (fx.connect().await.unwrap(), fx.connect().await.unwrap(), fx.connect().await.unwrap());
    let n = name("busy-try");
    let w = holder.acquire_write(&n, &opts(3000)).await.unwrap();
    let p = holder.acquire_permit(&n, 1, &opts(3000)).await.unwrap();
    // Waiters queue behind both, so a busy try would be the third node (second waiter).
    let (w2, n2) = (waiter.clone(), n.clone());
    let queued_rw = tokio::spawn(async move { w2.acquire_write(&n2, &long_wait(3000)).await });
    let (w3, n3) = (waiter.clone(), n.clone());
    let queued_sem = tokio::spawn(async move { w3.acquire_permit(&n3, 1, &long_wait(3000)).await });
    eventually(Duration::from_secs(3), "waiters queued", || async {
        rw_nodes(&fx, &holder, &n).await.len() == 2 && sem_nodes(&fx, &holder, &n).await.len() == 2
    })
    .await;

    // A child watch on both parents would see any node created and deleted by a busy try.
    let raw = fx.raw().await;
    let (_, rw_watch) = raw.list_and_watch_children(&holder.rw_parent_path(&n)).await.unwrap();
    let (_, sem_watch) = raw.list_and_watch_children(&holder.semaphore_parent_path(&n)).await.unwrap();
    assert!(prober.try_acquire_read(&n, &opts(3000)).await.unwrap().is_none());
    assert!(prober.try_acquire_write(&n, &opts(3000)).await.unwrap().is_none());
    assert!(prober.try_acquire_permit(&n, 1, &opts(3000)).await.unwrap().is_none());
    let err = prober.try_acquire_permit(&n, 2, &opts(3000)).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidOptions { .. }), "{err}");
    assert!(timeout(Duration::from_millis(300), rw_watch.changed()).await.is_err(), "a busy rw try made a node");
    assert!(timeout(Duration::from_millis(300), sem_watch.changed()).await.is_err(), "a busy permit try made a node");
    assert_eq!(waiter.watch_events(), 0, "nobody woke");

    w.release().await.unwrap();
    p.release().await.unwrap();
    for l in [queued_rw.await.unwrap().unwrap(), queued_sem.await.unwrap().unwrap()] {
        l.release().await.unwrap();
    }
}

#[tokio::test]
async fn session_expiry_of_a_permit_holder_frees_its_place() {
    use lock_core::DistributedSemaphore;
    let fx = ZkFixture::start().await.unwrap();
    let (cut_holder, link) = fx.connect_linked().await.unwrap();
    let (holder, waiter) = (fx.connect().await.unwrap(), fx.connect().await.unwrap());
    let n = name("sem-expiry");
    let kept = holder.acquire_permit(&n, 2, &opts(1500)).await.unwrap();
    let doomed = cut_holder.acquire_permit(&n, 2, &opts(1500)).await.unwrap();
    let lost = doomed.lost();
    let waiting = {
        let (waiter, n) = (waiter.clone(), n.clone());
        tokio::spawn(async move { waiter.acquire_permit(&n, 2, &long_wait(1500)).await })
    };
    eventually(Duration::from_secs(3), "waiter queued", || async { sem_nodes(&fx, &waiter, &n).await.len() == 3 })
        .await;
    let cut = Instant::now();
    link.set_partitioned(true).await;
    timeout(SESSION_TIMEOUT, lost.fired()).await.expect("the cut-off holder's lost signal fires");
    let lost_after = cut.elapsed();
    let got = timeout(fx.expiry_bound() * 3, waiting).await.expect("waiter granted").unwrap().unwrap();
    let granted_after = cut.elapsed();
    eprintln!("partitioned permit holder: lost after {lost_after:?}, waiter granted after {granted_after:?}");
    assert!(lost_after < granted_after);
    assert!(kept.is_valid(), "the other holder keeps its permit");
    assert!(got.token() > doomed.token() && got.token() > kept.token());
    assert_eq!(waiter.watch_events(), 1, "the waiter woke once, when the expired node went");
    link.set_partitioned(false).await;
    got.release().await.unwrap();
    kept.release().await.unwrap();
}
