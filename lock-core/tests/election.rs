//! Election on the in-memory backend, which reports holders (`Capabilities::inspect`).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lock_core::backend::async_trait;
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, Election, Holder, Lease, LockError, LockName, LockService,
    MemoryLock,
};
use tokio::time::Instant;

fn election(lock: &MemoryLock, who: &str) -> Election {
    let opts = AcquireOptions::new(Duration::from_secs(2));
    Election::new(
        Arc::new(lock.client()),
        LockName::new("leader").expect("valid"),
        Holder::new(who).expect("valid"),
        opts,
    )
}

#[tokio::test]
async fn one_leader_at_a_time_epochs_rise_and_resign_hands_over_promptly() {
    let lock = MemoryLock::new();
    let candidates: Vec<Election> = (0..5).map(|i| election(&lock, &format!("c{i}"))).collect();
    let first = candidates[0].campaign().await.expect("elected");
    let mut waiting = Vec::new();
    for c in &candidates[1..] {
        let c = c.clone();
        waiting.push(tokio::spawn(async move { (c.campaign().await, Instant::now()) }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(waiting.iter().all(|w| !w.is_finished()), "a second leader was elected while the first led");
    let leader = candidates[3].leader().await.expect("inspect").expect("someone leads");
    assert_eq!(leader.holder.as_deref(), Some("c0"));
    assert_eq!(leader.token, first.epoch());
    let mut epoch = first.epoch();
    let mut resigned_at = Instant::now();
    first.resign().await.expect("resign");
    let mut remaining = waiting;
    while !remaining.is_empty() {
        let (done, _, rest) = futures::future::select_all(remaining).await;
        remaining = rest;
        let (leadership, at) = done.expect("joined");
        let leadership = leadership.expect("elected");
        assert!(at - resigned_at < Duration::from_millis(200), "hand-over took {:?}", at - resigned_at);
        assert!(leadership.epoch() > epoch, "epoch {} after {epoch}", leadership.epoch());
        epoch = leadership.epoch();
        tokio::time::sleep(Duration::from_millis(10)).await;
        resigned_at = Instant::now();
        leadership.resign().await.expect("resign");
    }
}

#[tokio::test]
async fn observers_see_every_change_of_leader() {
    let lock = MemoryLock::new();
    let watcher = election(&lock, "watcher").observe_every(Duration::from_millis(20));
    let mut changes = Box::pin(watcher.observe());
    assert_eq!(changes.next().await.expect("an item").expect("inspect"), None, "nobody leads yet");
    for who in ["a", "b"] {
        let leadership = election(&lock, who).campaign().await.expect("elected");
        let seen = tokio::time::timeout(Duration::from_millis(500), changes.next())
            .await
            .expect("the observer saw the new leader within 500 ms")
            .expect("an item")
            .expect("inspect");
        let seen = seen.expect("a leader");
        assert_eq!((seen.holder.as_deref(), seen.token), (Some(who), leadership.epoch()));
        leadership.resign().await.expect("resign");
        let gone = tokio::time::timeout(Duration::from_millis(500), changes.next()).await.expect("seen").expect("item");
        assert_eq!(gone.expect("inspect"), None);
    }
}

/// A lock that keeps the trait's default `inspect` (`Unsupported`).
struct NoInspect(MemoryLock);

#[async_trait]
impl DistributedLock for NoInspect {
    async fn try_acquire(&self, name: &LockName, o: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.0.try_acquire(name, o).await
    }
    async fn acquire(&self, name: &LockName, o: &AcquireOptions) -> Result<Lease, LockError> {
        self.0.acquire(name, o).await
    }
}

impl LockService for NoInspect {
    fn backend(&self) -> &str {
        "no-inspect"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
}

#[tokio::test]
async fn without_inspect_leader_and_observe_say_unsupported() {
    let e = Election::new(
        Arc::new(NoInspect(MemoryLock::new())),
        LockName::new("leader").expect("valid"),
        Holder::new("a").expect("valid"),
        AcquireOptions::new(Duration::from_secs(2)),
    );
    let leadership = e.campaign().await.expect("campaign needs no inspect");
    assert!(matches!(e.leader().await, Err(LockError::Unsupported { .. })));
    let items: Vec<_> = e.observe().collect().await;
    assert!(matches!(items.as_slice(), [Err(LockError::Unsupported { .. })]), "{items:?}");
    leadership.resign().await.expect("resign");
}
