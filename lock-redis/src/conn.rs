//! One Redis server as seen by a client: a multiplexed command connection that is replaced
//! after any connection-level failure, with every wait bounded.
//!
//! Connecting runs in its own task, bounded by the connect timeout, and is shared by every
//! request that needs it: a request that gives up (its own, shorter timeout) does not cancel
//! the connect, so a slow link still ends up connected instead of restarting the handshake on
//! every attempt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use lock_core::LockError;
use redis::AsyncConnectionConfig;
use tokio::time::timeout;

use crate::cluster::Conn;
use crate::endpoint::Endpoint;
use crate::scripts::all_sources;
use lock_core::backend::redact::redact_url;

/// Why a connect failed, in a form every waiting request can rebuild a `LockError` from.
#[derive(Clone, Debug)]
pub(crate) enum ConnectError {
    Config(String),
    Unavailable(String),
}

impl ConnectError {
    pub(crate) fn into_lock_error(self, backend: &'static str) -> LockError {
        match self {
            ConnectError::Config(reason) => LockError::config(reason),
            ConnectError::Unavailable(reason) => LockError::unavailable(backend, reason),
        }
    }
}

type Connecting = Shared<BoxFuture<'static, Result<Conn, ConnectError>>>;

enum Slot {
    Empty,
    Connecting(u64, Connecting),
    Ready(u64, Conn),
}

/// A server and its shared command connection.
///
/// Why not redis-rs's `ConnectionManager`: it fails the first command after a server restart
/// (measured on redis 7.0: `broken pipe`, success only on the caller's retry ~5 ms later) and
/// keeps a connection whose request timed out, while `Node` retries idempotent scripts once on a
/// fresh connection, replaces a connection after any time-out, shares one connect bounded by
/// `connect_timeout` among the requests waiting for it, and loads every script on it.
pub(crate) struct Node {
    endpoint: Endpoint,
    /// The URL with its password hidden: the only form that reaches logs and errors.
    pub(crate) label: String,
    backend: &'static str,
    connect_timeout: Duration,
    request_timeout: Duration,
    slot: Mutex<Slot>,
    generation: AtomicU64,
}

impl Node {
    pub(crate) fn new(
        endpoint: Endpoint,
        url: &str,
        backend: &'static str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Self {
        Node {
            endpoint,
            label: redact_url(url),
            backend,
            connect_timeout,
            request_timeout,
            slot: Mutex::new(Slot::Empty),
            generation: AtomicU64::new(0),
        }
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Whether this is a Redis Cluster (commands through the cluster client).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.endpoint, Endpoint::Cluster(_))
    }

    /// The database number the connections select.
    pub(crate) fn db(&self) -> i64 {
        self.endpoint.settings().db()
    }

    /// The live connection, or the shared connect in progress (started if there is none).
    async fn connection(&self) -> Result<(u64, Conn), LockError> {
        let (generation, connecting) = {
            let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            match &*slot {
                Slot::Ready(g, c) => return Ok((*g, c.clone())),
                Slot::Connecting(g, f) => (*g, f.clone()),
                Slot::Empty => {
                    let g = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
                    let f = self.spawn_connect();
                    *slot = Slot::Connecting(g, f.clone());
                    (g, f)
                }
            }
        };
        let result = connecting.await;
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let ours = matches!(&*slot, Slot::Connecting(g, _) if *g == generation);
        match result {
            Ok(conn) => {
                if ours {
                    tracing::debug!(server = %self.label, "connected");
                    *slot = Slot::Ready(generation, conn.clone());
                }
                Ok((generation, conn))
            }
            Err(e) => {
                if ours {
                    *slot = Slot::Empty;
                }
                Err(e.into_lock_error(self.backend))
            }
        }
    }

    fn spawn_connect(&self) -> Connecting {
        let endpoint = self.endpoint.clone();
        let label = self.label.clone();
        let connect_timeout = self.connect_timeout;
        let response_timeout = self.request_timeout.max(connect_timeout);
        let task = tokio::spawn(async move {
            dial(&endpoint, &label, connect_timeout, response_timeout, all_sources().collect()).await
        });
        async move {
            match task.await {
                Ok(r) => r,
                Err(e) => Err(ConnectError::Unavailable(format!("the connect task failed: {e}"))),
            }
        }
        .boxed()
        .shared()
    }

    /// Drops the connection of `generation` (not a newer one) so the next command reconnects.
    /// A connection whose request timed out may still carry the stale request; replacing it
    /// keeps every later reply unambiguous.
    fn discard(&self, generation: u64) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(&*slot, Slot::Ready(g, _) if *g == generation) {
            *slot = Slot::Empty;
        }
    }

    /// Opens the connection now and checks it answers (PING).
    pub(crate) async fn ping(&self, within: Duration) -> Result<(), LockError> {
        let _: String =
            self.run_idempotent(within, |mut c| async move { redis::cmd("PING").query_async(&mut c).await }).await?;
        Ok(())
    }

    /// Runs one command (or script invocation) on the shared connection, bounded by `within`
    /// (and, once connected, by the request timeout). Connection-level failures and time-outs
    /// are `Unavailable`, and the connection is then replaced.
    pub(crate) async fn run<T, F, Fut>(&self, within: Duration, f: F) -> Result<T, LockError>
    where
        F: Fn(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.run_inner(within, false, f).await
    }

    /// Like [`Node::run`], for operations that may run twice with the same effect (acquire by
    /// the same owner, renew, set-if-greater, PING): when the connection turns out to be dead
    /// (a server restart or reset while it was idle), it is retried once on a fresh one, within
    /// the same bound.
    pub(crate) async fn run_idempotent<T, F, Fut>(&self, within: Duration, f: F) -> Result<T, LockError>
    where
        F: Fn(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.run_inner(within, true, f).await
    }

    async fn run_inner<T, F, Fut>(&self, within: Duration, idempotent: bool, f: F) -> Result<T, LockError>
    where
        F: Fn(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        // The connection this request was sent on, if it got that far (generations start at 1).
        let used = AtomicU64::new(0);
        let work = async {
            let mut retried = !idempotent;
            loop {
                let (generation, conn) = self.connection().await?;
                used.store(generation, Ordering::SeqCst);
                match timeout(self.request_timeout, f(conn)).await {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(e)) => {
                        let broken = e.is_io_error() || e.is_unrecoverable_error() || e.is_connection_dropped();
                        // READONLY: the server was demoted (a Sentinel failover); reconnecting
                        // asks the Sentinels for the new primary.
                        if broken || e.is_timeout() || e.code() == Some("READONLY") {
                            self.discard(generation);
                        }
                        if broken && !e.is_timeout() && !retried {
                            retried = true;
                            tracing::debug!(server = %self.label, error = %e, "connection was dead; retrying once");
                            continue;
                        }
                        return Err(self.map_error(e));
                    }
                    Err(_) => {
                        self.discard(generation);
                        return Err(LockError::unavailable(
                            self.backend,
                            format!("{} did not answer within {:?}", self.label, self.request_timeout),
                        ));
                    }
                }
            }
        };
        match timeout(within, work).await {
            Ok(r) => r,
            Err(_) => {
                // A late reply: that connection may be stuck, replace it. Still connecting: keep
                // the connect going (it runs on its own), so the next request finds it ready.
                match used.load(Ordering::SeqCst) {
                    0 => {}
                    g => self.discard(g),
                }
                Err(LockError::unavailable(self.backend, format!("{} did not answer within {within:?}", self.label)))
            }
        }
    }

    fn map_error(&self, e: redis::RedisError) -> LockError {
        let password = self.endpoint.settings().password();
        let message = hide(&e.to_string(), password);
        if is_auth_error(&e) {
            return LockError::config(auth_message("request failed on", &self.label, &message));
        }
        if e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.is_unrecoverable_error()
            || e.code().is_some_and(|c| {
                matches!(c, "LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "READONLY" | "CLUSTERDOWN")
            })
        {
            return LockError::unavailable(self.backend, format!("request failed on {}: {message}", self.label));
        }
        LockError::backend(self.backend, format!("request failed on {}: {message}", self.label))
    }
}

/// Opens one connection to `endpoint` (a Sentinel endpoint asks for the primary again) and loads
/// `sources` on it, bounded by `connect_timeout`; a failure is worded as every connect error is:
/// the password hidden, a refused login a configuration error (naming the Sentinels when they
/// refuse it too). `Node`'s connections and blocking delivery's own connections open here.
pub(crate) async fn dial(
    endpoint: &Endpoint,
    label: &str,
    connect_timeout: Duration,
    response_timeout: Duration,
    sources: Vec<&'static str>,
) -> Result<Conn, ConnectError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout));
    let connected = timeout(connect_timeout, async {
        let mut conn = match endpoint {
            Endpoint::Cluster(c) => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(connect_timeout)
                    .set_response_timeout(response_timeout);
                Conn::Cluster(c.client.get_async_connection_with_config(config).await?)
            }
            _ => Conn::Single(endpoint.resolve().await?.get_multiplexed_async_connection_with_config(&config).await?),
        };
        // Load the scripts now, so calls by SHA succeed at once. On a cluster each SCRIPT LOAD
        // goes to every master (a pipeline of keyless commands has no slot).
        if matches!(conn, Conn::Cluster(_)) {
            for src in sources {
                let _: redis::Value = redis::cmd("SCRIPT").arg("LOAD").arg(src).query_async(&mut conn).await?;
            }
        } else {
            let mut pipe = redis::pipe();
            for src in sources {
                pipe.cmd("SCRIPT").arg("LOAD").arg(src);
            }
            let _: Vec<String> = pipe.query_async(&mut conn).await?;
        }
        Ok::<_, redis::RedisError>(conn)
    })
    .await;
    match connected {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => {
            let message = hide(&e.to_string(), endpoint.settings().password());
            let sentinel_refused =
                is_auth_error(&e) && timeout(connect_timeout, endpoint.sentinels_refuse_login()).await == Ok(true);
            if sentinel_refused {
                Err(ConnectError::Config(crate::sentinel::refused_message(label, &message)))
            } else if is_auth_error(&e) {
                Err(ConnectError::Config(auth_message("cannot connect to", label, &message)))
            } else {
                Err(ConnectError::Unavailable(format!("cannot connect to {label}: {message}")))
            }
        }
        Err(_) => Err(ConnectError::Unavailable(format!(
            "no connection to {label} within the connect timeout {connect_timeout:?}"
        ))),
    }
}

fn is_auth_error(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || e.code().is_some_and(|c| matches!(c, "NOAUTH" | "WRONGPASS" | "NOPERM"))
        // redis-rs reports a refused SELECT at connect as a plain response error: a user
        // without `+select` (or a database the server does not have) is configuration too.
        || e.to_string().contains("refused to switch database")
}

fn auth_message(what: &str, label: &str, message: &str) -> String {
    format!(
        "{what} {label}: authentication or permission failed ({message}); check the user and password in the URL \
         and that user's ACL rules (it needs EVALSHA, SCRIPT LOAD, PUBLISH, SUBSCRIBE, SELECT for a database \
         other than 0, and the lock keys; see the lock-redis docs for the exact least ACL)"
    )
}

fn hide(message: &str, password: Option<&str>) -> String {
    match password {
        Some(p) if !p.is_empty() => message.replace(p, "***"),
        _ => message.to_owned(),
    }
}
