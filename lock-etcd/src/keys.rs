//! Where a name's queue lives in the key space, and what each waiter's key holds.
//!
//! Every waiter of lock `name` has one key, `<prefix>/lock/<escaped name>/<lease id in hex>`,
//! attached to its own lease. Escaped names never contain `/`, so the range of one name's
//! queue (`…/<escaped name>/`) never includes another name's keys. Read-write locks queue under
//! `<prefix>/rw/<escaped name>/` (readers `r<lease>`, writers `w<lease>`), semaphores under
//! `<prefix>/sem/<escaped name>/`: one name used as each kind names three independent things.

use lock_core::{Holder, LockName, OwnerId};

use crate::recipe::Recipe;

/// The key layout under one client's prefix.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// `<prefix>/`.
    root: String,
    /// `<prefix>/lock/`.
    locks: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys { root: format!("{prefix}/"), locks: format!("{prefix}/lock/") }
    }

    /// `<prefix>/`: every key of this client starts with it.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// The range of every lock's queue: names are listed by this prefix.
    pub(crate) fn all_locks(&self) -> &str {
        &self.locks
    }

    /// The prefix of `name`'s queue (ends with `/`).
    pub(crate) fn queue(&self, name: &LockName) -> String {
        format!("{}{}/", self.locks, name.escaped())
    }

    /// The prefix of `name`'s queue of kind `recipe` (ends with `/`).
    pub(crate) fn queue_of(&self, recipe: Recipe, name: &LockName) -> String {
        match recipe {
            Recipe::Exclusive => self.queue(name),
            Recipe::Read | Recipe::Write => format!("{}rw/{}/", self.root, name.escaped()),
            Recipe::Permit(_) => format!("{}sem/{}/", self.root, name.escaped()),
        }
    }

    /// The keys a waiter of kind `recipe` must see gone (those older than its own): readers
    /// wait for writers only, every other kind for the whole queue.
    pub(crate) fn blockers(&self, recipe: Recipe, name: &LockName) -> String {
        match recipe {
            Recipe::Read => format!("{}w", self.queue_of(recipe, name)),
            _ => self.queue_of(recipe, name),
        }
    }

    /// The key of the waiter of kind `recipe` whose lease is `lease`.
    pub(crate) fn waiter(&self, recipe: Recipe, name: &LockName, lease: i64) -> String {
        let role = match recipe {
            Recipe::Read => "r",
            Recipe::Write => "w",
            Recipe::Exclusive | Recipe::Permit(_) => "",
        };
        format!("{}{role}{lease:016x}", self.queue_of(recipe, name))
    }

    /// The name whose queue holds `key`, if `key` is one of ours.
    pub(crate) fn name_of(&self, key: &[u8]) -> Option<LockName> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(&self.locks)?;
        let (escaped, _) = rest.split_once('/')?;
        LockName::from_escaped(escaped)
    }
}

/// What a waiter's key holds: who queued it (JSON, so operators can read it with `etcdctl`).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Entry {
    /// The acquisition's owner id, in hex.
    pub(crate) owner: String,
    /// The holder id the acquirer gave, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
    /// The holder's metadata, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) metadata: Option<String>,
    /// A semaphore's number of permits, as its waiter asked (all users must agree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) permits: Option<u32>,
}

impl Entry {
    pub(crate) fn encode(owner: OwnerId, holder: Option<&Holder>, recipe: Recipe) -> Vec<u8> {
        let entry = Entry {
            owner: owner.to_hex(),
            holder: holder.map(|h| h.id().to_owned()),
            metadata: holder.and_then(|h| h.metadata().map(str::to_owned)),
            permits: match recipe {
                Recipe::Permit(n) => Some(n),
                _ => None,
            },
        };
        serde_json::to_vec(&entry).unwrap_or_default()
    }

    /// The entry of a key's value; a value written by something else reads as an empty entry.
    pub(crate) fn decode(value: &[u8]) -> Entry {
        serde_json::from_slice(value).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let keys = Keys::new("app");
        let name = LockName::new("a/b").unwrap();
        assert_eq!(keys.waiter(Recipe::Exclusive, &name, 255), "app/lock/a%2Fb/00000000000000ff");
        assert_eq!(keys.waiter(Recipe::Read, &name, 255), "app/rw/a%2Fb/r00000000000000ff");
        assert_eq!(keys.blockers(Recipe::Read, &name), "app/rw/a%2Fb/w");
        assert_eq!(keys.waiter(Recipe::Permit(3), &name, 1), "app/sem/a%2Fb/0000000000000001");
        assert_eq!(keys.name_of(keys.waiter(Recipe::Exclusive, &name, 1).as_bytes()), Some(name));
        assert_eq!(keys.name_of(b"app/other/x/1"), None);
        let holder = Holder::new("web-1").unwrap().with_metadata("m").unwrap();
        let e = Entry::decode(&Entry::encode(OwnerId::random(), Some(&holder), Recipe::Exclusive));
        assert_eq!((e.holder.as_deref(), e.metadata.as_deref()), (Some("web-1"), Some("m")));
    }
}
