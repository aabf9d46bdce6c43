//! Read-write locks and semaphores on one Redis server (docs/contract.md §5.2, §5.3): the
//! scripts of each kind's grant, as a [`KindStore`] over the connection, pub/sub and boot
//! marker of the exclusive [`RedisStore`]. [`StoreRwLock`] / [`StoreSemaphore`] in lock-core
//! make the traits of it. The scripts are in [`crate::scripts`]; the key layout is in the
//! crate docs.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    backend::{
        KindAttempt, KindGrant, KindStore, LeaseStore, ReleaseOutcome, RenewOutcome, StoreRwLock, StoreSemaphore,
        TryLock, WakeSubscription,
    },
    Capabilities, LockError, LockKind, LockName, OwnerId,
};

use crate::acl::Needs;
use crate::reply::{remaining_from, token_from, too_many_waiters, ttl_ms};
use crate::scripts::{
    LeaseEnd, Renew, RwAcquire, RwKeys, RwRelease, SemAcquire, SemKeys, SemRelease, Side, Terms, ZsetHolder, ZsetRenew,
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

    /// Releases one grant (also a grant given back for want of replica acknowledgements, and
    /// the end of a wait without a grant: the release scripts also drop the owner's queue entry
    /// and reserve and wake the waiters that may now go in). Sent once: a retry could not tell
    /// "released" from "not ours".
    async fn release_grant(
        &self,
        kind: LockKind,
        name: &LockName,
        owner: OwnerId,
    ) -> Result<ReleaseOutcome, LockError> {
        let (node, prefix, owner) = (&self.base.node, &self.base.prefix, owner.to_hex());
        let (owner, reserve_ms) = (owner.as_str(), RESERVE_MS);
        let r: i64 = match kind {
            LockKind::Permit => {
                let keys = SemKeys::new(prefix, name);
                let call = SemRelease { keys: &keys, owner, reserve_ms };
                node.run(node.request_timeout(), |mut c| async move { call.invoke(&mut c).await }).await?
            }
            side => {
                let keys = RwKeys::new(prefix, name);
                let call = RwRelease { side: side_of(side), keys: &keys, owner, reserve_ms };
                node.run(node.request_timeout(), |mut c| async move { call.invoke(&mut c).await }).await?
            }
        };
        Ok(released(r))
    }
}

/// The read-write lock's side of `kind` (every kind but a permit).
fn side_of(kind: LockKind) -> Side {
    if kind == LockKind::Write {
        Side::Write
    } else {
        Side::Read
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
        let (base, owner, ttl_ms) = (&self.base, a.owner.to_hex(), ttl_ms(a.ttl));
        // Only a waiting attempt takes a place in the queue; a single try must not.
        let registration_ms = if a.waiting { base.registration(a.ttl) } else { 0 };
        let terms = Terms {
            owner: &owner,
            ttl_ms,
            quiet_ms: base.boot.quiet_ms(),
            registration_ms,
            reserve_ms: RESERVE_MS,
            wake: base.notifier.wake_channel(),
            max_waiters: base.max_waiters,
        };
        let (reply, acked) = match a.kind {
            LockKind::Permit => {
                let keys = SemKeys::new(&base.prefix, a.name);
                let call = SemAcquire { keys: &keys, permits: a.permits, terms };
                base.acquire_acked(a.name, &keys.holders, |m, mut c| async move { call.invoke(&m, &mut c).await })
                    .await?
            }
            kind => {
                let keys = RwKeys::new(&base.prefix, a.name);
                let call = RwAcquire { side: side_of(kind), keys: &keys, terms };
                base.acquire_acked(a.name, &keys.readers, |m, mut c| async move { call.invoke(&m, &mut c).await })
                    .await?
            }
        };
        let (flag, value) = match reply.as_slice() {
            [flag, value] => (*flag, *value),
            other => {
                return Err(LockError::backend(BACKEND, format!("unexpected reply from the acquire script: {other:?}")))
            }
        };
        match (flag, value) {
            (1, _) if acked < i64::from(self.base.min_replicas_ack) => {
                // Not on enough replicas: a failover now could forget this grant. Give it back.
                let _ = self.release_grant(a.kind, a.name, a.owner).await;
                Err(self.base.not_acknowledged(acked, "grant"))
            }
            (1, token) => Ok(TryLock::Acquired { token: token_from(BACKEND, token)? }),
            (2, ms) => {
                let remaining = remaining_from(ms).unwrap_or_default();
                self.base.boot.announce_quiet(remaining);
                Ok(TryLock::Quiet { remaining })
            }
            (3, cap) => Err(too_many_waiters(a.name, cap)),
            (-1, other) if a.kind == LockKind::Permit => {
                Err(lock_core::backend::permits_mismatch(a.name, other, a.permits))
            }
            (_, ms) => Ok(TryLock::Held { remaining: remaining_from(ms) }),
        }
    }

    /// A renewal the promoted replica never got would be forgotten at a failover, as a grant
    /// would: with `min_replicas_ack` it waits for the replicas (`RedisStore::renew_acked`).
    async fn renew(&self, g: KindGrant<'_>, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let (base, owner, ttl_ms) = (&self.base, g.owner.to_hex(), ttl_ms(ttl));
        let owner = owner.as_str();
        let renewed = match g.kind {
            LockKind::Permit => {
                let keys = SemKeys::new(&base.prefix, g.name);
                let call = ZsetRenew { holder: ZsetHolder::Permit(&keys), owner, ttl_ms };
                base.renew_acked(&keys.holders, |mut c| async move { call.invoke(&mut c).await }).await?
            }
            LockKind::Write => {
                let keys = RwKeys::new(&base.prefix, g.name);
                let call = Renew { lock: &keys.writer, owner, ttl_ms, end: LeaseEnd::Px };
                base.renew_acked(&keys.writer, |mut c| async move { call.invoke(&mut c).await }).await?
            }
            _ => {
                let keys = RwKeys::new(&base.prefix, g.name);
                let call = ZsetRenew { holder: ZsetHolder::Reader(&keys), owner, ttl_ms };
                base.renew_acked(&keys.readers, |mut c| async move { call.invoke(&mut c).await }).await?
            }
        };
        Ok(if renewed { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
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
