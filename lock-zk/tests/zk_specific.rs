//! ZooKeeper-specific behaviour on a real server: session expiry, restarts, one wake-up per
//! release, FIFO, hostile names, cancel-safety, unreachable servers, ACLs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    eventually, linked_and_direct, name, nodes, opts, partition_until_granted, total_watch_events, two_clients,
    GaveWay, ZkFixture, SESSION_TIMEOUT,
};
use lock_conformance::{ClientLink, Fixture};
use lock_core::{DistributedLock, LockError, LockService};
use lock_zk::ZkOptions;
use tokio::time::{sleep, timeout, Instant};

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
    let (fx, (holder, link), waiter) = linked_and_direct().await;
    let n = name("expiring");
    let lease = holder.acquire(&n, &opts(1500)).await.unwrap();
    let lost = lease.lost();
    let waiting = {
        let waiter = waiter.clone();
        let n = n.clone();
        tokio::spawn(async move { waiter.acquire(&n, &opts(1500).wait(Duration::from_secs(15))).await })
    };
    eventually(Duration::from_secs(3), "waiter queued", || async { nodes(&fx, &waiter, &n).await.len() == 2 }).await;

    // The holder must give up before the server may hand the lock to someone else.
    let GaveWay { granted: next, lost_after, granted_after } =
        partition_until_granted(&*link, lost, SESSION_TIMEOUT, waiting, fx.expiry_bound() * 3).await;
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
    // `other`'s own session may still be reconnecting after the restart: Unavailable is its
    // honest answer then, and an application retries it.
    let (reconnecting, short) = (Duration::from_secs(8), opts(2000));
    let busy = dlock_testkit::retry_unavailable(reconnecting, || other.try_acquire(&n, &short)).await;
    assert!(busy.unwrap().is_none(), "nobody else got it");
    lease.release().await.unwrap();
    let next = dlock_testkit::retry_unavailable(reconnecting, || other.try_acquire(&n, &short))
        .await
        .unwrap()
        .expect("free after release");
    assert!(next.token() > token, "fencing stays monotonic across the restart");
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
async fn unreachable_server_is_unavailable_within_the_wait() {
    let port = dlock_testkit::process::free_port().unwrap();
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
    let (fx, holder, other) = two_clients().await;
    let n = name("deleted");
    let lease = holder.acquire(&n, &opts(3000)).await.unwrap();
    let children = nodes(&fx, &holder, &n).await;
    fx.raw().await.delete(&format!("{}/{}", holder.parent_path(&n), children[0]), None).await.unwrap();
    timeout(Duration::from_secs(2), lease.lost().fired()).await.expect("lost fires when the node is deleted");
    assert!(other.try_acquire(&n, &opts(3000)).await.unwrap().is_some());
    assert!(matches!(lease.release().await, Err(LockError::Lost { .. })));
}

/// The renewals of one session's leases share rounds (one `sync`, then an `exists` per lease,
/// pipelined): each lease still gets its own answer.
#[tokio::test]
async fn renewals_sharing_a_round_each_get_their_own_answer() {
    let (fx, holder, _other) = two_clients().await;
    let mut leases = Vec::new();
    for i in 0..20 {
        leases.push(holder.acquire(&name(&format!("round-{i}")), &opts(3000).auto_renew(false)).await.unwrap());
    }
    let renewed = futures::future::join_all(leases.iter().map(|l| l.renew())).await;
    assert!(renewed.iter().all(Result::is_ok), "{renewed:?}");
    let n = name("round-7");
    let children = nodes(&fx, &holder, &n).await;
    fx.raw().await.delete(&format!("{}/{}", holder.parent_path(&n), children[0]), None).await.unwrap();
    let renewed = futures::future::join_all(leases.iter().map(|l| l.renew())).await;
    for (i, r) in renewed.iter().enumerate() {
        assert_eq!(r.is_ok(), i != 7, "lease {i}: {r:?}");
    }
}

#[tokio::test]
async fn a_lost_lease_dropped_without_release_frees_its_node() {
    let (_fx, holder, other) = two_clients().await;
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

/// With credentials, an unauthenticated client can neither read, plant nor delete
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
        // (The server may have removed the empty container already: NoNode is that.)
        match authed.delete(&parent, None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => panic!("deleting the idle parent {parent}: {e}"),
        }
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
    let (fx, (client, link), other) = linked_and_direct().await;
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
                // The resets may also cost the lease after the grant (its lost signal fired, so
                // release says so); what this case checks is that no node stays behind (below).
                match lease.release().await {
                    Ok(_) | Err(LockError::Lost { .. }) => {}
                    Err(e) => panic!("cut at {cut_ms} ms: release: {e}"),
                }
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
    let (fx, (holder, link), waiter) = linked_and_direct().await;
    let n = name("long-ttl");
    // A ttl far beyond the session timeout: only the session rules can stop the holder in time.
    let lease = holder.acquire(&n, &opts(20_000)).await.unwrap();
    let waiting = {
        let (waiter, n) = (waiter.clone(), n.clone());
        tokio::spawn(async move { waiter.acquire(&n, &opts(2000).wait(Duration::from_secs(15))).await })
    };
    eventually(Duration::from_secs(3), "waiter queued", || async { nodes(&fx, &waiter, &n).await.len() == 2 }).await;
    let GaveWay { granted: next, lost_after, granted_after } =
        partition_until_granted(&*link, lease.lost(), SESSION_TIMEOUT * 2, waiting, Duration::from_secs(10)).await;
    let reason = lease.lost().reason().unwrap_or_default().to_owned();
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
    let dead = dlock_testkit::process::free_port().unwrap();
    let live = fx.server.addr().unwrap();
    let url = format!("zk://127.0.0.1:{dead},{live}{}", fx.root);
    let lock = lock_zk::connect(&url, fx.options.clone()).await.unwrap();
    let lease = lock.acquire(&name("ensemble"), &opts(2000).wait(Duration::from_secs(5))).await.unwrap();
    lease.release().await.unwrap();
}

/// `WaitPolicy::Forever` outlasts an outage longer than `connect_timeout` and the session: the
/// waiter keeps trying with back-off, gets a new session once the server is back, and is granted
/// the lock when the holder releases it (contract §4), instead of giving up with `Unavailable`.
#[tokio::test]
async fn a_forever_wait_outlasts_connect_timeout_and_its_session() {
    let mut fx = ZkFixture::start().await.unwrap();
    fx.options.connect_timeout = Duration::from_secs(1);
    let holder = fx.connect().await.unwrap();
    let (waiter, link) = fx.connect_linked().await.unwrap();
    let n = name("forever-outage");
    let held = holder.acquire(&n, &opts(2000)).await.unwrap();
    let task = tokio::spawn({
        let (waiter, n) = (waiter.clone(), n.clone());
        async move { waiter.acquire(&n, &opts(2000).wait_policy(lock_core::WaitPolicy::Forever)).await }
    });
    sleep(Duration::from_millis(300)).await;
    link.set_partitioned(true).await;
    // Longer than connect_timeout (1 s) and the session (2 s).
    sleep(SESSION_TIMEOUT + Duration::from_millis(1500)).await;
    assert!(!task.is_finished(), "the forever wait gave up during the outage: {:?}", task.await);
    link.set_partitioned(false).await;
    sleep(Duration::from_millis(500)).await;
    held.release().await.unwrap();
    let lease =
        timeout(Duration::from_secs(20), task).await.expect("granted after the outage").expect("joined").unwrap();
    assert!(lease.token() > held.token());
    lease.release().await.unwrap();
}

/// A create held up by a stalled link: the acquire sends it, the link holds every byte for
/// twice the lease, the request bound gives up on the answer, and once the link heals the node
/// is found holding (the lock is free). The lease counts from the request that found it
/// holding, not from that first create's send: counted from there it was spent before it was
/// granted (`dlock conformance`'s forever_survives_transient_errors saw such a lease lost at
/// once, whenever the holder's release reached the server before the waiter's held-up create).
#[tokio::test]
async fn a_grant_whose_create_was_held_up_starts_a_whole_lease() {
    // The client keeps a connection that answers nothing for 2/5 of the session (2.4 s): the
    // held bytes reach the server when the link heals, as after a stall TCP rides out.
    let fx = ZkFixture::with_session_timeout(Duration::from_secs(6)).await.unwrap();
    let (client, link) = fx.connect_linked().await.unwrap();
    let n = name("held-up-create");
    let ttl = Duration::from_millis(800);
    let o = opts(800).wait(Duration::from_secs(20)).request_timeout(Duration::from_millis(300));
    link.set_partitioned(true).await;
    let task = tokio::spawn({
        let (client, n) = (client.clone(), n.clone());
        async move { client.acquire(&n, &o).await }
    });
    sleep(ttl * 2).await;
    link.set_partitioned(false).await;
    let lease = task.await.expect("joined").expect("granted once the link heals");
    let left = lease.valid_until().saturating_duration_since(Instant::now());
    assert!(
        lease.is_valid() && left > ttl / 2,
        "a fresh grant was {} with {left:?} of its {ttl:?} left (lost: {:?})",
        if lease.is_valid() { "valid" } else { "already invalid" },
        lease.lost().reason()
    );
    lease.release().await.unwrap();
}
