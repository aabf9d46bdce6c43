//! A fixture over the in-memory reference backend ([`lock_core::MemoryLock`]): one server,
//! one independent client per [`Fixture::client`](crate::Fixture::client) call, and its fault switches as a
//! [`ClientLink`] (partition) and a [`ServerControl`] (down, restart without persistence).
//! It is what the suite's own tests run, and a model for a new backend's fixture.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{LockError, LockName, MemoryLock};

use crate::{ClientLink, LinkedClient, ServerControl};

/// The in-memory backend as a [`Fixture`](crate::Fixture).
///
/// ```
/// use lock_conformance::{memory::MemoryFixture, Fixture};
/// assert_eq!(MemoryFixture::new().backend(), "memory");
/// ```
#[derive(Clone)]
pub struct MemoryFixture {
    server: MemoryLock,
    base_ttl: Duration,
}

impl Default for MemoryFixture {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryFixture {
    /// A fresh in-memory server. The base ttl is short (500 ms): nothing but the scheduler
    /// delays it.
    pub fn new() -> Self {
        MemoryFixture { server: MemoryLock::new(), base_ttl: Duration::from_millis(500) }
    }

    /// A fixture over an existing server: its clients are [`MemoryLock::client`]s of `server`
    /// (e.g. `MemoryLock::named(..)`, the server behind a `memory://name` URL).
    pub fn with_server(server: MemoryLock) -> Self {
        MemoryFixture { server, base_ttl: Duration::from_millis(500) }
    }

    /// Uses another base ttl.
    pub fn with_base_ttl(mut self, ttl: Duration) -> Self {
        self.base_ttl = ttl;
        self
    }
}

crate::impl_fixture! {
    MemoryFixture, backend: "memory", |f| {
        every_kind: f.server.client(),
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let client = self.server.client();
        Ok(Some(LinkedClient { client: Arc::new(client.clone()), link: Arc::new(MemoryLink(client)) }))
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        // Every case's leases last at most twice the base ttl.
        Some(Arc::new(MemoryServer {
            lock: self.server.clone(),
            quiet: self.base_ttl * 2,
            stopped: Default::default(),
        }))
    }

    fn base_ttl(&self) -> Duration {
        self.base_ttl
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        self.server.evict(name);
        Ok(true)
    }

    async fn collect_idle(&self, _name: &LockName) -> Result<bool, LockError> {
        self.server.collect_idle();
        Ok(true)
    }

    fn provenance(&self) -> String {
        "in-process memory server".into()
    }

    /// `queued_head_killed` needs a waiter in a second process sharing the server: an in-process
    /// server has none (`fifo_vanished_head` is the same departure within one process).
    fn not_applicable(&self, case: &str) -> Option<String> {
        (case == "queued_head_killed").then(|| {
            "the memory server lives in the test process: no waiter in another process can share it, so none \
             can be killed while queued"
                .to_owned()
        })
    }

    /// A dropped waiter's queue guard withdraws its place, or releases a grant it was handed,
    /// as the future drops: 100 ms by the contract, with room for a loaded machine.
    fn untaken_grant_bound(&self) -> Duration {
        (self.base_ttl / 2).max(Duration::from_millis(100))
    }
}

/// A memory client's partition switch. Latency and resets have no in-memory counterpart: the
/// first is ignored, the second is a no-op (there are no connections to cut).
struct MemoryLink(MemoryLock);

#[async_trait]
impl ClientLink for MemoryLink {
    async fn set_partitioned(&self, on: bool) {
        self.0.set_partitioned(on);
    }
    async fn set_latency(&self, _latency: Duration) {}
    async fn reset_connections(&self) {}
}

/// The memory server's down switch; `stop` also forgets every lease and counter, as a server
/// without persistence would. Having lost its state, it comes back only once every lease it
/// forgot has ended (`quiet` after the stop: a delayed restart), so it grants nothing while a
/// forgotten lease may still be believed (docs/contract.md §3).
struct MemoryServer {
    lock: MemoryLock,
    quiet: Duration,
    stopped: std::sync::Mutex<Option<tokio::time::Instant>>,
}

#[async_trait]
impl ServerControl for MemoryServer {
    async fn stop(&self) -> Result<(), LockError> {
        self.lock.set_server_down(true);
        self.lock.restart_server();
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = Some(tokio::time::Instant::now());
        Ok(())
    }
    async fn start(&self) -> Result<(), LockError> {
        let stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(at) = stopped {
            tokio::time::sleep_until(at + self.quiet).await;
        }
        self.lock.set_server_down(false);
        Ok(())
    }
    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        self.lock.set_server_down(paused);
        Ok(())
    }
    fn persistent(&self) -> bool {
        false
    }
}
