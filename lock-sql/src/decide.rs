//! The grant decision of the read-write lock and the semaphore: a pure function of what one
//! acquire transaction read, so every rule has a table test.

use lock_core::LockKind;

/// The `kind` column of a grant of `kind`: one name as read-write lock and as semaphore is two
/// locks.
pub(crate) fn family(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Permit => "sem",
        _ => "rw",
    }
}

/// The `mode` column: 1 for a writer.
pub(crate) fn mode(kind: LockKind) -> i64 {
    i64::from(kind == LockKind::Write)
}

/// What one acquire transaction decided.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Already ours (a retry after a lost reply): the same grant back, with the lease extended
    /// exactly as a fresh grant's, since the caller's new lease counts from the retry.
    Again(i64),
    Grant(i64),
    Refuse {
        remaining: Option<i64>,
        claim: bool,
    },
    BadPermits(i64),
}

/// What an acquire transaction writes to carry out a [`Plan`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// The counter row takes the new fence (and the permits; our own claim is cleared), and a
    /// holder row is inserted with that fence and `expires_at = now + ttl`.
    Grant(i64),
    /// Our holder row gets `expires_at = now + ttl` (token unchanged).
    Extend,
    /// A waiting writer's claim on the counter row.
    Claim,
    Nothing,
}

impl Plan {
    /// The writes this plan needs.
    pub(crate) fn write(&self) -> Write {
        match *self {
            Plan::Grant(fence) => Write::Grant(fence),
            Plan::Again(_) => Write::Extend,
            Plan::Refuse { claim: true, .. } => Write::Claim,
            Plan::Refuse { claim: false, .. } | Plan::BadPermits(_) => Write::Nothing,
        }
    }
}

/// A live holder as the transaction read it: `(owner, mode, fence, remaining ms)`.
pub(crate) type Holder = (String, i64, i64, i64);

/// The decision for a grant of `kind` (of `permits`, for a semaphore), from the counter row
/// `(fence, permits, others' live claim ms or -1)` and the live holders.
pub(crate) fn decide(
    (kind, permits): (LockKind, u32),
    owner: &str,
    counter: (i64, i64, i64),
    holders: &[Holder],
    claiming: bool,
) -> Plan {
    let (fence, stored, claim) = counter;
    if let Some(h) = holders.iter().find(|h| h.0 == owner) {
        return Plan::Again(h.2);
    }
    match kind {
        LockKind::Read => {
            if let Some(w) = holders.iter().find(|h| h.1 == 1) {
                Plan::Refuse { remaining: Some(w.3), claim: false }
            } else if claim >= 0 {
                Plan::Refuse { remaining: Some(claim), claim: false }
            } else {
                Plan::Grant(fence + 1)
            }
        }
        LockKind::Write => {
            if holders.is_empty() {
                Plan::Grant(fence + 1)
            } else {
                let longest = holders.iter().map(|h| h.3).max();
                Plan::Refuse { remaining: longest, claim: claiming && claim < 0 }
            }
        }
        _ => {
            if !holders.is_empty() && stored != i64::from(permits) {
                Plan::BadPermits(stored)
            } else if holders.len() >= permits as usize {
                Plan::Refuse { remaining: holders.iter().map(|h| h.3).min(), claim: false }
            } else {
                Plan::Grant(fence + 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_hold_back_readers_and_permits_must_agree() {
        let holder = |o: &str, mode, fence, rem| (o.to_string(), mode, fence, rem);
        // A live claim of another writer refuses a reader.
        assert!(matches!(decide((LockKind::Read, 0), "r", (5, 0, 100), &[], false), Plan::Refuse { .. }));
        // Readers refuse a writer, which then claims when waiting.
        let readers = [holder("a", 0, 4, 50), holder("b", 0, 5, 70)];
        assert!(matches!(
            decide((LockKind::Write, 0), "w", (5, 0, -1), &readers, true),
            Plan::Refuse { remaining: Some(70), claim: true }
        ));
        assert!(matches!(
            decide((LockKind::Write, 0), "w", (5, 0, -1), &readers, false),
            Plan::Refuse { claim: false, .. }
        ));
        // A retry of one's own grant returns the same token.
        assert!(matches!(decide((LockKind::Read, 0), "a", (5, 0, -1), &readers, false), Plan::Again(4)));
        assert!(matches!(decide((LockKind::Read, 0), "c", (5, 0, -1), &readers, false), Plan::Grant(6)));
        assert!(matches!(decide((LockKind::Permit, 3), "c", (5, 2, -1), &readers, false), Plan::BadPermits(2)));
        assert!(matches!(
            decide((LockKind::Permit, 2), "c", (5, 2, -1), &readers, false),
            Plan::Refuse { remaining: Some(50), .. }
        ));
        assert!(matches!(decide((LockKind::Permit, 3), "c", (5, 3, -1), &readers, false), Plan::Grant(6)));
    }

    /// A retry by the holder itself (its reply was lost) gets its token back and extends its
    /// lease, on every side, even where a stranger would now be refused.
    #[test]
    fn a_regrant_extends_the_lease() {
        let holder = |o: &str, mode, fence, rem| (o.to_string(), mode, fence, rem);
        let cases = [
            ((LockKind::Read, 0), vec![holder("a", 0, 4, 10), holder("b", 0, 5, 900)], (5, 0, 300)),
            ((LockKind::Write, 0), vec![holder("a", 1, 7, 10)], (7, 0, -1)),
            ((LockKind::Permit, 1), vec![holder("a", 0, 9, 10)], (9, 1, -1)),
            ((LockKind::Permit, 2), vec![holder("x", 0, 8, 500), holder("a", 0, 9, 10)], (9, 2, -1)),
        ];
        for (side, holders, counter) in cases {
            let plan = decide(side, "a", counter, &holders, true);
            let token = holders.iter().find(|h| h.0 == "a").map(|h| h.2).unwrap_or_default();
            assert_eq!(plan, Plan::Again(token), "{side:?}");
            assert_eq!(plan.write(), Write::Extend, "{side:?}: a re-grant must write the new expiry");
        }
        assert_eq!(Plan::Grant(3).write(), Write::Grant(3));
        assert_eq!(Plan::Refuse { remaining: None, claim: true }.write(), Write::Claim);
        assert_eq!(Plan::Refuse { remaining: None, claim: false }.write(), Write::Nothing);
        assert_eq!(Plan::BadPermits(2).write(), Write::Nothing);
    }
}
