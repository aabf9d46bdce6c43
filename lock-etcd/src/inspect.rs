//! Who holds a lock on etcd (docs/contract.md §5.6): the holder is the oldest key of the name's
//! queue; its value carries the holder id and metadata, its create revision is the token.
//! `list` reads the queues under a prefix, `force_release` deletes the holder's key (and revokes
//! its lease). The remaining lease time is not reported: etcd counts it in whole seconds from
//! the last keep-alive, which says little about the holder's own (shorter) validity.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp};
use lock_core::{backend::escape_prefix, FencingToken, HolderInfo, LockError, LockKind, LockName};

use crate::client::EtcdLock;
use crate::error::timed;
use crate::keys::Entry;
use crate::lease::revoke;

fn info(name: &LockName, kv: &KeyValue) -> HolderInfo {
    let entry = Entry::decode(kv.value());
    HolderInfo::new(name.as_str(), FencingToken(kv.create_revision().max(0).unsigned_abs()), LockKind::Exclusive)
        .with_holder(entry.holder, entry.metadata)
}

impl EtcdLock {
    /// The oldest key of `name`'s queue, if any (a linearizable read).
    async fn oldest(&self, name: &LockName) -> Result<Option<KeyValue>, LockError> {
        let opts = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
        let mut c = self.client();
        let queue = self.keys().queue(name);
        let got = timed(self.request_timeout(), "reading the lock's queue", c.get(queue.as_str(), Some(opts))).await?;
        Ok(got.kvs().first().cloned())
    }

    pub(crate) async fn inspect_now(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        Ok(self.oldest(name).await?.map(|kv| info(name, &kv)))
    }

    pub(crate) async fn list_now(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        let range = format!("{}{}", self.keys().all_locks(), escape_prefix(prefix));
        let mut c = self.client();
        let got = timed(
            self.request_timeout(),
            "listing the locks",
            c.get(range.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        // The holder of each name is its oldest key.
        let mut holders: BTreeMap<String, (LockName, &KeyValue)> = BTreeMap::new();
        for kv in got.kvs() {
            let Some(name) = self.keys().name_of(kv.key()) else { continue };
            if !name.as_str().starts_with(prefix) {
                continue;
            }
            let slot = holders.entry(name.as_str().to_owned()).or_insert((name, kv));
            if kv.create_revision() < slot.1.create_revision() {
                slot.1 = kv;
            }
        }
        Ok(holders.into_values().take(limit).map(|(name, kv)| info(&name, kv)).collect())
    }

    /// Deletes the holder's key if it is still the same key (create revision), then revokes its
    /// lease. The next waiter's watch fires; its token (a later create revision) is higher.
    pub(crate) async fn force_release_now(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        let bound = self.request_timeout();
        for _ in 0..3 {
            let Some(kv) = self.oldest(name).await? else { return Ok(None) };
            let txn = Txn::new()
                .when([Compare::create_revision(kv.key(), CompareOp::Equal, kv.create_revision())])
                .and_then([TxnOp::delete(kv.key(), None)]);
            let mut c = self.client();
            if timed(bound, "deleting the holder's key", c.txn(txn)).await?.succeeded() {
                if kv.lease() != 0 {
                    let _ = revoke(&self.inner.client, kv.lease(), bound).await;
                }
                return Ok(Some(FencingToken(kv.create_revision().max(0).unsigned_abs())));
            }
        }
        Err(LockError::unavailable(
            crate::error::BACKEND,
            "the lock changed hands three times during force_release; try again",
        ))
    }
}
