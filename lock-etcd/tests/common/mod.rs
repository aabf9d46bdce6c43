//! The etcd test fixture: a fresh single-member etcd per test process (or `DLOCK_TEST_ETCD_URL`),
//! a unique key prefix per fixture, and clients behind a fault proxy for the network cases.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dlock_testkit::servers::etcd::EtcdServer;
use etcd_client::{GetOptions, SortOrder, SortTarget};
use lock_conformance::{LinkedClient, ServerControl};
use lock_core::{LockError, LockName};
use lock_etcd::{EtcdLock, EtcdOptions};

pub struct EtcdFixture {
    pub server: EtcdServer,
    pub prefix: String,
    pub options: EtcdOptions,
}

impl EtcdFixture {
    pub async fn start() -> Result<EtcdFixture, LockError> {
        let server = EtcdServer::start().await?;
        let options = EtcdOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(3),
            keep_alive: Duration::from_secs(1),
            ..EtcdOptions::default()
        };
        Ok(EtcdFixture { server, prefix: unique_prefix(), options })
    }

    pub async fn connect(&self) -> Result<EtcdLock, LockError> {
        lock_etcd::connect(&self.server.url_with_prefix(&self.prefix), self.options.clone()).await
    }

    /// A client of the server at `addr` (a proxy in front of it), under this fixture's prefix.
    async fn connect_at(&self, addr: SocketAddr) -> Result<EtcdLock, LockError> {
        lock_etcd::connect(&format!("etcd://{addr}/{}", self.prefix), self.options.clone()).await
    }

    /// A raw etcd client (an operator's `etcdctl`).
    pub async fn raw(&self) -> Result<etcd_client::Client, LockError> {
        let addr = self.server.addr().ok_or_else(|| LockError::config("no address of the etcd test server"))?;
        let connect = etcd_client::Client::connect([format!("http://{addr}")], None);
        tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| LockError::unavailable("test", "no raw etcd client in 10s"))?
            .map_err(|e| LockError::backend("etcd", e))
    }
}

/// What an operator's `etcdctl del` of the holder's key does: removes the oldest key of `name`'s
/// queue under `prefix` (the lease stays; revisions, the fencing tokens, only grow).
pub async fn delete_holder_key(raw: &mut etcd_client::Client, prefix: &str, name: &LockName) -> Result<(), LockError> {
    let queue = format!("{prefix}/lock/{}/", name.escaped());
    let oldest = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
    let got = raw.get(queue.as_str(), Some(oldest)).await.map_err(|e| LockError::backend("etcd", e))?;
    let Some(kv) = got.kvs().first() else {
        return Err(LockError::config(format!("no key under {queue} to delete")));
    };
    raw.delete(kv.key(), None).await.map_err(|e| LockError::backend("etcd", e))?;
    Ok(())
}

pub fn unique_prefix() -> String {
    format!("dlock-test/{}", dlock_testkit::unique_suffix())
}

lock_conformance::impl_fixture! {
    EtcdFixture, backend: "etcd", |f| {
        every_kind: f.connect().await?,
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        dlock_testkit::linked_client(self.server.addr(), |a| self.connect_at(a)).await
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        self.server.control()
    }

    fn expiry_bound(&self) -> Duration {
        // The server lease is the ttl rounded up to whole seconds (2 s for the base 1.5 s), and
        // the leader revokes expired leases on a 500 ms tick.
        Duration::from_secs(3)
    }

    fn untaken_grant_bound(&self) -> Duration {
        // A departing waiter revokes its lease at once (from a background task when its
        // future is dropped): the next waiter's watch fires, and it confirms with one read.
        Duration::from_millis(300)
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        if self.server.addr().is_none() {
            return Ok(false);
        }
        let mut raw = self.raw().await?;
        delete_holder_key(&mut raw, &self.prefix, name).await?;
        Ok(true)
    }

    async fn collect_idle(&self, _name: &LockName) -> Result<bool, LockError> {
        // Nothing to collect: an idle name has no keys at all, and tokens are the cluster's
        // revision, which is not per name.
        Ok(true)
    }

    fn provenance(&self) -> String {
        self.server.provenance()
    }
}
