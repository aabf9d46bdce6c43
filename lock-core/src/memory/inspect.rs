//! `inspect`, `list` and `force_release` of the in-memory backend (docs/contract.md §5.6): the exclusive locks'
//! live holders, read under the server's mutex.

use tokio::time::Instant;

use super::{Entry, Family, MemoryLock};
use crate::{FencingToken, HolderInfo, LockKind, LockName};

impl Entry {
    /// The live holder of an exclusive lock, as reported.
    fn info(&mut self, name: &LockName, now: Instant) -> Option<HolderInfo> {
        self.expire(now);
        let h = self.holders.first()?;
        let (id, meta) = match &h.who {
            Some(w) => (Some(w.id().to_owned()), w.metadata().map(str::to_owned)),
            None => (None, None),
        };
        Some(
            HolderInfo::new(name.as_str(), h.token, LockKind::Exclusive)
                .with_holder(id, meta)
                .with_remaining(Some(h.expires.saturating_duration_since(now))),
        )
    }
}

impl MemoryLock {
    pub(super) fn inspect_now(&self, name: &LockName) -> Option<HolderInfo> {
        let now = Instant::now();
        let mut locks = self.server.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.get_mut(&(Family::Lock, name.clone())).and_then(|e| e.info(name, now))
    }

    pub(super) fn list_now(&self, prefix: &str, limit: usize) -> Vec<HolderInfo> {
        let now = Instant::now();
        let mut locks = self.server.locks.lock().unwrap_or_else(|e| e.into_inner());
        let mut held: Vec<HolderInfo> = locks
            .iter_mut()
            .filter(|((family, name), _)| *family == Family::Lock && name.as_str().starts_with(prefix))
            .filter_map(|((_, name), e)| e.info(name, now))
            .collect();
        held.sort_by(|a, b| a.name.cmp(&b.name));
        held.truncate(limit);
        held
    }

    /// Forgets the live holder of the exclusive lock `name` (the fence stays), serves the
    /// waiters, and returns the forgotten holder's token.
    pub(super) fn force_release_now(&self, name: &LockName) -> Option<FencingToken> {
        let now = Instant::now();
        self.with_entry(Family::Lock, name, |e| {
            e.expire(now);
            let token = e.holders.first().map(|h| h.token);
            e.holders.clear();
            e.promote(now);
            token
        })
    }
}
