//! PostgreSQL's grant in the release (lock-sql `handoff.rs`), at the store level: where the
//! head's validity starts, and a head that leaves with a grant in flight.

use std::time::Duration;

use lock_core::{clock_drift, Claim, Holder, LeaseStore, LockError, LockName, OwnerId, ReleaseOutcome, TryLock};
use tokio::time::{sleep, timeout, Instant};

use super::SqlFixture;

/// Queues `owner` as a waiter of `name` (the wait's first attempt and the re-try after the
/// subscription, as `acquire` does); refused both times. Returns the subscription.
async fn queue(store: &lock_sql::SqlStore, claim: &Claim<'_>) -> Result<lock_core::WakeSubscription, LockError> {
    let sub = store.subscribe_waiter(claim.name, claim.owner).await?.expect("postgres notifies waiters");
    for _ in 0..2 {
        let got = store.try_claim(claim, true).await?;
        assert!(matches!(got, TryLock::Held { .. }), "held by another: {got:?}");
    }
    Ok(sub)
}

/// The head must not start its validity when it hears of the grant: the server's lease began
/// at the release. The head queues, the holder releases 1.5 s later (granting the head in the
/// same statement), and the head takes the grant only 1 s after the notification (a slow
/// listener or a busy runtime). Its `valid_until` (start + ttl − drift) must still end before
/// the server's `expires_at`, read back by `inspect` (lower bound: the read's send instant +
/// the remaining lease). A head that started at the notification would be ~1 s past it.
pub async fn check_handoff_validity(fx: &SqlFixture) -> Result<(), LockError> {
    let lock = fx.sql_client().await?;
    let store = lock.store();
    let name = LockName::new("handoff-validity")?;
    let ttl = Duration::from_secs(8);
    let (holder, head) = (OwnerId::random(), OwnerId::random());
    let TryLock::Acquired { token: first } = store.try_lock(&name, holder, ttl).await? else { panic!("free") };
    let who = Holder::new("the-head")?.with_metadata("m")?;
    let claim = Claim::new(&name, head, ttl).holder(Some(&who));
    let sub = queue(store, &claim).await?;
    let queued = Instant::now();
    sleep(Duration::from_millis(1500)).await;
    assert_eq!(store.release(&name, holder).await?, ReleaseOutcome::Released);
    timeout(Duration::from_secs(2), sub.woken()).await.expect("the head is notified of its grant");
    sleep(Duration::from_millis(1000)).await;
    let got = store.try_claim(&claim, true).await?;
    let TryLock::HandedOver { token, started } = got else { panic!("expected the release's hand-off, got {got:?}") };
    assert!(token > first, "fence {token:?} after {first:?}");
    let asked = Instant::now();
    let info = store.inspect(&name).await?.expect("granted to the head");
    let server_end = asked + info.remaining.expect("a remaining lease");
    let valid_until = started + ttl - clock_drift(ttl);
    assert!(
        valid_until <= server_end,
        "the head's validity ends {:?} after the server's lease (started {:?} after it queued)",
        valid_until - server_end,
        started.saturating_duration_since(queued)
    );
    assert!(started <= queued, "validity starts at the head's last queue statement, before {queued:?}");
    assert_eq!((info.token, info.holder.as_deref(), info.metadata.as_deref()), (token, Some("the-head"), Some("m")));
    assert_eq!(store.release(&name, head).await?, ReleaseOutcome::Released);
    Ok(())
}

/// The head's wait ends (time-out, drop) while the release's grant to it is in flight: its
/// leave releases the grant and hands the lock on to the next head, who takes it.
pub async fn check_handoff_leave(fx: &SqlFixture) -> Result<(), LockError> {
    let lock = fx.sql_client().await?;
    let store = lock.store();
    let name = LockName::new("handoff-leave")?;
    let ttl = Duration::from_secs(30);
    let (holder, a, b) = (OwnerId::random(), OwnerId::random(), OwnerId::random());
    let TryLock::Acquired { token: first } = store.try_lock(&name, holder, ttl).await? else { panic!("free") };
    let (ca, cb) = (Claim::new(&name, a, ttl), Claim::new(&name, b, ttl));
    let _sa = queue(store, &ca).await?;
    let sb = queue(store, &cb).await?;
    assert_eq!(store.release(&name, holder).await?, ReleaseOutcome::Released);
    let granted = store.inspect(&name).await?.expect("granted to the head");
    assert!(granted.token > first);
    // `a` never takes it: its wait ends.
    store.abandon(&name, a).await?;
    timeout(Duration::from_secs(2), sb.woken()).await.expect("the next head is notified");
    let got = store.try_claim(&cb, true).await?;
    let token = match got {
        TryLock::HandedOver { token, .. } | TryLock::Acquired { token } => token,
        other => panic!("the next head gets the lock: {other:?}"),
    };
    assert!(token > granted.token, "fence {token:?} after {:?}", granted.token);
    assert_eq!(store.release(&name, a).await?, ReleaseOutcome::NotOwner, "a's grant was handed on");
    assert_eq!(store.release(&name, b).await?, ReleaseOutcome::Released);
    assert!(store.inspect(&name).await?.is_none(), "free at the end");
    Ok(())
}
