//! What one acquisition needs of its lock client while it works over one session: the session,
//! the URL (where the nodes live, with which ACL) and the client's shared hints and counters.
//! The acquisition borrows these, not the client, so it depends on nothing that depends on it.

use std::sync::atomic::AtomicU64;

use crate::config::ZkUrl;
use crate::hints::Hints;
use crate::keeper::Session;

/// One pass of an acquisition over one session.
pub(crate) struct Scope<'a> {
    pub(crate) session: Session,
    pub(crate) url: &'a ZkUrl,
    /// Parents known to exist, so that acquires skip creating them.
    pub(crate) parents: &'a Hints,
    /// Parents whose lock this client last found busy with a try (see `acquire::Attempt::busy_listing`).
    pub(crate) busy: &'a Hints,
    /// The client's count of fired watches (`ZkLock::watch_events`).
    pub(crate) watch_events: &'a AtomicU64,
}
