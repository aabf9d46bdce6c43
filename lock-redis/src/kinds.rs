//! Read-write locks and semaphores on one Redis server (docs/contract.md §5.2, §5.3): the
//! scripts of each kind's grant, as a [`KindStore`] over the connection, pub/sub and boot
//! marker of the exclusive [`RedisStore`]. [`StoreRwLock`] / [`StoreSemaphore`] in lock-core
//! make the traits of it. The scripts are in [`crate::scripts`]; the key layout is in the
//! crate docs.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    Capabilities, KindAttempt, KindGrant, KindStore, LeaseStore, LockError, LockKind, LockName, OwnerId,
    ReleaseOutcome, RenewOutcome, StoreRwLock, StoreSemaphore, TryLock, WakeSubscription,
};
use redis::Script;

use crate::acl::Needs;
use crate::reply::{remaining_from, token_from, ttl_ms};
use crate::scripts::{
    RwKeys, SemKeys, RENEW, RW_READ, RW_READ_RELEASE, RW_WRITE, RW_WRITE_RELEASE, SEM_ACQUIRE, SEM_RELEASE, ZSET_RENEW,
};
use crate::single::{BACKEND, RESERVE_MS};
use crate::{RedisOptions, RedisStore};

/// A read-write lock client of one Redis server (docs/contract.md §5.2). Backend label `redis`.
/// Made by [`connect_rw`](crate::connect_rw).
pub type RedisRwLock = StoreRwLock<RedisKinds>;

/// A semaphore client of one Redis server (docs/contract.md §5.3). Backend label `redis`. Made
/// by [`connect_semaphore`](crate::connect_semaphore).
pub type RedisSemaphore = StoreSemaphore<RedisKinds>;

/// The read, write and permit grants of one Redis server as a [`KindStore`]: the kinds'
/// scripts over the connection, pub/sub and boot marker of a [`RedisStore`].
#[derive(Debug)]
pub struct RedisKinds {
    base: Arc<RedisStore>,
}

impl RedisKinds {
    pub(crate) fn new(base: Arc<RedisStore>) -> Arc<RedisKinds> {
        Arc::new(RedisKinds { base })
    }

    /// Runs `script` with `keys` and `args`; `idempotent` scripts are retried once on a fresh
    /// connection when the connection turns out to be dead.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        idempotent: bool,
    ) -> Result<T, LockError> {
        let node = &self.base.node;
        let call = |mut c| async move {
            let mut call = script.prepare_invoke();
            for key in keys {
                call.key(*key);
            }
            for arg in args {
                call.arg(*arg);
            }
            call.invoke_async(&mut c).await
        };
        if idempotent {
            node.run_idempotent(node.request_timeout(), call).await
        } else {
            node.run(node.request_timeout(), call).await
        }
    }

    /// Releases one grant (also a grant given back for want of replica acknowledgements, and
    /// the end of a wait without a grant: the release scripts also drop the owner's queue entry
    /// and reserve and wake the waiters that may now go in).
    async fn release_grant(
        &self,
        kind: LockKind,
        name: &LockName,
        owner: OwnerId,
    ) -> Result<ReleaseOutcome, LockError> {
        let (owner, reserve) = (owner.to_hex(), RESERVE_MS.to_string());
        let r = match kind {
            LockKind::Permit => {
                let k = SemKeys::new(&self.base.prefix, name);
                let keys = [&*k.holders, &k.tokens, &k.permits, &k.queue];
                self.invoke(&SEM_RELEASE, &keys, &[&owner, &reserve, &k.channel], false).await?
            }
            LockKind::Write => {
                let k = RwKeys::new(&self.base.prefix, name);
                let args = [&*owner, &reserve, &k.to_readers, &k.to_writers];
                self.invoke(&RW_WRITE_RELEASE, &[&k.writer, &k.queue, &k.readers, &k.tokens], &args, false).await?
            }
            _ => {
                let k = RwKeys::new(&self.base.prefix, name);
                let args = [&*owner, &reserve, &k.to_readers, &k.to_writers];
                self.invoke(&RW_READ_RELEASE, &[&k.readers, &k.tokens, &k.writer, &k.queue], &args, false).await?
            }
        };
        Ok(released(r))
    }

    /// Runs an acquire script: KEYS `keys` and the boot marker, ARGV `args`, the quiet period in
    /// ms and `tail`. Its `{flag, value}` reply, and how many replicas acknowledged a grant
    /// (`WAIT`, with `min_replicas_ack`; `i64::MAX` when not asked).
    async fn acquire(
        &self,
        script: &Script,
        name: &LockName,
        keys: &[&str],
        args: &[&str],
        tail: &[&str],
    ) -> Result<(i64, i64, i64), LockError> {
        let (node, boot) = (&self.base.node, &self.base.boot);
        let quiet = boot.quiet_ms().to_string();
        let quiet = quiet.as_str();
        let (acks, ack_ms) = (self.base.min_replicas_ack, self.base.ack_wait_ms);
        let (reply, acked): (Vec<i64>, i64) = node
            .run_idempotent(node.request_timeout(), |c| async move {
                let reply: Vec<i64> = boot
                    .with_marker(name, |marker| {
                        let mut c = c.clone();
                        async move {
                            let mut call = script.prepare_invoke();
                            for key in keys {
                                call.key(*key);
                            }
                            call.key(marker);
                            for arg in args {
                                call.arg(*arg);
                            }
                            call.arg(quiet);
                            for arg in tail {
                                call.arg(*arg);
                            }
                            call.invoke_async(&mut c).await
                        }
                    })
                    .await?;
                // WAIT on the connection that wrote, as the exclusive lock does (crate::single).
                let acked = if acks > 0 && reply.first() == Some(&1) {
                    c.clone().wait_replicas(keys[0], acks, ack_ms).await?
                } else {
                    i64::MAX
                };
                Ok((reply, acked))
            })
            .await?;
        match reply.as_slice() {
            [flag, value] => Ok((*flag, *value, acked)),
            other => Err(LockError::backend(BACKEND, format!("unexpected reply from the acquire script: {other:?}"))),
        }
    }
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
impl KindStore for RedisKinds {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = LeaseStore::capabilities(&*self.base);
        // Readers, writers and permits wait in the kinds' queues (crate::scripts::kinds_queue),
        // served in arrival order as the exclusive lock's waiters are.
        caps.fifo = true;
        caps
    }

    async fn try_lock(&self, a: KindAttempt<'_>) -> Result<TryLock, LockError> {
        let (owner, ms) = (a.owner.to_hex(), ttl_ms(a.ttl).to_string());
        // Only a waiting attempt takes a place in the queue; a single try must not.
        let reg = if a.waiting { self.base.registration(a.ttl) } else { 0 }.to_string();
        let reserve = RESERVE_MS.to_string();
        let wake = self.base.notifier.wake_channel();
        let (flag, value, acked) = match a.kind {
            LockKind::Permit => {
                let k = SemKeys::new(&self.base.prefix, a.name);
                let (keys, permits) = ([&*k.holders, &k.tokens, &k.permits, &k.queue, &k.fence], a.permits.to_string());
                let tail = [&*reserve, &k.channel, wake];
                self.acquire(&SEM_ACQUIRE, a.name, &keys, &[&owner, &ms, &permits, &reg], &tail).await?
            }
            kind => {
                let k = RwKeys::new(&self.base.prefix, a.name);
                let keys = [&*k.readers, &k.tokens, &k.writer, &k.queue, &k.fence];
                let tail = [&*reserve, &k.to_readers, &k.to_writers, wake];
                let script = if kind == LockKind::Write { &RW_WRITE } else { &RW_READ };
                self.acquire(script, a.name, &keys, &[&owner, &ms, &reg], &tail).await?
            }
        };
        match (flag, value) {
            (1, _) if acked < i64::from(self.base.min_replicas_ack) => {
                // Not on enough replicas: a failover now could forget this grant. Give it back.
                let _ = self.release_grant(a.kind, a.name, a.owner).await;
                Err(self.base.not_acknowledged(acked, "grant"))
            }
            (1, token) => Ok(TryLock::Acquired { token: token_from(BACKEND, token)? }),
            (-1, other) if a.kind == LockKind::Permit => Err(lock_core::permits_mismatch(a.name, other, a.permits)),
            (_, ms) => Ok(TryLock::Held { remaining: remaining_from(ms) }),
        }
    }

    async fn renew(&self, g: KindGrant<'_>, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let (kind, name) = (g.kind, g.name);
        let (owner, ms) = (g.owner.to_hex(), ttl_ms(ttl).to_string());
        let args = [&*owner, &ms];
        let (script, keys): (&Script, Vec<String>) = match kind {
            LockKind::Permit => {
                let k = SemKeys::new(&self.base.prefix, name);
                (&ZSET_RENEW, vec![k.holders, k.tokens, k.permits])
            }
            LockKind::Write => (&RENEW, vec![RwKeys::new(&self.base.prefix, name).writer]),
            _ => {
                let k = RwKeys::new(&self.base.prefix, name);
                (&ZSET_RENEW, vec![k.readers, k.tokens])
            }
        };
        // A renewal the promoted replica never got would be forgotten at a failover, as a grant
        // would (see crate::single). `WAIT` goes on the connection that wrote, in the same attempt:
        // a `WAIT` sent again alone, after a reconnect (to a new primary, say), would count
        // another connection's writes, not this renewal.
        let (acks, ack_ms) = (self.base.min_replicas_ack, self.base.ack_wait_ms);
        let (node, keys, args) = (&self.base.node, &keys, &args);
        let (r, acked): (i64, i64) = node
            .run_idempotent(node.request_timeout(), |mut c| async move {
                let mut call = script.prepare_invoke();
                for key in keys {
                    call.key(key);
                }
                for arg in args {
                    call.arg(*arg);
                }
                let r: i64 = call.invoke_async(&mut c).await?;
                let acked = if acks > 0 && r == 1 { c.wait_replicas(&keys[0], acks, ack_ms).await? } else { i64::MAX };
                Ok((r, acked))
            })
            .await?;
        if r == 1 && acked < i64::from(acks) {
            return Err(self.base.not_acknowledged(acked, "renewal"));
        }
        Ok(renewed(r))
    }

    /// A release reserves and wakes the waiters it lets in, each by `@<owner>` on its client's
    /// wake channel (crate::scripts::kinds_queue).
    async fn release(&self, g: KindGrant<'_>) -> Result<ReleaseOutcome, LockError> {
        self.release_grant(g.kind, g.name, g.owner).await
    }

    /// A wait that ended without a grant leaves the queue at once: the release script drops
    /// the owner's entry (owner-checked: and the grant, if one raced in) and lets the next in.
    async fn abandon(&self, g: KindGrant<'_>) -> Result<(), LockError> {
        self.release_grant(g.kind, g.name, g.owner).await.map(drop)
    }

    async fn subscribe(&self, kind: LockKind, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.base.notifier.subscribe(&channel(&self.base.prefix, kind, name), None).await
    }

    /// Releases wake the queue's grantable heads only (`@<owner>`), each on its client's own
    /// wake channel (the waiter queued as `<kind>:<owner>~<wake channel>`), so each waiter
    /// listens there for its own owner id and no other client hears its wake-up.
    async fn subscribe_waiter(
        &self,
        _kind: LockKind,
        _name: &LockName,
        owner: OwnerId,
    ) -> Result<Option<WakeSubscription>, LockError> {
        self.base.notifier.subscribe_waiter(&owner.to_hex()).await
    }
}

/// The channel that wakes waiters of `kind` of `name`.
fn channel(prefix: &str, kind: LockKind, name: &LockName) -> String {
    match kind {
        LockKind::Permit => SemKeys::new(prefix, name).channel,
        LockKind::Write => RwKeys::new(prefix, name).to_writers,
        _ => RwKeys::new(prefix, name).to_readers,
    }
}

/// Connects a read-write lock client; see [`crate::connect_rw`].
pub(crate) async fn connect_rw(url: &str, options: &RedisOptions) -> Result<RedisRwLock, LockError> {
    Ok(StoreRwLock::new(connect(url, options).await?))
}

/// Connects a semaphore client; see [`crate::connect_semaphore`].
pub(crate) async fn connect_semaphore(url: &str, options: &RedisOptions) -> Result<RedisSemaphore, LockError> {
    Ok(StoreSemaphore::new(connect(url, options).await?))
}

async fn connect(url: &str, options: &RedisOptions) -> Result<Arc<RedisKinds>, LockError> {
    Ok(RedisKinds::new(Arc::new(RedisStore::connect(url, options, Needs::Kinds).await?)))
}
