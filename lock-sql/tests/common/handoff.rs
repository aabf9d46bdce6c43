//! PostgreSQL's grant in the release (lock-sql `dialect/postgres/handoff.rs`), at the store
//! level: the head's claim, a head that leaves with a grant in flight, a head that never claims,
//! and a leave cut short; and the forged grant notifications of the conformance suite's
//! `forged_grant_ignored`.

use std::time::Duration;

use lock_core::{
    backend::{Claim, LeaseStore, ReleaseOutcome, TryLock},
    clock_drift, Holder, LockError, LockName, OwnerId,
};
use tokio::time::{sleep, timeout, Instant};

use super::SqlFixture;

/// Queues `owner` as a waiter of `name` (the wait's first attempt and the re-try after the
/// subscription, as `acquire` does); refused both times. Returns the subscription.
async fn queue(
    store: &lock_sql::SqlStore,
    claim: &Claim<'_>,
) -> Result<lock_core::backend::WakeSubscription, LockError> {
    let sub = store.subscribe_waiter(claim.name, claim.owner).await?.expect("postgres notifies waiters");
    for _ in 0..2 {
        let got = store.try_lock(claim, true).await?;
        assert!(matches!(got, TryLock::Held { .. }), "held by another: {got:?}");
    }
    Ok(sub)
}

/// The release's grant to the head is provisional (lock-sql `dialect/postgres/handoff.rs`): it
/// lasts the claim window (1 s, not the head's 8 s ttl) until the head claims it; the claim
/// returns the row's fence as an ordinary grant (validity from the claim's own send instant) and
/// extends the lease to the head's ttl, with the holder and metadata its queue entry carried.
pub async fn check_handoff_claim(fx: &SqlFixture) -> Result<(), LockError> {
    let lock = fx.sql_client().await?;
    let store = lock.store();
    let name = LockName::new("handoff-validity")?;
    let ttl = Duration::from_secs(8);
    let (holder, head) = (OwnerId::random(), OwnerId::random());
    let TryLock::Acquired { token: first } = store.try_lock(&Claim::new(&name, holder, ttl), false).await? else {
        panic!("free")
    };
    let who = Holder::new("the-head")?.with_metadata("m")?;
    let claim = Claim::new(&name, head, ttl).holder(Some(&who));
    let sub = queue(store, &claim).await?;
    assert_eq!(store.release(&name, holder).await?, ReleaseOutcome::Released);
    timeout(Duration::from_secs(2), sub.woken()).await.expect("the head is notified of its grant");
    let provisional = store.inspect(&name).await?.expect("granted to the head");
    let left = provisional.remaining.expect("a remaining lease");
    assert!(left <= Duration::from_secs(1), "an unclaimed grant lasts the claim window, not the ttl: {left:?}");
    let sent = Instant::now();
    let got = store.try_lock(&claim, true).await?;
    let TryLock::Acquired { token } = got else { panic!("expected the claimed grant, got {got:?}") };
    assert_eq!(token, provisional.token, "the claim returns the row's fence");
    assert!(token > first, "fence {token:?} after {first:?}");
    let info = store.inspect(&name).await?.expect("held by the head");
    let left = info.remaining.expect("a remaining lease");
    assert!(left > ttl - Duration::from_secs(2), "the claim extends the lease to the ttl: {left:?}");
    assert!(sent + ttl - clock_drift(ttl) <= Instant::now() + left, "validity within the server's lease");
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
    let TryLock::Acquired { token: first } = store.try_lock(&Claim::new(&name, holder, ttl), false).await? else {
        panic!("free")
    };
    let (ca, cb) = (Claim::new(&name, a, ttl), Claim::new(&name, b, ttl));
    let _sa = queue(store, &ca).await?;
    let sb = queue(store, &cb).await?;
    assert_eq!(store.release(&name, holder).await?, ReleaseOutcome::Released);
    let granted = store.inspect(&name).await?.expect("granted to the head");
    assert!(granted.token > first);
    // `a` never takes it: its wait ends.
    store.abandon(&name, a).await?;
    timeout(Duration::from_secs(2), sb.woken()).await.expect("the next head is notified");
    let got = store.try_lock(&cb, true).await?;
    let TryLock::Acquired { token } = got else { panic!("the next head gets the lock: {got:?}") };
    assert!(token > granted.token, "fence {token:?} after {:?}", granted.token);
    assert_eq!(store.release(&name, a).await?, ReleaseOutcome::NotOwner, "a's grant was handed on");
    assert_eq!(store.release(&name, b).await?, ReleaseOutcome::Released);
    assert!(store.inspect(&name).await?.is_none(), "free at the end");
    Ok(())
}

/// A head that never takes up its grant (its process died; here: it queued and then does
/// nothing) holds the lock only for the claim window (1 s), not its 30 s ttl: a next waiter
/// queued behind it holds within `max(claim window, 4 × max_poll) + a statement` (≤ 2 s plus
/// one statement here, asserted with slack at 5 s), and with nobody else waiting a newcomer's
/// `try_acquire` gets it once the window has passed.
pub async fn check_dead_head_lapses(fx: &SqlFixture) -> Result<(), LockError> {
    use lock_core::{AcquireOptions, DistributedLock};
    let (lock, next) = (fx.sql_client().await?, fx.sql_client().await?);
    let store = lock.store();
    let ttl = Duration::from_secs(30);
    let opts = AcquireOptions::new(ttl).wait(Duration::from_secs(20));
    for behind in [true, false] {
        let name = LockName::new(format!("dead-head-{behind}"))?;
        let (holder, dead) = (OwnerId::random(), OwnerId::random());
        let TryLock::Acquired { .. } = store.try_lock(&Claim::new(&name, holder, ttl), false).await? else {
            panic!("free")
        };
        let _sub = queue(store, &Claim::new(&name, dead, ttl)).await?;
        let waiter = behind.then(|| {
            let (next, name, opts) = (next.clone(), name.clone(), opts.clone());
            tokio::spawn(async move { next.acquire(&name, &opts).await })
        });
        // The next waiter queues behind the dead head before the release.
        sleep(Duration::from_millis(300)).await;
        assert_eq!(store.release(&name, holder).await?, ReleaseOutcome::Released);
        let released = Instant::now();
        let lease = match waiter {
            Some(w) => w.await.expect("waiter task").map_err(|e| {
                LockError::backend(
                    "test",
                    format!("the next waiter behind a dead head: {e} after {:?}", released.elapsed()),
                )
            })?,
            None => loop {
                if let Some(lease) = next.try_acquire(&name, &opts).await? {
                    break lease;
                }
                assert!(released.elapsed() < Duration::from_secs(5), "a dead head's grant still holds the lock");
                sleep(Duration::from_millis(20)).await;
            },
        };
        let took = released.elapsed();
        eprintln!("behind a dead head (next waiter queued: {behind}): held {took:?} after the release");
        assert!(took < Duration::from_secs(5), "a dead head held the lock {took:?} (ttl {ttl:?})");
        assert!(took >= Duration::from_millis(900), "not before the claim window ended: {took:?}");
        lease.release().await?;
    }
    Ok(())
}

/// A waiter's clean-up that is cut short (the bounded inline one at its deadline: here its
/// first statement is held up by a locked queue row past the bound) while a release's grant to
/// it is in flight must be finished by the later (background) one: the lock is free at once
/// after it, not only once the grant lapses.
pub async fn check_cut_abandon_finishes(fx: &SqlFixture) -> Result<(), LockError> {
    use sqlx::Connection;
    let lock = fx.sql_client().await?;
    let store = lock.store();
    let table = fx.options().table;
    let name = LockName::new("cut-abandon")?;
    let ttl = Duration::from_secs(30);
    let (holder, a) = (OwnerId::random(), OwnerId::random());
    let TryLock::Acquired { .. } = store.try_lock(&Claim::new(&name, holder, ttl), false).await? else {
        panic!("free")
    };
    let _sa = queue(store, &Claim::new(&name, a, ttl)).await?;
    let mut admin = sqlx::PgConnection::connect(fx.url()).await.expect("admin");
    // A lapsed entry the waiter's leave deletes too (it clears the name's lapsed entries).
    let q = format!("\"{table}_waiters\"");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {q} (name, owner, seq, expires_at) VALUES ('cut-abandon', 'lapsed', 0, 0)"
    )))
    .execute(&mut admin)
    .await
    .expect("insert");
    assert_eq!(store.release(&name, holder).await?, ReleaseOutcome::Released);
    assert!(store.inspect(&name).await?.is_some(), "granted to the head");
    let mut tx = admin.begin().await.expect("begin");
    sqlx::query(sqlx::AssertSqlSafe(format!("SELECT * FROM {q} WHERE owner = 'lapsed' FOR UPDATE")))
        .execute(&mut *tx)
        .await
        .expect("lock the lapsed entry");
    let cut = timeout(Duration::from_millis(200), store.abandon(&name, a)).await;
    assert!(cut.is_err(), "the clean-up should be held up by the locked row: {cut:?}");
    tx.commit().await.expect("commit");
    // The background clean-up.
    store.abandon(&name, a).await?;
    let other = OwnerId::random();
    let got = store.try_lock(&Claim::new(&name, other, ttl), false).await?;
    assert!(
        matches!(got, TryLock::Acquired { .. }),
        "the grant to a waiter that left still holds the lock after its clean-up: {got:?}"
    );
    store.release(&name, other).await?;
    Ok(())
}

/// What a role that may only `SELECT` the lock's tables can send the waiters of `name` (`NOTIFY`
/// needs no privilege): for every queue entry of the name, `dlock-grant:<owner>:<token>` on the
/// table's channel and on the channel the entry names (`wake`). The number of notifications sent.
pub async fn forge_pg_grants(url: &str, table: &str, name: &LockName, token: u64) -> Result<usize, LockError> {
    use sqlx::Connection;
    let test_error = |e: sqlx::Error| LockError::backend("test", e);
    let mut c = sqlx::PgConnection::connect(url).await.map_err(test_error)?;
    let entries: Vec<(String, Option<String>)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT owner, wake FROM \"{table}_waiters\" WHERE name = $1")))
            .bind(name.as_str())
            .fetch_all(&mut c)
            .await
            .map_err(test_error)?;
    let mut sent = 0;
    for (owner, wake) in &entries {
        let forged = format!("dlock-grant:{owner}:{token}");
        for channel in std::iter::once(table).chain(wake.as_deref()) {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(channel)
                .bind(&forged)
                .execute(&mut c)
                .await
                .map_err(test_error)?;
            sent += 1;
        }
    }
    c.close().await.map_err(test_error)?;
    Ok(sent)
}
