//! The release hints of one process (lock-sql `local.rs`) on the databases that cannot notify:
//! a release wakes the waiter of this process with the earliest queue place, through any
//! backend of the process on the same database and table, and nobody else.

use std::time::Duration;

use lock_core::backend::{Claim, LeaseStore, ReleaseOutcome, TryLock};
use lock_core::{LockError, LockName, OwnerId};
use tokio::time::timeout;

use super::{Admin, Dialect, SqlFixture};

/// Two backends on one database and table (as two parts of one application), a third on
/// another table: a release through the first wakes the earliest of the second's two queued
/// waiters, not the later one and not the other table's. The hint grants nothing: the woken
/// waiter's attempt is what takes the lock.
pub async fn check_local_hints(fx: &SqlFixture) -> Result<(), LockError> {
    let (a, b) = (
        lock_sql::SqlBackend::connect(fx.url(), fx.options()).await?,
        lock_sql::SqlBackend::connect(fx.url(), fx.options()).await?,
    );
    let other_table = lock_sql::SqlOptions { table: format!("{}_other", fx.options().table), ..fx.options() };
    let c = lock_sql::SqlBackend::connect(fx.url(), other_table).await?;
    check_hints_between(&a, &b, &c).await?;
    drop((a, b, c));
    if fx.dialect() != Dialect::Sqlite {
        let t = format!("{}_other", fx.options().table);
        Admin::connect(fx).await.run(&format!("DROP TABLE `{t}`, `{t}_waiters`")).await;
    }
    Ok(())
}

/// [`check_local_hints`] over three backends built by the caller: `a` and `b` on one database
/// and table (from a URL, or over the application's pool), `c` on another table of it.
pub async fn check_hints_between(
    a: &lock_sql::SqlBackend,
    b: &lock_sql::SqlBackend,
    c: &lock_sql::SqlBackend,
) -> Result<(), LockError> {
    let (la, lb, lc) = (a.lock(), b.lock(), c.lock());
    let (sa, sb, sc) = (la.store(), lb.store(), lc.store());
    let name = LockName::new(format!("hint-{}", OwnerId::random().to_hex()))?;
    let ttl = Duration::from_secs(10);
    let (holder, first, second, elsewhere) =
        (OwnerId::random(), OwnerId::random(), OwnerId::random(), OwnerId::random());
    let got = sa.try_lock(&Claim::new(&name, holder, ttl), false).await?;
    assert!(matches!(got, TryLock::Acquired { .. }), "a free lock: {got:?}");
    assert!(matches!(sc.try_lock(&Claim::new(&name, OwnerId::random(), ttl), false).await?, TryLock::Acquired { .. }));
    let mut subs = Vec::new();
    for (store, owner) in [(sb, first), (sb, second), (sc, elsewhere)] {
        let queued = store.try_lock(&Claim::new(&name, owner, ttl), true).await?;
        assert!(matches!(queued, TryLock::Held { .. }), "held, queued: {queued:?}");
        let sub = store.subscribe_waiter(&name, owner).await?.expect("a waiter of this process hears its releases");
        assert!(sub.live_since().is_some(), "no second attempt needed after subscribing");
        subs.push(sub);
        // A place is the enqueue's clock reading, in ms on SQLite: two waiters queued within
        // one ms are ordered by owner id, and the earliest would be either (a CI failure).
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert_eq!(sa.release(&name, holder).await?, ReleaseOutcome::Released);
    let woken = |i: usize| timeout(Duration::from_millis(200), subs[i].woken());
    assert!(woken(0).await.is_ok(), "the earliest waiter of this process was not woken by the release");
    assert!(woken(1).await.is_err(), "a release wakes one waiter, the earliest");
    assert!(woken(2).await.is_err(), "a release of another table woke its waiter");
    let turn = sb.try_lock(&Claim::new(&name, first, ttl), true).await?;
    assert!(matches!(turn, TryLock::Acquired { .. }), "the woken waiter's attempt takes the lock: {turn:?}");
    assert_eq!(sb.release(&name, first).await?, ReleaseOutcome::Released);
    assert!(woken(1).await.is_ok(), "the next waiter is woken by the next release");
    let turn = sb.try_lock(&Claim::new(&name, second, ttl), true).await?;
    assert!(matches!(turn, TryLock::Acquired { .. }), "{turn:?}");
    assert_eq!(sb.release(&name, second).await?, ReleaseOutcome::Released);
    Ok(())
}
