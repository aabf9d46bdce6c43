//! Unit tests of the in-memory backend.

use super::*;

fn opts() -> AcquireOptions {
    AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5))
}

#[tokio::test]
async fn readers_share_writers_wait_and_are_not_starved() {
    let lock = MemoryLock::new();
    let name = LockName::new("rw").expect("valid");
    let r1 = lock.acquire_read(&name, &opts()).await.expect("r1");
    let r2 = lock.acquire_read(&name, &opts()).await.expect("r2 shares");
    assert!(lock.try_acquire_write(&name, &opts()).await.expect("ok").is_none());
    let writer = tokio::spawn({
        let (l, n) = (lock.client(), name.clone());
        async move { l.acquire_write(&n, &opts()).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // A reader arriving after the queued writer waits behind it.
    assert!(lock.try_acquire_read(&name, &opts()).await.expect("ok").is_none());
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = writer.await.expect("joined").expect("writer granted");
    assert!(w.token() > r2.token());
    assert!(lock.try_acquire_read(&name, &opts()).await.expect("ok").is_none());
    w.release().await.expect("release");
    assert!(lock.try_acquire_read(&name, &opts()).await.expect("ok").is_some());
}

#[tokio::test]
async fn semaphore_counts_permits() {
    let lock = MemoryLock::new();
    let name = LockName::new("sem").expect("valid");
    let a = lock.acquire_permit(&name, 2, &opts()).await.expect("a");
    let b = lock.acquire_permit(&name, 2, &opts()).await.expect("b");
    assert!(b.token() > a.token());
    assert!(lock.try_acquire_permit(&name, 2, &opts()).await.expect("ok").is_none());
    assert!(matches!(lock.try_acquire_permit(&name, 3, &opts()).await, Err(LockError::InvalidOptions { .. })));
    assert!(matches!(lock.try_acquire_permit(&name, 0, &opts()).await, Err(LockError::InvalidOptions { .. })));
    a.release().await.expect("release");
    let c = lock.try_acquire_permit(&name, 2, &opts()).await.expect("ok").expect("a permit is free");
    assert!(c.token() > b.token());
    // The three kinds are separate name spaces.
    assert!(lock.try_acquire(&name, &opts()).await.expect("ok").is_some());
}

#[tokio::test]
async fn inspect_and_list_report_the_holder() {
    let lock = MemoryLock::new();
    let name = LockName::new("jobs/a").expect("valid");
    assert_eq!(lock.inspect(&name).await.expect("ok"), None);
    let who = crate::Holder::new("web-7").expect("valid").with_metadata("{}").expect("small");
    let lease = lock.acquire(&name, &opts().holder(who)).await.expect("free");
    let info = lock.inspect(&name).await.expect("ok").expect("held");
    assert_eq!((info.holder.as_deref(), info.metadata.as_deref()), (Some("web-7"), Some("{}")));
    assert_eq!((info.token, info.kind), (lease.token(), crate::LockKind::Exclusive));
    assert!(info.remaining.is_some_and(|r| r <= Duration::from_secs(10)));
    let other = lock.acquire(&LockName::new("jobs/b").expect("valid"), &opts()).await.expect("free");
    let _elsewhere = lock.acquire(&LockName::new("other").expect("valid"), &opts()).await.expect("free");
    let listed = lock.list("jobs/", 10).await.expect("ok");
    assert_eq!(listed.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["jobs/a", "jobs/b"]);
    assert_eq!(listed[1].holder, None);
    assert_eq!(lock.list("jobs/", 1).await.expect("ok").len(), 1);
    lease.release().await.expect("release");
    other.release().await.expect("release");
    assert_eq!(lock.inspect(&name).await.expect("ok"), None);
    assert!(lock.list("jobs/", 10).await.expect("ok").is_empty());
}

#[tokio::test]
async fn force_release_frees_any_holder_and_keeps_the_fence() {
    let lock = MemoryLock::new();
    let name = LockName::new("jobs/stuck").expect("valid");
    assert_eq!(lock.force_release(&name).await.expect("ok"), None);
    let lease = lock.acquire(&name, &opts()).await.expect("free");
    assert_eq!(lock.force_release(&name).await.expect("ok"), Some(lease.token()));
    assert_eq!(lock.inspect(&name).await.expect("ok"), None);
    assert!(matches!(lease.renew().await, Err(LockError::Lost { .. })), "the old holder's renewal fails");
    let next = lock.try_acquire(&name, &opts()).await.expect("ok").expect("free after the forced release");
    assert!(next.token() > lease.token());
}

#[tokio::test]
async fn tokens_keep_rising_after_idle_names_are_collected() {
    let lock = MemoryLock::new();
    let (a, b) = (LockName::new("a").expect("valid"), LockName::new("b").expect("valid"));
    let mut last = FencingToken(0);
    for _ in 0..3 {
        let l = lock.acquire(&a, &opts()).await.expect("free");
        last = l.token();
        l.release().await.expect("release");
    }
    let held = lock.acquire(&b, &opts()).await.expect("free");
    assert_eq!(lock.collect_idle(), 1, "only the idle name is collected");
    let again = lock.acquire(&a, &opts()).await.expect("free");
    assert!(again.token() > last, "{} after {} once the state was collected", again.token(), last);
    assert!(lock.inspect(&b).await.expect("ok").is_some(), "a held name is kept");
    held.release().await.expect("release");
}

/// A waiter dropped while a release grants it the lock: it holds it (and its dropped lease
/// gives it back at once) or it never got it; either way the lock is free for others right
/// after. Many races, both tasks on their own worker: the drop's clean-up once looked for a
/// grant before taking the entry's lock, and a grant sent in between kept the lock for the
/// gone waiter's ttl (the conformance case `dropped_wait_races_release` saw it once on a loaded
/// machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_while_granted_leaves_the_lock_free() {
    let lock = MemoryLock::new();
    let name = LockName::new("drop-race").expect("valid");
    let long = AcquireOptions::new(Duration::from_secs(60)).wait(Duration::from_secs(30));
    for race in 0..3000 {
        let held = lock.acquire(&name, &long).await.expect("the lock is free between races");
        let waiter = tokio::spawn({
            let (l, n, o) = (lock.client(), name.clone(), long.clone());
            async move { l.acquire(&n, &o).await }
        });
        while lock.with_entry(Family::Lock, &name, |e| e.queue.is_empty()) {
            tokio::task::yield_now().await;
        }
        let release = tokio::spawn(async move { held.release().await });
        waiter.abort();
        release.await.expect("joined").expect("released");
        drop(waiter.await);
        let free_by = Instant::now() + Duration::from_millis(500);
        loop {
            if let Some(l) = lock.try_acquire(&name, &opts()).await.expect("ok") {
                l.release().await.expect("release");
                break;
            }
            assert!(Instant::now() < free_by, "race {race}: the dropped waiter kept the lock");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
