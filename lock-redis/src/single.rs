//! The single-instance backend.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    Capabilities, FencingToken, LeaseModel, LeaseStore, LockError, LockName, OwnerId, ReleaseOutcome, RenewOutcome,
    TryLock, WakeMethod, WakeSubscription,
};

use crate::acl::Needs;
use crate::boot::Boot;
use crate::conn::Node;
use crate::pubsub::Notifier;
use crate::scripts::{Keys, ACQUIRE, RELEASE, RENEW};
use crate::RedisOptions;

pub(crate) const BACKEND: &str = "redis";

/// One Redis server (or a Redis Cluster node set reached through one endpoint) as a
/// [`LeaseStore`]; use it through [`RedisLock`](crate::RedisLock).
pub struct RedisStore {
    pub(crate) node: Node,
    pub(crate) notifier: Notifier,
    pub(crate) prefix: String,
    pub(crate) boot: Boot,
    max_ttl: Duration,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("server", &self.node.label).field("key_prefix", &self.prefix).finish()
    }
}

impl RedisStore {
    /// Opens the client, checks the server answers (bounded by `connect_timeout`) and that
    /// its user may run everything `needs` will run.
    pub(crate) async fn connect(url: &str, options: &RedisOptions, needs: Needs) -> Result<RedisStore, LockError> {
        options.validate()?;
        let ca = options.read_ca().await?;
        let client = crate::url::open_client_with_ca(url, ca.as_deref())?;
        let db = client.get_connection_info().redis_settings().db();
        let node = Node::new(client.clone(), url, BACKEND, options.connect_timeout, options.request_timeout);
        node.ping(options.connect_timeout + options.request_timeout).await?;
        crate::acl::check(&node, &options.key_prefix, db, needs).await?;
        let notifier =
            Notifier::new(vec![(client, node.label.clone())], options.connect_timeout, options.request_timeout);
        Ok(RedisStore {
            node,
            notifier,
            prefix: options.key_prefix.clone(),
            boot: Boot::new(&options.key_prefix, options.quiet_period()),
            max_ttl: options.max_ttl,
        })
    }

    fn keys(&self, name: &LockName) -> Keys {
        Keys::new(&self.prefix, name)
    }
}

/// The ttl in whole milliseconds (at least 1), as Redis `PX` wants it.
pub(crate) fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Parses `{flag, value}` from the acquire scripts.
pub(crate) fn parse_pair(backend: &str, reply: Vec<i64>) -> Result<(bool, i64), LockError> {
    match reply.as_slice() {
        [flag, value] => Ok((*flag == 1, *value)),
        other => Err(LockError::backend(backend, format!("unexpected reply from the acquire script: {other:?}"))),
    }
}

pub(crate) fn token_from(backend: &str, value: i64) -> Result<FencingToken, LockError> {
    u64::try_from(value)
        .ok()
        .filter(|v| *v > 0)
        .map(FencingToken)
        .ok_or_else(|| LockError::backend(backend, format!("the server returned an invalid fencing token {value}")))
}

/// A `PTTL` answer as a remaining lease (negative answers mean "no expiry" or "gone").
pub(crate) fn remaining_from(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

#[async_trait]
impl LeaseStore for RedisStore {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new();
        // Read-write locks and semaphores: `RedisRwLock` / `RedisSemaphore` (crate::kinds).
        caps.rw_lock = true;
        caps.semaphore = true;
        caps.fifo = false;
        caps.wake = WakeMethod::Notify;
        caps.lease_model = LeaseModel::PerLock;
        caps.durable_fencing = true;
        caps.durable_leases = false;
        caps.min_ttl = Duration::from_millis(10);
        caps.max_ttl = self.max_ttl;
        caps
    }

    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        let keys = self.keys(name);
        let owner = owner.to_hex();
        let ms = ttl_ms(ttl);
        let (keys, owner) = (&keys, &owner);
        let (boot, quiet) = (&self.boot, self.boot.quiet_ms());
        let reply: Vec<i64> = self
            .node
            .run_idempotent(self.node.request_timeout(), |c| async move {
                boot.with_marker(name, |marker| {
                    let mut c = c.clone();
                    async move {
                        ACQUIRE
                            .key(&keys.lock)
                            .key(&keys.fence)
                            .key(marker)
                            .arg(owner)
                            .arg(ms)
                            .arg(quiet)
                            .invoke_async(&mut c)
                            .await
                    }
                })
                .await
            })
            .await?;
        match parse_pair(BACKEND, reply)? {
            (true, token) => Ok(TryLock::Acquired { token: token_from(BACKEND, token)? }),
            (false, pttl) => Ok(TryLock::Held { remaining: remaining_from(pttl) }),
        }
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let keys = self.keys(name);
        let owner = owner.to_hex();
        let ms = ttl_ms(ttl);
        let (keys, owner) = (&keys, &owner);
        let renewed: i64 = self
            .node
            .run_idempotent(self.node.request_timeout(), |mut c| async move {
                RENEW.key(&keys.lock).arg(owner).arg(ms).invoke_async(&mut c).await
            })
            .await?;
        Ok(if renewed == 1 { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let keys = self.keys(name);
        let owner = owner.to_hex();
        let (keys, owner) = (&keys, &owner);
        let released: i64 = self
            .node
            .run(self.node.request_timeout(), |mut c| async move {
                RELEASE.key(&keys.lock).arg(owner).arg(&keys.channel).invoke_async(&mut c).await
            })
            .await?;
        Ok(if released == 1 { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.notifier.subscribe(&self.keys(name).channel).await
    }
}
