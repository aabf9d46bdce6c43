//! The keys of PostgreSQL wake-ups: the NOTIFY payload of a release, and what a waiter listens
//! for. Every kind has its own prefix and no prefix is the start of another (they differ before
//! their `:`), so a key names exactly one (kind, lock name): an exclusive lock named like a
//! rw lock's key never wakes that rw lock's waiters, nor the reverse.

use crate::decide::Side;

/// The prefix of the exclusive lock's keys.
pub(crate) const EXCLUSIVE: &str = "dlock:";

fn prefix(side: Side) -> &'static str {
    match side {
        Side::Read => "dlock-rw-read:",
        Side::Write => "dlock-rw-write:",
        Side::Permit(_) => "dlock-sem:",
    }
}

/// The key of the exclusive lock `name`.
pub(crate) fn exclusive(name: &str) -> String {
    format!("{EXCLUSIVE}{name}")
}

/// The key of one side of a read-write lock or semaphore `name`.
pub(crate) fn side(side: Side, name: &str) -> String {
    format!("{}{name}", prefix(side))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_different_kinds_never_meet() {
        let sides = [Side::Read, Side::Write, Side::Permit(1)];
        let mut prefixes: Vec<&str> = sides.iter().map(|s| prefix(*s)).collect();
        prefixes.push(EXCLUSIVE);
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
