//! What a backend supplies for a lease and hands over with a grant: the owner-checked renew
//! and release of one grant ([`LeaseHandle`]), their answers, and the grant itself
//! ([`LeaseGrant`]). A leaf: the rest of `lease/` builds on these.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::{FencingToken, LockError, LockName, OwnerId};

/// The answer of a renewal on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// Still ours (on per-lock backends the lease now runs until `now + ttl`, server clock).
    Renewed,
    /// Another owner holds it, or no entry exists: the lease is lost.
    NotOwner,
}

/// The answer of a release on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// It was ours and is now free.
    Released,
    /// It was no longer ours; nothing was changed.
    NotOwner,
}

impl RenewOutcome {
    /// A renewal used as `hold_at_least`'s early release (it sets the lease's end) answers as
    /// that release: ours, so free then; or not ours.
    pub(crate) fn as_release(self) -> ReleaseOutcome {
        match self {
            RenewOutcome::Renewed => ReleaseOutcome::Released,
            RenewOutcome::NotOwner => ReleaseOutcome::NotOwner,
        }
    }
}

/// The backend-specific part of a lease: an owner-checked renew and release of one grant.
#[async_trait]
pub trait LeaseHandle: Send + Sync + 'static {
    /// Confirms this grant still owns the lock and, on per-lock backends, extends its server-side
    /// lease to `now + ttl` (server clock). Per-session backends (ZooKeeper) ignore `ttl`: the
    /// session, kept alive by the client, is the lease (docs/contract.md §3).
    async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError>;
    /// Frees the lock if this grant still owns it.
    async fn release(&self) -> Result<ReleaseOutcome, LockError>;

    /// Frees the lock `after` from now if this grant still owns it (`hold_at_least`,
    /// docs/contract.md §3); `Released` means it is ours and will be free then. By default an
    /// owner-checked renewal for `after`, which on per-lock backends makes the server-side lease
    /// end then. Per-session backends (ZooKeeper), whose renewal ignores the ttl, override it.
    async fn release_after(&self, after: Duration) -> Result<ReleaseOutcome, LockError> {
        Ok(self.renew(after).await?.as_release())
    }
}

/// What a backend hands to [`Lease::new`](crate::Lease::new) after the server granted a lock.
#[derive(Clone)]
#[non_exhaustive]
pub struct LeaseGrant {
    /// The lock's name.
    pub name: LockName,
    /// The fencing token of this acquisition.
    pub token: FencingToken,
    /// The owner id stored on the server.
    pub owner: OwnerId,
    /// The monotonic instant taken before the successful request was sent.
    pub started: Instant,
    /// Owner-checked renew and release.
    pub handle: Arc<dyn LeaseHandle>,
    /// Added to the options' drift allowance ([`Capabilities::max_clock_offset`](crate::Capabilities::max_clock_offset));
    /// zero unless set with [`LeaseGrant::with_clock_offset`].
    pub max_clock_offset: Duration,
    /// Set with [`LeaseGrant::provisional`]: the server's grant lasts this long from `started`
    /// until the lease's first renewal claims it.
    pub provisional: Option<Duration>,
    /// Set with [`LeaseGrant::claim_deferred`]: the provisional grant's claim may wait a third
    /// of its window.
    pub deferred_claim: bool,
}

impl LeaseGrant {
    /// Bundles a grant.
    pub fn new(
        name: LockName,
        token: FencingToken,
        owner: OwnerId,
        started: Instant,
        handle: Arc<dyn LeaseHandle>,
    ) -> Self {
        LeaseGrant {
            name,
            token,
            owner,
            started,
            handle,
            max_clock_offset: Duration::ZERO,
            provisional: None,
            deferred_claim: false,
        }
    }

    /// A grant the server made for `window` only (a grant pushed to a waiter, which it has yet
    /// to claim): the lease is valid until `started + min(window, ttl) − drift`, and its first
    /// renewal, which the lease sends at once (and again while it fails and the window lasts;
    /// a third into the window with [`LeaseGrant::claim_deferred`]), is the claim; once
    /// answered, the lease counts a whole ttl from that renewal's send. The
    /// handle's renew answers that first renewal (`NotOwner` when the grant was not this
    /// lease's any more).
    pub fn provisional(mut self, window: Duration) -> Self {
        self.provisional = Some(window);
        self
    }

    /// With [`LeaseGrant::provisional`]: the claim is the first renewal a third into the
    /// window (the watchdog's, or the lease's own claim task's without auto-renewal), not at
    /// once, so that a hold shorter than that never
    /// claims; a release before it means it is never sent
    /// ([`PushedGrant::claim_deferred`](crate::backend::PushedGrant::claim_deferred)).
    pub fn claim_deferred(mut self) -> Self {
        self.deferred_claim = true;
        self
    }

    /// Shortens the lease's validity by `offset` beyond the drift allowance: the servers'
    /// clocks may disagree by that much ([`Capabilities::max_clock_offset`](crate::Capabilities::max_clock_offset)).
    pub fn with_clock_offset(mut self, offset: Duration) -> Self {
        self.max_clock_offset = offset;
        self
    }
}
