//! The key layout: every key and channel of one lock, read-write lock or semaphore, each under
//! the hash tag `{<escaped name>}`, so that each script runs on one Redis Cluster slot.

use lock_core::LockName;

/// Declares the keys of one key space: a struct of `String`s, each `<prefix>:{<escaped
/// name>}<space>:<suffix>`, so every key of one lock shares the hash tag (one Cluster slot).
/// `escaped()` is injective and never contains braces, so the tag is exactly the name.
macro_rules! key_space {
    ($(#[$doc:meta])* $keys:ident $space:literal { $($(#[$fdoc:meta])* $field:ident: $suffix:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $keys {
            $($(#[$fdoc])* pub $field: String,)*
        }

        impl $keys {
            /// The keys of `name` under `prefix`.
            pub fn new(prefix: &str, name: &LockName) -> $keys {
                let tag = format!("{prefix}:{{{}}}{}", name.escaped(), $space);
                $keys { $($field: format!("{tag}:{}", $suffix),)* }
            }
        }
    };
}

key_space! {
    /// The keys and channel of one lock.
    Keys "" {
        /// Single instance: the name's hash `{o: owner, e: lease end, f: highest token, q: queue
        /// mark, h, m}` (`super::lease`), no expiry unless `idle_gc_after`. A Redlock master:
        /// the lease, `{o: owner[:attempt], f: token}` with a `PX` expiry.
        lock: "lock",
        /// Redlock: integer, no expiry: the highest token issued on this master.
        fence: "fence",
        /// Redlock: the attempt id that stored `fence`, so that only that attempt counts an equal
        /// counter as its own store.
        fence_by: "fence-by",
        /// Pub/sub channel that a release publishes to.
        channel: "released",
        /// Sorted set: waiting owner → arrival sequence (single instance; `super::waiters`).
        waiters: "waiters",
        /// Sorted set: waiting owner → server time (ms) its registration ends.
        waiter_ends: "waiter-ends",
        /// Hash: waiting owner → its queue entry (how it is woken, whether it takes grants).
        waiter_entries: "waiter-entries",
        /// Hash: waiting owner → server time (ms) until which it is armed for blocking delivery
        /// (`crate::blocking`): a release that grants it pushes the token onto its list
        /// ([`Keys::pushes`]) instead of publishing a hint.
        armed: "armed",
        /// Sorted set: waiting entry → its ticket (one Redlock master; `super::redlock`).
        redlock_waiters: "rl-waiters",
        /// Sorted set: waiting entry → server time (ms) its registration ends.
        redlock_waiter_ends: "rl-waiter-ends",
    }
}

impl Keys {
    /// Blocking delivery: the list a release pushes `owner`'s grant onto, `<armed>:<owner>` (the
    /// scripts build it the same way from `armed`), under the lock's hash tag.
    pub fn pushes(&self, owner: &str) -> String {
        format!("{}:{owner}", self.armed)
    }
}

key_space! {
    /// The keys of one read-write lock (a key space of its own: `…:rw:*`).
    RwKeys ":rw" {
        /// Sorted set: reader owner → server time (ms) its lease ends.
        readers: "readers",
        /// Hash: reader owner → its fencing token.
        tokens: "tokens",
        /// Hash `{o: owner, f: token}` with `PX ttl`: the writer.
        writer: "writer",
        /// Sorted set: waiting reader (`r:<owner>`) or writer (`w:<owner>`) → arrival sequence
        /// (`super::kinds_queue`). While a writer is queued, new readers wait behind it
        /// (writers are not starved).
        waiters: "waiters",
        /// Sorted set: waiting member → server time (ms) its registration ends.
        waiter_ends: "waiter-ends",
        /// Hash: waiting member → its entry (how it is woken), and the reservation mark.
        waiter_entries: "waiter-entries",
        /// Sorted set: the waiting writers' members → their sequence in `waiters`.
        waiting_writers: "waiting-writers",
        /// Integer: the highest token issued for this read-write lock.
        fence: "fence",
    }
}

key_space! {
    /// The keys of one semaphore (a key space of its own: `…:sem:*`).
    SemKeys ":sem" {
        /// Sorted set: holder owner → server time (ms) its lease ends.
        holders: "holders",
        /// Hash: holder owner → its fencing token.
        tokens: "tokens",
        /// String: the number of permits every user must agree on (expires with the last holder).
        permits: "permits",
        /// Sorted set: waiting permit owner (`p:<owner>`) → arrival sequence
        /// (`super::kinds_queue`).
        waiters: "waiters",
        /// Sorted set: waiting member → server time (ms) its registration ends.
        waiter_ends: "waiter-ends",
        /// Hash: waiting member → its entry (how it is woken), and the reservation mark.
        waiter_entries: "waiter-entries",
        /// Integer: the highest token issued for this semaphore.
        fence: "fence",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_tag_and_never_collide() {
        let a = Keys::new("p", &LockName::new("a/b").unwrap());
        let b = Keys::new("p", &LockName::new("a%2Fb").unwrap());
        assert_ne!(a.lock, b.lock);
        assert_eq!(a.lock, "p:{a%2Fb}:lock");
        assert_eq!(a.fence, "p:{a%2Fb}:fence");
        let braces = Keys::new("p", &LockName::new("x}{y").unwrap());
        assert_eq!(braces.lock.matches('{').count(), 1);
        assert_eq!(a.channel, "p:{a%2Fb}:released");
    }
}
