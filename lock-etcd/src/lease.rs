//! The server-side lease of one acquisition: granted with the ttl (or taken from the client's
//! spares), kept alive as renewal, and on release left to the client's next acquisition once its
//! key is deleted (`crate::spare`). [`EtcdHandle`] is a grant's owner-checked renew and release;
//! [`Pending`] revokes the lease of an acquisition that ends without a grant (timed out, refused,
//! dropped).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::{
    backend::{Backoff, LeaseHandle, ReleaseOutcome, RenewOutcome},
    LockError,
};
use tokio::time::{sleep, Instant};

use crate::error::{classify, lease_not_found, timed, BACKEND};
use crate::keepalive::KeepAlive;
use crate::spare::{Spare, Spares};

/// The lease TTL asked of etcd for a lease of `d`: whole seconds, rounded up, at least one. The
/// server keeps the lease at least this long after it received the grant or keep-alive, which
/// is after the client sent it; the client counts `d` from the send, so the server never frees
/// the lock before the holder stops relying on it.
pub(crate) fn ttl_secs(d: Duration) -> i64 {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0)).max(1);
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// Revokes `lease`, once; a lease already gone counts as revoked.
pub(crate) async fn revoke(client: &Client, lease: i64, bound: Duration) -> Result<(), LockError> {
    let mut c = client.clone();
    match tokio::time::timeout(bound, c.lease_revoke(lease)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if lease_not_found(&e) => Ok(()),
        Ok(Err(e)) => Err(classify("revoking a lease", e)),
        Err(_) => Err(LockError::unavailable(BACKEND, format!("revoking a lease: no answer within {bound:?}"))),
    }
}

/// Revokes `lease` until the server answers (or says it is gone); gives up after `within`,
/// when the lease has expired by itself anyway.
pub(crate) async fn revoke_until_answered(client: Client, lease: i64, bound: Duration, within: Duration) {
    let end = tokio::time::Instant::now() + within;
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    while revoke(&client, lease, bound).await.is_err() && tokio::time::Instant::now() < end {
        sleep(backoff.next_delay()).await;
    }
}

/// The lease of an acquisition still in progress. Dropped armed (the acquisition's future was
/// dropped, or it failed), it revokes the lease from a background task, which deletes the
/// waiter's key at once: a waiter that leaves frees its place (and a grant it did not take up)
/// without waiting for the ttl.
pub(crate) struct Pending {
    pub(crate) client: Client,
    pub(crate) id: i64,
    /// The lease's ttl: the background revoke gives up after it (the lease is gone by then).
    pub(crate) ttl: Duration,
    pub(crate) bound: Duration,
    armed: bool,
}

impl Pending {
    pub(crate) fn new(client: Client, id: i64, ttl: Duration, bound: Duration) -> Pending {
        Pending { client, id, ttl, bound, armed: true }
    }

    /// The lease now belongs to a granted `Lease`.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Revokes now (bounded); on failure the drop retries in the background.
    pub(crate) async fn revoke_now(mut self) {
        if revoke(&self.client, self.id, self.bound).await.is_ok() {
            self.armed = false;
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let within = self.ttl.saturating_add(Duration::from_secs(1));
            rt.spawn(revoke_until_answered(self.client.clone(), self.id, self.bound, within));
        }
    }
}

/// Renew and release of one granted key.
pub(crate) struct EtcdHandle {
    pub(crate) client: Client,
    pub(crate) key: String,
    /// The key's create revision: the grant's identity and fencing token.
    pub(crate) rev: i64,
    /// The lease the key is attached to (moved by `release_after`).
    pub(crate) lease: AtomicI64,
    pub(crate) keep_alive: KeepAlive,
    pub(crate) bound: Duration,
    /// A release was sent before (its answer may have been lost).
    pub(crate) release_sent: AtomicBool,
    /// The lease as granted: the one a release may leave to the client's spares (not a hold
    /// lease of `release_after`).
    pub(crate) granted_lease: i64,
    /// The lease's ttl in whole seconds.
    pub(crate) secs: i64,
    /// The server (re)started the lease's ttl at or after this instant.
    pub(crate) refreshed: std::sync::Mutex<Instant>,
    pub(crate) spares: Arc<Spares>,
}

/// The pause between tries of a release cut by a connection reset.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

impl EtcdHandle {
    /// Whether our key (same create revision, on `lease`) still exists: a linearizable read.
    async fn key_is_ours(&self, lease: i64) -> Result<bool, LockError> {
        let mut c = self.client.clone();
        let got = timed(self.bound, "reading our key", c.get(self.key.as_str(), None)).await?;
        Ok(got.kvs().first().is_some_and(|kv| kv.create_revision() == self.rev && kv.lease() == lease))
    }

    /// Deletes our key if it is still ours; `true` when it was.
    async fn delete_key(&self) -> Result<bool, LockError> {
        delete_if_ours(&self.client, &self.key, self.rev, self.bound).await
    }

    /// After a release: the lease goes to the client's spares when our delete's own answer said
    /// the key was ours (so the lease now carries no key), else it is revoked.
    async fn leave_lease(&self, certainly_empty: bool) {
        let lease = self.lease.load(Ordering::SeqCst);
        if certainly_empty && lease == self.granted_lease {
            let refreshed = *self.refreshed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let spare = Spare { id: lease, secs: self.secs, refreshed, keep_alive: self.keep_alive.take().await };
            if self.spares.put(spare).is_none() {
                return;
            }
        }
        let _ = revoke(&self.client, lease, self.bound).await;
    }
}

/// Deletes `key` if its create revision is still `rev`; `true` when it was.
async fn delete_if_ours(client: &Client, key: &str, rev: i64, bound: Duration) -> Result<bool, LockError> {
    let mut c = client.clone();
    let txn =
        Txn::new().when([Compare::create_revision(key, CompareOp::Equal, rev)]).and_then([TxnOp::delete(key, None)]);
    Ok(timed(bound, "deleting our key", c.txn(txn)).await?.succeeded())
}

#[async_trait]
impl LeaseHandle for EtcdHandle {
    /// A keep-alive (the server restarts the lease's ttl), then a read that our key is still
    /// there: a key deleted behind our back (an operator, `force_release`) is a lost lease even
    /// though the lease itself lives.
    async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
        let lease = self.lease.load(Ordering::SeqCst);
        let sent = Instant::now();
        // Both at once (one round trip): the keep-alive proves the lease lives on from before
        // this call, the read that our key is still attached to it.
        let (alive, ours) =
            tokio::join!(self.keep_alive.once(&self.client, lease, self.bound), self.key_is_ours(lease));
        if !alive? {
            return Ok(RenewOutcome::NotOwner);
        }
        *self.refreshed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = sent;
        // A key gone while its lease lives is not revoked here: a renewal that overlaps the
        // release would revoke the lease the release just left to the next acquisition, and
        // with it that acquisition's key. Such a lease, with no key, expires on its own.
        Ok(if ours? { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    /// An owner-checked delete of our key (the next waiter's watch fires); then the lease, now
    /// without a key, is kept for the client's next acquisition (`crate::spare`) or revoked
    /// (best effort: it expires by itself otherwise).
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        // A connection reset answers at once: retry within the bound while the channel redials.
        let end = tokio::time::Instant::now() + self.bound;
        let (deleted, by_us) = loop {
            let sent_before = self.release_sent.swap(true, Ordering::SeqCst);
            match self.delete_key().await {
                // An earlier delete whose answer was lost may have been ours: the key is gone
                // either way, and nobody else's was touched.
                Ok(false) if sent_before => break (true, false),
                Ok(ours) => break (ours, ours),
                Err(e @ LockError::Unavailable { .. }) if tokio::time::Instant::now() + RETRY_PAUSE < end => {
                    tracing::debug!(key = %self.key, error = %e, "etcd release failed; retrying");
                    sleep(RETRY_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        };
        self.leave_lease(by_us).await;
        Ok(if deleted { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    /// The key moves (owner-checked, in one transaction) to a new lease of `after` (rounded up
    /// to whole seconds), and the old lease is revoked: if this process dies, the server frees
    /// the lock then. While it lives, a background task deletes the key exactly `after` from now.
    async fn release_after(&self, after: Duration) -> Result<ReleaseOutcome, LockError> {
        let mut c = self.client.clone();
        let new = timed(self.bound, "granting the hold lease", c.lease_grant(ttl_secs(after), None)).await?.id();
        let txn = Txn::new()
            .when([Compare::create_revision(self.key.as_str(), CompareOp::Equal, self.rev)])
            .and_then([TxnOp::put(self.key.as_str(), "", Some(PutOptions::new().with_lease(new).with_ignore_value()))]);
        let moved = match timed(self.bound, "moving our key to the hold lease", c.txn(txn)).await {
            Ok(r) => r.succeeded(),
            Err(e) => {
                let _ = revoke(&self.client, new, self.bound).await;
                return Err(e);
            }
        };
        if !moved {
            let _ = revoke(&self.client, new, self.bound).await;
            return Ok(ReleaseOutcome::NotOwner);
        }
        let old = self.lease.swap(new, Ordering::SeqCst);
        let _ = revoke(&self.client, old, self.bound).await;
        let (client, key, rev, bound) = (self.client.clone(), self.key.clone(), self.rev, self.bound);
        tokio::spawn(delete_later(Arc::new(HoldEnd { client, key, rev, lease: new, bound }), after));
        Ok(ReleaseOutcome::Released)
    }
}

/// What the `hold_at_least` task deletes.
struct HoldEnd {
    client: Client,
    key: String,
    rev: i64,
    lease: i64,
    bound: Duration,
}

/// Deletes the key `after` from now, retrying until the server answers or the hold lease has
/// expired by itself (which deletes the key anyway).
async fn delete_later(end: Arc<HoldEnd>, after: Duration) {
    sleep(after).await;
    let give_up =
        tokio::time::Instant::now() + Duration::from_secs(ttl_secs(after).unsigned_abs()) + Duration::from_secs(1);
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        if delete_if_ours(&end.client, &end.key, end.rev, end.bound).await.is_ok() {
            let _ = revoke(&end.client, end.lease, end.bound).await;
            return;
        }
        if tokio::time::Instant::now() >= give_up {
            return;
        }
        sleep(backoff.next_delay()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        for (ms, secs) in [(1, 1), (999, 1), (1000, 1), (1001, 2), (1500, 2), (30_000, 30)] {
            assert_eq!(ttl_secs(Duration::from_millis(ms)), secs, "{ms} ms");
        }
    }
}
