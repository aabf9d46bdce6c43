//! Faults stay local (docs/contract.md §3, SPEC §4): a panic in one lease's `LeaseEvents` hook
//! loses that lease — its lost signal fires — and no other lease of the runtime stops renewing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::LeaseEvents;

use super::{ensure, eventually, fail, ms, CaseResult, Ctx};
use crate::Fixture;

/// Panics in `renewed`, the hook a watchdog's renewal calls.
struct PanicsOnRenewal;

impl LeaseEvents for PanicsOnRenewal {
    fn renewed(&self) {
        panic!("conformance case panicking_hook_loses_only_its_lease: a LeaseEvents hook panics on purpose");
    }
}

/// Counts renewals.
#[derive(Default)]
struct Renewals(AtomicUsize);

impl LeaseEvents for Renewals {
    fn renewed(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Lease A's `renewed` hook panics at its first renewal; lease B, of another client on the same
/// runtime, has a well-behaved observer. A's lost signal must fire (by its first validity, with
/// a margin) and A turn invalid; B must keep renewing for three more ttls and stay valid; A's
/// lock must then be free for others (released, or expired).
pub async fn panicking_hook_loses_only_its_lease(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "panicking_hook_loses_only_its_lease").await?;
    let (na, nb) = (cx.name("a")?, cx.name("b")?);
    let (a, b, c) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let ttl = cx.ttl();
    let counter = Arc::new(Renewals::default());
    let good = b.acquire(&nb, &cx.opts(ttl).events(counter.clone())).await?;
    let bad = a.acquire(&na, &cx.opts(ttl).events(Arc::new(PanicsOnRenewal))).await?;
    // The first renewal comes at about a third of the ttl.
    if tokio::time::timeout(ttl * 2, bad.lost().fired()).await.is_err() {
        let renewing = good.is_valid();
        fail!(
            "the lease whose hook panicked never heard of it: no lost signal within {} ms (is_valid {}); the other \
             lease is {}",
            ms(ttl * 2),
            bad.is_valid(),
            if renewing { "still valid" } else { "no longer valid either: one panic stopped every lease" }
        );
    }
    ensure!(!bad.is_valid(), "the lost signal fired but is_valid() is still true");
    let reason = bad.lost().reason().unwrap_or_default().to_owned();
    let before = counter.0.load(Ordering::SeqCst);
    tokio::time::sleep(ttl * 3).await;
    let renewed = counter.0.load(Ordering::SeqCst) - before;
    ensure!(
        good.is_valid() && !good.lost().is_fired(),
        "a panic in another lease's hook cost this lease too: lost {:?}, valid {}",
        good.lost().reason(),
        good.is_valid()
    );
    ensure!(renewed >= 3, "the other lease renewed only {renewed} time(s) in three ttls after the panic");
    good.release().await?;
    let probe = cx.opts(Duration::ZERO);
    let within = cx.expiry() * 2;
    let free = eventually(within, Duration::from_millis(20), || {
        let (c, na, probe) = (c.clone(), na.clone(), probe.clone());
        async move {
            match c.try_acquire(&na, &probe).await {
                Ok(Some(l)) => l.release().await.is_ok(),
                _ => false,
            }
        }
    })
    .await;
    ensure!(free, "the lock of the lease lost to a panic was still taken {} ms later", ms(within));
    Ok(format!("lost with \"{reason}\"; the other lease renewed {renewed} times in three ttls"))
}
