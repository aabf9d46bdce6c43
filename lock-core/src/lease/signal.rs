//! The lost signal of a lease: fires once, with a reason, and can be awaited from anywhere.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

/// Fires once when a lease is lost. Clone it freely; await [`LostSignal::fired`] in a `select!`.
#[derive(Clone)]
pub struct LostSignal {
    token: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl LostSignal {
    pub(super) fn new() -> Self {
        LostSignal { token: CancellationToken::new(), reason: Arc::new(OnceLock::new()) }
    }

    /// Resolves when the lease is lost (immediately if it already was). The future owns what
    /// it needs, so `lease.lost().fired()` can go straight into a `select!`.
    pub fn fired(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.token.clone().cancelled_owned()
    }

    /// Whether the lease has been lost.
    pub fn is_fired(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Why the lease was lost, once it was.
    pub fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }

    /// Fires the signal; returns false if it had fired before (it fires exactly once).
    pub(super) fn fire(&self, reason: &str) -> bool {
        if self.reason.set(reason.to_owned()).is_err() {
            return false;
        }
        self.token.cancel();
        true
    }
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal").field("fired", &self.is_fired()).field("reason", &self.reason()).finish()
    }
}
