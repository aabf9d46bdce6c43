//! The session layer, what Curator's framework gives its recipes: every request bounded in time
//! and sorted by what to do about its failure, the protected create's lookup (a node found again
//! by its unique prefix), and guaranteed deletes that go on in the background.

use std::future::Future;
use std::time::Duration;

use lock_core::{
    backend::{Backoff, ReleaseOutcome},
    LockError,
};
use tokio::time::{sleep, timeout, Instant};
use zookeeper_client::{Client, SessionState};

use crate::recipe;

pub(crate) type ZkError = zookeeper_client::Error;

pub(crate) const BACKEND: &str = "zookeeper";

/// How one request failed, sorted by what the recipe does about it.
pub(crate) enum Failure {
    /// The outcome is unknown (connection lost, no answer in time): look, then retry.
    Transient(LockError),
    /// The session is over: its ephemeral nodes are gone; start again with a new session.
    SessionGone,
    /// A definite answer from the server (no node, node exists, not authorised, …).
    Server(ZkError),
}

pub(crate) fn classify(e: ZkError) -> Failure {
    match e {
        ZkError::SessionExpired | ZkError::SessionMoved | ZkError::ClientClosed | ZkError::AuthFailed => {
            Failure::SessionGone
        }
        ZkError::ConnectionLoss
        | ZkError::Timeout
        | ZkError::Throttled
        | ZkError::NoHosts
        | ZkError::Custom(_)
        | ZkError::UnexpectedError(_) => {
            Failure::Transient(LockError::unavailable_from(BACKEND, "the connection to ZooKeeper was lost", e))
        }
        other => Failure::Server(other),
    }
}

/// Runs one request, bounded by `bound`.
pub(crate) async fn call<T>(
    bound: Duration,
    what: &str,
    fut: impl Future<Output = Result<T, ZkError>>,
) -> Result<T, Failure> {
    match timeout(bound, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(e)),
        Err(_) => {
            Err(Failure::Transient(LockError::unavailable(BACKEND, format!("{what} got no answer within {bound:?}"))))
        }
    }
}

pub(crate) fn server_error(e: ZkError, root: &str) -> LockError {
    match e {
        ZkError::NoAuth => LockError::config(format!(
            "not authorised to create lock nodes under {root}; give the right user:password in the zk:// URL"
        )),
        ZkError::BadArguments(_) => LockError::config(format!("ZooKeeper rejected a path under {root}: {e}")),
        other => LockError::backend(BACKEND, other),
    }
}

pub(crate) fn connected(state: SessionState) -> bool {
    matches!(state, SessionState::SyncConnected | SessionState::ConnectedReadOnly)
}

/// The children of `parent` that carry our unique `prefix` (a full path prefix), earliest
/// first, read behind a `sync`: a server that has not yet applied a create of ours (we may have
/// reconnected to a lagging follower) must not hide it, or we would create a second node and
/// leave the first in the queue.
pub(crate) async fn list_ours(
    client: &Client,
    parent: &str,
    prefix: &str,
    bound: Duration,
) -> Result<Vec<String>, Failure> {
    let name = prefix.rsplit('/').next().unwrap_or_default();
    let listing = async {
        let (synced, children) = tokio::join!(client.sync(parent), client.list_children(parent));
        synced.and(children)
    };
    match call(bound, "looking for our lock node", listing).await {
        Ok(children) => Ok(recipe::ours(children, name)),
        Err(Failure::Server(ZkError::NoNode)) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Finds the node created with `prefix` (unique per acquisition) and its czxid. With several
/// (an earlier create whose reply was lost), the earliest is adopted; the acquire deletes the others.
pub(crate) async fn find_ours(
    client: &Client,
    parent: &str,
    prefix: &str,
    bound: Duration,
) -> Result<Option<(String, i64)>, Failure> {
    let Some(child) = list_ours(client, parent, prefix, bound).await?.into_iter().next() else { return Ok(None) };
    let path = format!("{parent}/{child}");
    match call(bound, "reading our lock node", client.check_stat(&path)).await? {
        Some(stat) => Ok(Some((path, stat.czxid))),
        None => Ok(None),
    }
}

/// Deletes our node if an acquisition ends without a grant (error, timeout, busy, or the future
/// being dropped): in the background, retrying until the server answers or the session is over
/// (which deletes the node anyway).
pub(crate) struct NodeGuard {
    client: Option<Client>,
    parent: String,
    prefix: String,
    pub(crate) path: Option<String>,
    /// Only one create was sent and it was answered: `path` is the acquisition's only node.
    pub(crate) clean: bool,
}

impl NodeGuard {
    pub(crate) fn new(client: Client, parent: String, prefix: String) -> Self {
        NodeGuard { client: Some(client), parent, prefix, path: None, clean: false }
    }

    pub(crate) fn disarm(&mut self) {
        self.client = None;
    }
}

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (parent, prefix, path) =
            (std::mem::take(&mut self.parent), std::mem::take(&mut self.prefix), self.path.take());
        match path {
            Some(path) if self.clean => {
                // Sent now, so that this session's next requests (a new try, say) are served
                // after it; only its answer is awaited in the background.
                let sent = client.delete(&path, None);
                rt.spawn(async move {
                    match call(client.session_timeout(), "deleting the lock node", sent).await {
                        Ok(()) | Err(Failure::Server(ZkError::NoNode)) | Err(Failure::SessionGone) => {}
                        Err(_) => {
                            let _ = delete_every(&client, &parent, &prefix, Some(&path)).await;
                        }
                    }
                });
            }
            path => {
                rt.spawn(async move {
                    let _ = delete_every(&client, &parent, &prefix, path.as_deref()).await;
                });
            }
        }
    }
}

/// How long background clean-ups keep trying: past this the session has expired anyway (the
/// client gives up on a session after 7/5 of its timeout without contact).
pub(crate) fn cleanup_budget(client: &Client) -> Duration {
    client.session_timeout() * 2 + Duration::from_secs(5)
}

/// Every node with our `prefix` under `parent`, retried until the server answers or the
/// session is over.
async fn find_all_with_retry(client: &Client, parent: &str, prefix: &str) -> Vec<String> {
    let end = Instant::now() + cleanup_budget(client);
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
    while Instant::now() < end && !client.state().is_terminated() {
        match list_ours(client, parent, prefix, client.session_timeout()).await {
            Ok(found) => return found.into_iter().map(|c| format!("{parent}/{c}")).collect(),
            Err(Failure::Transient(_)) => sleep(backoff.next_delay()).await,
            Err(_) => return Vec::new(),
        }
    }
    Vec::new()
}

/// The guaranteed delete of everything one acquisition created: its node `path` (when known)
/// and every other node with its `prefix`, such as a create whose reply was lost and that a
/// lagging server did not show us; left behind, it would sit in the queue for the life of the
/// session. The answer is `path`'s (`NotOwner` when no path was known).
pub(crate) async fn delete_every(
    client: &Client,
    parent: &str,
    prefix: &str,
    path: Option<&str>,
) -> Result<ReleaseOutcome, LockError> {
    // Our node's delete goes out first and the lookup right behind it (one round trip); one
    // session's requests are served in order, so the lookup also sees any create that was sent
    // before the acquisition ended.
    let own = async {
        match path {
            Some(p) => delete_with_retry(client, p).await,
            None => Ok(ReleaseOutcome::NotOwner),
        }
    };
    let (outcome, found) = tokio::join!(own, find_all_with_retry(client, parent, prefix));
    for other in found.iter().filter(|o| Some(o.as_str()) != path) {
        let _ = delete_with_retry(client, other).await;
    }
    outcome
}

/// Deletes `path`: `Released` if it was there, `NotOwner` if it was gone (or the session is,
/// which deleted it). A node found gone after an earlier try of ours went unanswered is
/// `Released`: that try may have deleted it (its answer lost with the connection), and calling
/// it a loss would tell the caller its lock was taken when it was released as asked.
pub(crate) async fn delete_with_retry(client: &Client, path: &str) -> Result<ReleaseOutcome, LockError> {
    let end = Instant::now() + cleanup_budget(client);
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
    let mut last = LockError::unavailable(BACKEND, "the lock node could not be deleted");
    let mut unanswered = false;
    while Instant::now() < end {
        if client.state().is_terminated() {
            return Ok(ReleaseOutcome::NotOwner);
        }
        match call(client.session_timeout(), "deleting the lock node", client.delete(path, None)).await {
            Ok(()) => return Ok(ReleaseOutcome::Released),
            Err(Failure::Server(ZkError::NoNode)) if unanswered => return Ok(ReleaseOutcome::Released),
            Err(Failure::Server(ZkError::NoNode)) | Err(Failure::SessionGone) => return Ok(ReleaseOutcome::NotOwner),
            Err(Failure::Server(e)) => return Err(LockError::backend(BACKEND, e)),
            Err(Failure::Transient(e)) => {
                last = e;
                unanswered = true;
                sleep(backoff.next_delay()).await;
            }
        }
    }
    Err(last)
}
