//! One lease's keep-alive stream: renewal's request, and what a spare lease carries along.

use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use lock_core::LockError;
use tokio::sync::Mutex;

use crate::error::{classify, timed, BACKEND};

/// A keep-alive stream of one lease, opened on first use and again after any failure.
pub(crate) struct KeepAlive {
    stream: Mutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
}

impl KeepAlive {
    pub(crate) fn new() -> KeepAlive {
        KeepAlive { stream: Mutex::new(None) }
    }

    /// The stream, moved out (to go with its lease to the client's spares).
    pub(crate) async fn take(&self) -> KeepAlive {
        KeepAlive { stream: Mutex::new(self.stream.lock().await.take()) }
    }

    /// One keep-alive of `lease`: `Ok(true)` when the server extended it, `Ok(false)` when the
    /// lease no longer exists. Opening the stream sends the first keep-alive with it (one round
    /// trip either way).
    pub(crate) async fn once(&self, client: &Client, lease: i64, bound: Duration) -> Result<bool, LockError> {
        let mut guard = self.stream.lock().await;
        if guard.is_none() {
            let mut c = client.clone();
            return match tokio::time::timeout(bound, c.lease_keep_alive(lease)).await {
                Ok(Ok(opened)) => {
                    *guard = Some(opened);
                    Ok(true)
                }
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(why))) if why.contains("not found") => Ok(false),
                Ok(Err(e)) => Err(classify("keeping the lease alive", e)),
                Err(_) => {
                    Err(LockError::unavailable(BACKEND, format!("keeping the lease alive: no answer within {bound:?}")))
                }
            };
        }
        let answer = async {
            let Some((keeper, stream)) = guard.as_mut() else { return Ok(None) };
            keeper.keep_alive().await?;
            stream.message().await
        };
        match timed(bound, "keeping the lease alive", answer).await {
            Ok(Some(resp)) => Ok(resp.ttl() > 0),
            Ok(None) => {
                *guard = None;
                Err(LockError::unavailable(BACKEND, "the keep-alive stream ended"))
            }
            Err(e) => {
                *guard = None;
                Err(e)
            }
        }
    }
}
