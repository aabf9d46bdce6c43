//! An optional observer of one lease's life, set with [`AcquireOptions::events`]: how a metrics
//! layer sees renewals, losses and the end of a hold while the backends know nothing of it.
//!
//! [`AcquireOptions::events`]: crate::AcquireOptions::events

use std::sync::Arc;
use std::time::Duration;

use crate::LockError;

/// Called by a [`Lease`](crate::Lease) as its life goes on. Exactly one of [`LeaseEvents::lost`]
/// and [`LeaseEvents::released`] is called per lease, once. Calls come from the runtime's
/// watchdog driver (one task for every lease of the runtime) or the caller's task: keep them
/// short and non-blocking (count, record, return), or every lease's renewals wait. A hook that
/// panics is caught: a panic in `renewed` or `renew_failed` loses that lease (its lost signal
/// fires and it is released in the background), one in `lost` or `released` is logged; no other
/// lease is affected.
pub trait LeaseEvents: Send + Sync + 'static {
    /// A renewal succeeded (the watchdog's or [`Lease::renew`](crate::Lease::renew)).
    fn renewed(&self) {}
    /// A renewal failed with this error; the lease may still be valid and the watchdog retries.
    fn renew_failed(&self, _error: &LockError) {}
    /// The lease was lost after being held for `held`; `reason` as its lost signal gives it.
    fn lost(&self, _reason: &str, _held: Duration) {}
    /// The holder released or dropped the lease after holding it for `held`.
    fn released(&self, _held: Duration) {}
}

/// A shared [`LeaseEvents`] in [`AcquireOptions`](crate::AcquireOptions). Two are equal when
/// they are the same observer.
#[derive(Clone)]
pub struct EventsRef(pub Arc<dyn LeaseEvents>);

impl std::fmt::Debug for EventsRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventsRef(..)")
    }
}

impl PartialEq for EventsRef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}

impl Eq for EventsRef {}
