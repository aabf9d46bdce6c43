//! One Redis server as seen by a client: a multiplexed command connection that is replaced
//! after any connection-level failure, with every wait bounded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use lock_core::LockError;
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use tokio::time::timeout;

use crate::url::redact;

/// A server and its shared command connection.
pub(crate) struct Node {
    client: redis::Client,
    /// The URL with its password hidden: the only form that reaches logs and errors.
    pub(crate) label: String,
    backend: &'static str,
    connect_timeout: Duration,
    request_timeout: Duration,
    slot: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Serialises reconnects so a burst of failing commands opens one connection, not many.
    connecting: tokio::sync::Mutex<()>,
    generation: AtomicU64,
}

impl Node {
    pub(crate) fn new(
        client: redis::Client,
        url: &str,
        backend: &'static str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Self {
        Node {
            client,
            label: redact(url),
            backend,
            connect_timeout,
            request_timeout,
            slot: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
        }
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The live connection, opening one (bounded by the connect timeout) if there is none.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection), LockError> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _guard = timeout(self.connect_timeout, self.connecting.lock()).await.map_err(|_| {
            LockError::unavailable(
                self.backend,
                format!("connecting to {} took longer than {:?}", self.label, self.connect_timeout),
            )
        })?;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.request_timeout));
        let conn = match timeout(
            self.connect_timeout,
            self.client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(self.map_error(e, "cannot connect to")),
            Err(_) => {
                return Err(LockError::unavailable(
                    self.backend,
                    format!("no connection to {} within the connect timeout {:?}", self.label, self.connect_timeout),
                ))
            }
        };
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some((generation, conn.clone()));
        tracing::debug!(server = %self.label, "connected");
        Ok((generation, conn))
    }

    /// Drops the connection of `generation` (not a newer one) so the next command reconnects.
    /// A connection whose request timed out may still carry the stale request; replacing it
    /// keeps every later reply unambiguous.
    fn discard(&self, generation: u64) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
            *slot = None;
        }
    }

    /// Opens the connection now and checks it answers (PING).
    pub(crate) async fn ping(&self, within: Duration) -> Result<(), LockError> {
        let cmd = redis::cmd("PING");
        let _: String = self.run(within, |mut c| async move { cmd.query_async(&mut c).await }).await?;
        Ok(())
    }

    /// Runs one command (or script invocation) on the shared connection, bounded by `within`
    /// (and by the request timeout). Connection-level failures and timeouts are `Unavailable`.
    pub(crate) async fn run<T, F, Fut>(&self, within: Duration, f: F) -> Result<T, LockError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let bound = within.min(self.request_timeout);
        let work = async {
            let (generation, conn) = self.connection().await?;
            match f(conn).await {
                Ok(v) => Ok(v),
                Err(e) => {
                    if e.is_io_error() || e.is_unrecoverable_error() || e.is_timeout() || e.is_connection_dropped() {
                        self.discard(generation);
                    }
                    Err(self.map_error(e, "request failed on"))
                }
            }
        };
        match timeout(bound, work).await {
            Ok(r) => r,
            Err(_) => {
                if let Some((g, _)) = self.current() {
                    self.discard(g);
                }
                Err(LockError::unavailable(self.backend, format!("{} did not answer within {bound:?}", self.label)))
            }
        }
    }

    fn map_error(&self, e: redis::RedisError, what: &str) -> LockError {
        let message = hide_password(&e.to_string(), &self.client);
        if e.kind() == redis::ErrorKind::AuthenticationFailed
            || e.code().is_some_and(|c| matches!(c, "NOAUTH" | "WRONGPASS" | "NOPERM"))
        {
            return LockError::config(format!(
                "{what} {}: authentication failed ({message}); check the user and password in the URL and the \
                 ACL rules of that user",
                self.label
            ));
        }
        if e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.is_unrecoverable_error()
            || e.code().is_some_and(|c| matches!(c, "LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "READONLY"))
        {
            return LockError::Unavailable {
                backend: self.backend.to_owned(),
                reason: format!("{what} {}: {message}", self.label),
                source: None,
            };
        }
        LockError::Backend {
            backend: self.backend.to_owned(),
            source: format!("{what} {}: {message}", self.label).into(),
        }
    }
}

fn hide_password(message: &str, client: &redis::Client) -> String {
    match client.get_connection_info().redis_settings().password() {
        Some(p) if !p.is_empty() => message.replace(p, "***"),
        _ => message.to_owned(),
    }
}
