//! The keys of PostgreSQL wake-ups: the NOTIFY payload of a release, and what a waiter listens
//! for. Every kind has its own prefix and no prefix is the start of another (they differ before
//! their `:`), so a key names exactly one (kind, lock name): an exclusive lock named like a
//! rw lock's key never wakes that rw lock's waiters, nor the reverse. The exclusive lock hands a
//! release to the head of its waiter queue: that payload names the waiter's owner id, so every
//! client hears it but only the one holding that waiter wakes anybody (see queue.rs). The store
//! and the kinds name a [`Wakeup`]; only this dialect turns it into a key.

use lock_core::LockKind;

use crate::dialect::Wakeup;

/// The prefix of the exclusive lock's keys.
pub(crate) const EXCLUSIVE: &str = "dlock:";

/// The prefix of the key of one queued waiter of the exclusive lock (its owner id follows).
pub(crate) const WAITER: &str = "dlock-waiter:";

fn prefix(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Read => "dlock-rw-read:",
        LockKind::Write => "dlock-rw-write:",
        LockKind::Permit => "dlock-sem:",
        _ => EXCLUSIVE,
    }
}

/// The key of the exclusive lock `name`.
pub(crate) fn exclusive(name: &str) -> String {
    format!("{EXCLUSIVE}{name}")
}

/// The key of the queued waiter `owner` (32 hex digits) of an exclusive lock.
pub(crate) fn waiter(owner: &str) -> String {
    format!("{WAITER}{owner}")
}

/// The key of one side of a read-write lock or semaphore `name`.
pub(crate) fn side(kind: LockKind, name: &str) -> String {
    format!("{}{name}", prefix(kind))
}

/// The key of `wakeup`.
pub(crate) fn key(wakeup: Wakeup<'_>) -> String {
    match wakeup {
        Wakeup::Exclusive(name) => exclusive(name),
        Wakeup::Waiter(owner) => waiter(owner),
        Wakeup::Side(kind, name) => side(kind, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_different_kinds_never_meet() {
        let sides = [LockKind::Read, LockKind::Write, LockKind::Permit];
        let mut prefixes: Vec<&str> = sides.iter().map(|s| prefix(*s)).collect();
        prefixes.push(EXCLUSIVE);
        prefixes.push(WAITER);
        prefixes.push(super::super::handoff::GRANT);
        for a in &prefixes {
            for b in &prefixes {
                assert!(a == b || !b.starts_with(a), "{a:?} is a prefix of {b:?}");
            }
        }
        // The collision of old: an exclusive lock named like a kind's key.
        for s in sides {
            assert_ne!(exclusive(&side(s, "x")), side(s, "x"));
        }
    }
}
