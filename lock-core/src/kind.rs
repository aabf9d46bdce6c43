//! The one name for "which kind of grant" (docs/contract.md §5): every backend, the inspection
//! API and the read-write / semaphore machinery use this enum.

/// Which kind of grant a lease entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LockKind {
    /// The exclusive lock (`DistributedLock`).
    Exclusive,
    /// A shared lease of a read-write lock.
    Read,
    /// The exclusive lease of a read-write lock.
    Write,
    /// One place of a semaphore.
    Permit,
}

impl LockKind {
    /// The lowercase label used in logs, metrics and the CLI's output.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::Read => "read",
            LockKind::Write => "write",
            LockKind::Permit => "permit",
        }
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
