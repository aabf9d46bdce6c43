//! What a lock client remembers about parent nodes between acquisitions: which exist, and which
//! it last found busy.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

/// A bounded set of parent paths this client learnt something about. Only hints: forgetting
/// one, or a hash shared by two paths, costs one extra request. Hashes rather than paths: the
/// set holds one entry per name in use, ten thousand when as many leases are held.
#[derive(Default)]
pub(crate) struct Hints(Mutex<HashSet<u64>>, RandomState);

/// How many parents one [`Hints`] remembers.
const MAX_HINTS: usize = 10_000;

impl Hints {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn contains(&self, parent: &str) -> bool {
        let key = self.1.hash_one(parent);
        self.set().contains(&key)
    }

    /// Adds (`true`) or removes `parent`.
    pub(crate) fn note(&self, parent: &str, on: bool) {
        let key = self.1.hash_one(parent);
        let mut set = self.set();
        if !on {
            set.remove(&key);
            return;
        }
        if set.len() >= MAX_HINTS && !set.contains(&key) {
            set.clear();
        }
        set.insert(key);
    }
}
