//! Read-write locks and semaphores on one Redis server (docs/contract.md §5.2, §5.3).
//!
//! Each side (read, write, permit) is a small [`LeaseStore`] over the connection, pub/sub and
//! scripts of the exclusive [`RedisStore`], so [`StoreLock`] gives waiting, back-off, time-outs,
//! cancel-safety and the lease watchdog. The scripts are in [`crate::scripts`]; the key layout
//! is in the crate docs.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, DistributedRwLock, DistributedSemaphore, Lease, LeaseStore,
    LockError, LockName, OwnerId, ReleaseOutcome, RenewOutcome, StoreLock, TryLock, WakeSubscription,
};

use crate::acl::Needs;
use crate::scripts::{
    RwKeys, SemKeys, RENEW, RW_READ, RW_WRITE, RW_WRITE_RELEASE, SEM_ACQUIRE, ZSET_RELEASE, ZSET_RENEW,
};
use crate::single::{parse_pair, remaining_from, token_from, ttl_ms, BACKEND};
use crate::{RedisOptions, RedisStore};

/// How long a refused writer's claim holds back new readers: long enough to outlast the
/// writer's re-try interval (a third of it, see [`WriteSide::try_lock`]), short enough that a
/// writer that vanished (a crashed process) delays readers only briefly. A write wait that
/// ends without a grant in a live process withdraws its claim at once (`LeaseStore::abandon`).
pub(crate) fn writer_claim(ttl: Duration) -> Duration {
    (ttl / 2).clamp(Duration::from_millis(300), Duration::from_secs(2))
}

/// The read side of a read-write lock.
pub(crate) struct ReadSide {
    base: Arc<RedisStore>,
}

/// The write side of a read-write lock.
pub(crate) struct WriteSide {
    base: Arc<RedisStore>,
}

/// One semaphore size: every call names its `permits`, so each call gets a (cheap) side.
pub(crate) struct PermitSide {
    base: Arc<RedisStore>,
    permits: u32,
}

impl std::fmt::Debug for ReadSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadSide").field("store", &self.base).finish()
    }
}

impl std::fmt::Debug for WriteSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteSide").field("store", &self.base).finish()
    }
}

impl std::fmt::Debug for PermitSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitSide").field("store", &self.base).field("permits", &self.permits).finish()
    }
}

fn reply_pair(reply: Vec<i64>) -> Result<(i64, i64), LockError> {
    match reply.as_slice() {
        [flag, value] => Ok((*flag, *value)),
        other => Err(LockError::backend(BACKEND, format!("unexpected reply from the acquire script: {other:?}"))),
    }
}

/// Owner-checked renewal of a member of a holders sorted set (readers, permits): the same
/// script for both kinds, given their keys.
async fn zset_renew(
    base: &RedisStore,
    keys: &[&str],
    owner: OwnerId,
    ttl: Duration,
) -> Result<RenewOutcome, LockError> {
    let (owner, ms, node) = (&owner.to_hex(), ttl_ms(ttl), &base.node);
    let r: i64 = node
        .run_idempotent(node.request_timeout(), |mut c| async move {
            let mut call = ZSET_RENEW.prepare_invoke();
            for key in keys {
                call.key(*key);
            }
            call.arg(owner).arg(ms).invoke_async(&mut c).await
        })
        .await?;
    Ok(renewed(r))
}

/// Owner-checked release of a member of a holders sorted set; publishes `one` on `channel` (one waiter
/// per client wakes): always when `wake_all` is "0", only when the set is left empty when it is "1".
async fn zset_release(
    base: &RedisStore,
    keys: &[&str],
    owner: OwnerId,
    channel: &str,
    wake_all: &str,
) -> Result<ReleaseOutcome, LockError> {
    let (owner, node) = (&owner.to_hex(), &base.node);
    let r: i64 = node
        .run(node.request_timeout(), |mut c| async move {
            let mut call = ZSET_RELEASE.prepare_invoke();
            for key in keys {
                call.key(*key);
            }
            call.arg(owner).arg(channel).arg(wake_all).invoke_async(&mut c).await
        })
        .await?;
    Ok(released(r))
}

fn renewed(r: i64) -> RenewOutcome {
    if r == 1 {
        RenewOutcome::Renewed
    } else {
        RenewOutcome::NotOwner
    }
}

fn released(r: i64) -> ReleaseOutcome {
    if r == 1 {
        ReleaseOutcome::Released
    } else {
        ReleaseOutcome::NotOwner
    }
}

#[async_trait]
impl LeaseStore for ReadSide {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.base.capabilities()
    }

    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        let (k, owner, ms) = (&RwKeys::new(&self.base.prefix, name), &owner.to_hex(), ttl_ms(ttl));
        let node = &self.base.node;
        let boot = &self.base.boot;
        let reply: Vec<i64> = node
            .run_idempotent(node.request_timeout(), |c| async move {
                boot.with_marker(name, |marker| {
                    let mut c = c.clone();
                    async move {
                        RW_READ
                            .key(&k.readers)
                            .key(&k.tokens)
                            .key(&k.writer)
                            .key(&k.waiting)
                            .key(&k.fence)
                            .key(marker)
                            .arg(owner)
                            .arg(ms)
                            .arg(boot.quiet_ms())
                            .invoke_async(&mut c)
                            .await
                    }
                })
                .await
            })
            .await?;
        match parse_pair(BACKEND, reply)? {
            (true, token) => Ok(TryLock::Acquired { token: token_from(BACKEND, token)? }),
            (false, ms) => Ok(TryLock::Held { remaining: remaining_from(ms) }),
        }
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let k = RwKeys::new(&self.base.prefix, name);
        zset_renew(&self.base, &[&k.readers, &k.tokens], owner, ttl).await
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let k = RwKeys::new(&self.base.prefix, name);
        // The last reader out wakes a waiting writer.
        zset_release(&self.base, &[&k.readers, &k.tokens], owner, &k.to_writers, "1").await
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.base.notifier.subscribe(&RwKeys::new(&self.base.prefix, name).to_readers).await
    }
}

impl WriteSide {
    /// One write attempt; `claiming` says whether a refusal leaves a writer's claim.
    async fn attempt(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
        claiming: bool,
    ) -> Result<TryLock, LockError> {
        let (k, owner, ms) = (&RwKeys::new(&self.base.prefix, name), &owner.to_hex(), ttl_ms(ttl));
        let claim = writer_claim(ttl);
        let claim_ms = if claiming { ttl_ms(claim) } else { 0 };
        let node = &self.base.node;
        let boot = &self.base.boot;
        let reply: Vec<i64> = node
            .run_idempotent(node.request_timeout(), |c| async move {
                boot.with_marker(name, |marker| {
                    let mut c = c.clone();
                    async move {
                        RW_WRITE
                            .key(&k.readers)
                            .key(&k.tokens)
                            .key(&k.writer)
                            .key(&k.waiting)
                            .key(&k.fence)
                            .key(marker)
                            .arg(owner)
                            .arg(ms)
                            .arg(claim_ms)
                            .arg(boot.quiet_ms())
                            .invoke_async(&mut c)
                            .await
                    }
                })
                .await
            })
            .await?;
        match parse_pair(BACKEND, reply)? {
            (true, token) => Ok(TryLock::Acquired { token: token_from(BACKEND, token)? }),
            // Re-try before the claim lapses, so waiting readers stay held back.
            (false, ms) => {
                Ok(TryLock::Held { remaining: Some(remaining_from(ms).map_or(claim / 3, |r| r.min(claim / 3))) })
            }
        }
    }
}

#[async_trait]
impl LeaseStore for WriteSide {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.base.capabilities()
    }

    /// A single try does not wait, so it leaves no claim that would hold readers back.
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.attempt(name, owner, ttl, false).await
    }

    /// A waiting writer's refused attempt leaves a short claim that holds back new readers.
    async fn try_lock_waiting(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.attempt(name, owner, ttl, true).await
    }

    /// A write wait that ended without a grant withdraws its claim at once (owner-checked: the
    /// grant too, if one raced in) instead of holding readers back until the claim lapses.
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.release(name, owner).await.map(|_| ())
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let (k, owner, ms) = (&RwKeys::new(&self.base.prefix, name), &owner.to_hex(), ttl_ms(ttl));
        let node = &self.base.node;
        let r: i64 = node
            .run_idempotent(node.request_timeout(), |mut c| async move {
                RENEW.key(&k.writer).arg(owner).arg(ms).invoke_async(&mut c).await
            })
            .await?;
        Ok(renewed(r))
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let (k, owner) = (&RwKeys::new(&self.base.prefix, name), &owner.to_hex());
        let node = &self.base.node;
        let r: i64 = node
            .run(node.request_timeout(), |mut c| async move {
                RW_WRITE_RELEASE
                    .key(&k.writer)
                    .key(&k.waiting)
                    .arg(owner)
                    .arg(&k.to_readers)
                    .arg(&k.to_writers)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(released(r))
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.base.notifier.subscribe(&RwKeys::new(&self.base.prefix, name).to_writers).await
    }
}

#[async_trait]
impl LeaseStore for PermitSide {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.base.capabilities()
    }

    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        let (k, owner, ms) = (&SemKeys::new(&self.base.prefix, name), &owner.to_hex(), ttl_ms(ttl));
        let permits = self.permits;
        let node = &self.base.node;
        let boot = &self.base.boot;
        let reply: Vec<i64> = node
            .run_idempotent(node.request_timeout(), |c| async move {
                boot.with_marker(name, |marker| {
                    let mut c = c.clone();
                    async move {
                        SEM_ACQUIRE
                            .key(&k.holders)
                            .key(&k.tokens)
                            .key(&k.permits)
                            .key(&k.fence)
                            .key(marker)
                            .arg(owner)
                            .arg(ms)
                            .arg(permits)
                            .arg(boot.quiet_ms())
                            .invoke_async(&mut c)
                            .await
                    }
                })
                .await
            })
            .await?;
        match reply_pair(reply)? {
            (1, token) => Ok(TryLock::Acquired { token: token_from(BACKEND, token)? }),
            (-1, other) => Err(LockError::invalid_options(format!(
                "semaphore {name} is in use with {other} permits, not {permits}; every user of a semaphore must ask \
                 for the same number of permits"
            ))),
            (_, ms) => Ok(TryLock::Held { remaining: remaining_from(ms) }),
        }
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let k = SemKeys::new(&self.base.prefix, name);
        zset_renew(&self.base, &[&k.holders, &k.tokens, &k.permits], owner, ttl).await
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let k = SemKeys::new(&self.base.prefix, name);
        zset_release(&self.base, &[&k.holders, &k.tokens, &k.permits], owner, &k.channel, "0").await
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.base.notifier.subscribe(&SemKeys::new(&self.base.prefix, name).channel).await
    }
}

/// A read-write lock client of one Redis server (docs/contract.md §5.2). Backend label `redis`. Made by
/// [`connect_rw`](crate::connect_rw).
///
/// Many readers or one writer. A writer that is refused leaves a short claim that makes new
/// readers wait, so readers arriving after a waiting writer do not starve it; waiters are
/// otherwise not served in arrival order (`fifo` is false). Every grant, read or write, has its
/// own lease and a fencing token above every token issued before for this read-write lock.
#[derive(Clone)]
pub struct RedisRwLock {
    read: StoreLock<ReadSide>,
    write: StoreLock<WriteSide>,
}

impl std::fmt::Debug for RedisRwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRwLock").field("store", &self.read.store().base).finish()
    }
}

impl RedisRwLock {
    pub(crate) fn new(base: Arc<RedisStore>) -> Self {
        RedisRwLock {
            read: StoreLock::new(ReadSide { base: Arc::clone(&base) }),
            write: StoreLock::new(WriteSide { base }),
        }
    }

    /// The read and the write side as [`LeaseStore`]s (labels `"read"`, `"write"`), for tests
    /// and tools that drive the store directly.
    pub fn lease_stores(&self) -> [(&'static str, Arc<dyn LeaseStore>); 2] {
        [("read", Arc::clone(self.read.store()) as _), ("write", Arc::clone(self.write.store()) as _)]
    }
}

#[async_trait]
impl DistributedRwLock for RedisRwLock {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.read.capabilities()
    }

    async fn try_acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.read.try_acquire(name, options).await
    }

    async fn acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.read.acquire(name, options).await
    }

    async fn try_acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.write.try_acquire(name, options).await
    }

    async fn acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.write.acquire(name, options).await
    }
}

/// A semaphore client of one Redis server (docs/contract.md §5.3). Backend label `redis`. Made by
/// [`connect_semaphore`](crate::connect_semaphore).
///
/// Up to `permits` holders of one name at once, each with its own lease and a fencing token
/// above every token issued before for this semaphore. The number of permits is stored with
/// the semaphore while anyone holds it: a caller asking for a different number gets
/// `InvalidOptions`.
#[derive(Clone)]
pub struct RedisSemaphore {
    base: Arc<RedisStore>,
}

impl std::fmt::Debug for RedisSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSemaphore").field("store", &self.base).finish()
    }
}

impl RedisSemaphore {
    pub(crate) fn new(base: Arc<RedisStore>) -> Self {
        RedisSemaphore { base }
    }

    /// The side of this semaphore with `permits` permits as a [`LeaseStore`], for tests and
    /// tools that drive the store directly.
    pub fn lease_store(&self, permits: u32) -> Result<Arc<dyn LeaseStore>, LockError> {
        Ok(Arc::clone(self.side(permits)?.store()) as _)
    }

    fn side(&self, permits: u32) -> Result<StoreLock<PermitSide>, LockError> {
        if permits == 0 {
            return Err(LockError::invalid_options("a semaphore needs at least one permit; ask for permits >= 1"));
        }
        Ok(StoreLock::new(PermitSide { base: Arc::clone(&self.base), permits }))
    }
}

#[async_trait]
impl DistributedSemaphore for RedisSemaphore {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.base.capabilities()
    }

    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        self.side(permits)?.try_acquire(name, options).await
    }

    async fn acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        self.side(permits)?.acquire(name, options).await
    }
}

/// Connects a read-write lock client; see [`crate::connect_rw`].
pub(crate) async fn connect_rw(url: &str, options: &RedisOptions) -> Result<RedisRwLock, LockError> {
    Ok(RedisRwLock::new(Arc::new(RedisStore::connect(url, options, Needs::Kinds).await?)))
}

/// Connects a semaphore client; see [`crate::connect_semaphore`].
pub(crate) async fn connect_semaphore(url: &str, options: &RedisOptions) -> Result<RedisSemaphore, LockError> {
    Ok(RedisSemaphore::new(Arc::new(RedisStore::connect(url, options, Needs::Kinds).await?)))
}
