//! ZooKeeper-specific behaviour of the read-write lock and the semaphore (docs/contract.md §5.2,
//! §5.3) on a real server: herd-free wake-ups, cancel-safety (the exclusive lock's waits' too),
//! session expiry, lost replies, agreement on the number of permits.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lock_conformance::{ClientLink, Fixture};
use lock_core::{DistributedLock, LockError};
use tokio::time::{sleep, timeout, Instant};

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

/// A wait of every kind — exclusive, read, write, permit — that is cancelled or runs out of its
/// own wait leaves no node: only the holder's is left, and nothing holds up the next waiter.
#[tokio::test]
async fn cancelled_and_timed_out_waits_leave_no_node() {
    use lock_core::{DistributedRwLock, DistributedSemaphore};
    let (fx, holder, waiter) = two_clients().await;

    let n = name("cancel");
    let lease = holder.acquire(&n, &opts(3000)).await.unwrap();
    cancelled_waits_leave_no_node(async |o| waiter.acquire(&n, &o).await, async || nodes(&fx, &holder, &n).await.len())
        .await;
    lease.release().await.unwrap();
    assert!(waiter.try_acquire(&n, &opts(3000)).await.unwrap().is_some(), "nothing queued ahead");

    // A writer holds: readers and writers queue behind it.
    let n = name("cancel-kinds");
    let rw_queued = async || rw_nodes(&fx, &holder, &n).await.len();
    let w = holder.acquire_write(&n, &opts(3000)).await.unwrap();
    cancelled_waits_leave_no_node(async |o| waiter.acquire_read(&n, &o).await, rw_queued).await;
    cancelled_waits_leave_no_node(async |o| waiter.acquire_write(&n, &o).await, rw_queued).await;
    w.release().await.unwrap();
    let r = waiter.try_acquire_read(&n, &opts(3000)).await.unwrap().expect("nothing queued ahead of a reader");
    r.release().await.unwrap();

    // A full semaphore: permit waits, and one rejected for another count.
    let p = holder.acquire_permit(&n, 1, &opts(3000)).await.unwrap();
    cancelled_waits_leave_no_node(
        async |o| waiter.acquire_permit(&n, 1, &o).await,
        async || sem_nodes(&fx, &holder, &n).await.len(),
    )
    .await;
    let err = waiter.acquire_permit(&n, 2, &opts(3000).wait(Duration::from_millis(300))).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidOptions { .. }), "{err}");
    p.release().await.unwrap();
    let q = waiter.try_acquire_permit(&n, 1, &opts(3000)).await.unwrap().expect("nothing queued ahead");
    q.release().await.unwrap();
}

#[tokio::test]
async fn session_expiry_of_a_reader_frees_a_waiting_writer() {
    use lock_core::DistributedRwLock;
    let (fx, (reader, link), other_reader) = linked_and_direct().await;
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

    let GaveWay { granted: w, lost_after, granted_after } =
        partition_until_granted(&*link, lost, SESSION_TIMEOUT, waiting, fx.expiry_bound() * 3).await;
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
    // A session long enough that a grant made through 200 ms round trips and a reset link is
    // still valid (about half of the session, lock-zk's `server_bound`) when it is released.
    let fx = ZkFixture::with_session_timeout(Duration::from_secs(4)).await.unwrap();
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
async fn busy_try_acquires_of_every_kind_leave_no_node_and_wake_nobody() {
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

    // A first busy try creates its node at the tail (one round trip when the lock is free) and
    // deletes it at once: behind every waiter, so nobody wakes, and nothing is left.
    assert!(prober.try_acquire_read(&n, &opts(3000)).await.unwrap().is_none());
    assert!(prober.try_acquire_write(&n, &opts(3000)).await.unwrap().is_none());
    assert!(prober.try_acquire_permit(&n, 1, &opts(3000)).await.unwrap().is_none());
    eventually(Duration::from_secs(3), "the busy tries' nodes deleted", || async {
        rw_nodes(&fx, &holder, &n).await.len() == 2 && sem_nodes(&fx, &holder, &n).await.len() == 2
    })
    .await;
    // A client that found the lock busy looks first the next time: no node at all. A child
    // watch on both parents would see any node created and deleted by a busy try.
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
    let GaveWay { granted: got, lost_after, granted_after } =
        partition_until_granted(&*link, lost, SESSION_TIMEOUT, waiting, fx.expiry_bound() * 3).await;
    eprintln!("partitioned permit holder: lost after {lost_after:?}, waiter granted after {granted_after:?}");
    assert!(lost_after < granted_after);
    assert!(kept.is_valid(), "the other holder keeps its permit");
    assert!(got.token() > doomed.token() && got.token() > kept.token());
    assert_eq!(waiter.watch_events(), 1, "the waiter woke once, when the expired node went");
    link.set_partitioned(false).await;
    got.release().await.unwrap();
    kept.release().await.unwrap();
}
