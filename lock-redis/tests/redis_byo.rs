//! The conformance suite on Redis through the bring-your-own constructor: every client is a
//! `RedisBackend` over an application's own `redis::Client` (`RedisBackend::from_client`).

mod common;

use std::sync::Arc;

use common::RedisFixture;
use lock_conformance::proxy::FaultProxy;
use lock_conformance::LinkedClient;
use lock_core::LockError;
use lock_redis::RedisBackend;

/// A fresh server, with every client built from a `redis::Client` of the "application".
pub struct RedisClientFixture(RedisFixture);

impl RedisClientFixture {
    async fn start() -> Result<RedisClientFixture, LockError> {
        Ok(RedisClientFixture(RedisFixture::start().await?))
    }

    async fn backend_at(&self, url: &str) -> Result<RedisBackend, LockError> {
        let client = redis::Client::open(url).map_err(|e| LockError::config(format!("bad test URL: {e}")))?;
        RedisBackend::from_client(client, self.0.options.clone()).await
    }

    async fn backend(&self) -> Result<RedisBackend, LockError> {
        self.backend_at(self.0.server.url()).await
    }
}

lock_conformance::impl_fixture! {
    RedisClientFixture, backend: "redis", |f| {
        kinds_of: f.backend().await?,
        faults_of: f.0,
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let Some(addr) = self.0.server.addr() else { return Ok(None) };
        let proxy = FaultProxy::start(addr).await?;
        let client = self.backend_at(&format!("redis://{}", proxy.local_addr())).await?.lock();
        Ok(Some(LinkedClient { client: Arc::new(client), link: proxy }))
    }

    fn provenance(&self) -> String {
        format!("{} (through an application's redis::Client)", self.0.provenance())
    }
}

lock_conformance::conformance_tests!(redis_byo, || async { crate::RedisClientFixture::start().await });
