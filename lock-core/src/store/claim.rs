//! What one attempt of a [`LeaseStore`](super::LeaseStore) asks for and what it answers. A
//! leaf of `store/`.

use std::time::Duration;

use crate::{FencingToken, Holder, LockName, OwnerId};

/// What one acquire attempt asks for: the name, the owner id, the lease time and the
/// acquirer's identity ([`AcquireOptions::holder`](crate::AcquireOptions::holder), docs/contract.md §5.6).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Claim<'a> {
    /// The lock name.
    pub name: &'a LockName,
    /// The random owner id of this acquisition.
    pub owner: OwnerId,
    /// The lease time asked for.
    pub ttl: Duration,
    /// Who is acquiring, to be stored with the lease where the store can.
    pub holder: Option<&'a Holder>,
}

impl<'a> Claim<'a> {
    /// A claim without a holder identity.
    pub fn new(name: &'a LockName, owner: OwnerId, ttl: Duration) -> Self {
        Claim { name, owner, ttl, holder: None }
    }

    /// Attaches the acquirer's identity.
    pub fn holder(mut self, holder: Option<&'a Holder>) -> Self {
        self.holder = holder;
        self
    }

    /// The holder id, if any.
    pub fn holder_id(&self) -> Option<&'a str> {
        self.holder.map(Holder::id)
    }

    /// The holder's metadata, if any.
    pub fn metadata(&self) -> Option<&'a str> {
        self.holder.and_then(Holder::metadata)
    }
}

/// The answer of one acquire attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TryLock {
    /// Granted (or already ours: attempts with the same owner are idempotent).
    Acquired {
        /// The new fencing token.
        token: FencingToken,
    },
    /// Someone else holds it.
    Held {
        /// The holder's remaining lease, when the server says: waiters sleep no longer than this.
        remaining: Option<Duration>,
    },
}
