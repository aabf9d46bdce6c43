//! The conformance suite on ZooKeeper through the bring-your-own constructor: every client is
//! a lock client over an application's own `zookeeper_client::Client` session
//! (`lock_zk::from_client`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::ZkFixture;
use lock_conformance::proxy::FaultProxy;
use lock_conformance::{LinkedClient, ServerControl};
use lock_core::{LockError, LockName};
use lock_zk::ZkLock;

/// A fresh server, with every client built over a session of the "application".
pub struct ZkSessionFixture(ZkFixture);

impl ZkSessionFixture {
    async fn start() -> Result<ZkSessionFixture, LockError> {
        Ok(ZkSessionFixture(ZkFixture::start().await?))
    }

    async fn lock_at(&self, hosts: &str) -> Result<ZkLock, LockError> {
        let connect =
            zookeeper_client::Client::connector().with_session_timeout(self.0.options.session_timeout).connect(hosts);
        let session = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| LockError::unavailable("test", "no application session in 10s"))?
            .map_err(|e| LockError::unavailable_from("test", "no application session", e))?;
        lock_zk::from_client(session, &self.0.root, self.0.options.clone()).await
    }

    fn addr(&self) -> Result<std::net::SocketAddr, LockError> {
        self.0.server.addr().ok_or_else(|| LockError::config("the ZooKeeper test server's address is unknown"))
    }
}

lock_conformance::impl_fixture! {
    ZkSessionFixture, backend: "zookeeper", |f| {
        every_kind: f.lock_at(&f.addr()?.to_string()).await?,
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let proxy = FaultProxy::start(self.addr()?).await?;
        let client = self.lock_at(&proxy.local_addr().to_string()).await?;
        Ok(Some(LinkedClient { client: Arc::new(client), link: proxy }))
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        self.0.server()
    }

    fn base_ttl(&self) -> Duration {
        self.0.base_ttl()
    }

    fn expiry_bound(&self) -> Duration {
        self.0.expiry_bound()
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        self.0.delete_entry(name).await
    }

    async fn collect_idle(&self, name: &LockName) -> Result<bool, LockError> {
        self.0.collect_idle(name).await
    }

    fn provenance(&self) -> String {
        format!("{} (through an application's zookeeper_client::Client)", self.0.provenance())
    }

    /// The session belongs to the application: after it expires dlock answers `Unavailable`
    /// and cannot open a new one (`lock_zk::from_client`'s documented limit), while these cases
    /// cut the link or stop the server past the session timeout and expect a new session.
    fn not_applicable(&self, case: &str) -> Option<String> {
        const NEED_A_NEW_SESSION: &[&str] =
            &["fault_partition", "fault_server_restart", "fault_unavailable", "forever_survives_transient_errors"];
        NEED_A_NEW_SESSION.contains(&case).then(|| {
            "an application's own ZooKeeper session cannot be replaced after it expires (lock_zk::from_client); \
             the case needs a new session after a server or link outage longer than the session timeout"
                .to_owned()
        })
    }
}

lock_conformance::conformance_tests!(zookeeper_byo, || async { crate::ZkSessionFixture::start().await }, strict);
