//! Backend checks of the SQL safety fixes (lost replies, starved renewals, least privilege),
//! shared by the PostgreSQL and MySQL test files.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    backend::{Claim, LeaseStore, TryLock},
    LockError, LockName, OwnerId,
};
use sqlx::Executor;
use tokio::time::Instant;

use super::{Dialect, SqlFixture};

/// A release whose UPDATE/DELETE commits while the reply is lost (the connection is reset while
/// the answer is on its way back) is re-run on another connection; that re-run finds nothing of
/// ours, because we freed it: it must answer `Released`, not `NotOwner` (which the lease reports
/// as lost). For the exclusive lock, the write side and a permit.
pub async fn check_release_after_lost_reply(fx: &SqlFixture) -> Result<(), LockError> {
    use lock_conformance::ClientLink;
    let Some((url, proxy)) = fx.linked_url().await? else { panic!("needs a network fixture") };
    let exclusive = lock_sql::connect(&url, fx.options()).await?;
    let rw = lock_sql::connect_rw(&url, fx.options()).await?;
    let sem = lock_sql::connect_semaphore(&url, fx.options()).await?;
    let [_, (_, write)] = rw.lease_stores();
    let stores: [(&str, Arc<dyn LeaseStore>); 3] = [
        ("exclusive", Arc::clone(exclusive.store()) as Arc<dyn LeaseStore>),
        ("write", write),
        ("permit", sem.lease_store(1)?),
    ];
    let latency = Duration::from_millis(300);
    let ttl = Duration::from_secs(20);
    for (label, store) in stores {
        let name = LockName::new(format!("lost-reply-{label}"))?;
        let me = OwnerId::random();
        assert!(
            matches!(store.try_lock(&Claim::new(&name, me, ttl), false).await?, TryLock::Acquired { .. }),
            "{label}: free"
        );
        proxy.set_latency(latency).await;
        let release = {
            let (store, name) = (Arc::clone(&store), name.clone());
            tokio::spawn(async move { store.release(&name, me).await })
        };
        // The request reaches the server after `latency` and commits; the reply would take as
        // long again: reset the connection while it is on its way.
        tokio::time::sleep(latency * 3 / 2).await;
        proxy.reset_connections().await;
        proxy.set_latency(Duration::ZERO).await;
        let outcome = release.await.expect("release task")?;
        assert_eq!(
            outcome,
            lock_core::backend::ReleaseOutcome::Released,
            "{label}: a committed release whose reply was lost"
        );
        let other = OwnerId::random();
        assert!(
            matches!(store.try_lock(&Claim::new(&name, other, ttl), false).await?, TryLock::Acquired { .. }),
            "{label}: the lock must really be free"
        );
        store.release(&name, other).await?;
    }
    Ok(())
}

/// A read-write lock on `url` whose read side (a lease store) has granted `conflict` to a first
/// reader for `ttl`: the lock (keep it), the read side, the name and that reader.
pub async fn conflict_reader(
    url: &str,
    options: lock_sql::SqlOptions,
    ttl: Duration,
) -> (lock_sql::SqlRwLock, Arc<dyn LeaseStore>, LockName, OwnerId) {
    let rw = lock_sql::connect_rw(url, options).await.unwrap();
    let [(_, read), _] = rw.lease_stores();
    let name = LockName::new("conflict").unwrap();
    let first = OwnerId::random();
    assert!(matches!(read.try_lock(&Claim::new(&name, first, ttl), false).await.unwrap(), TryLock::Acquired { .. }));
    (rw, read, name, first)
}

/// A plain connection of the test itself, holding row locks in an open transaction.
pub enum Admin {
    Postgres(sqlx::PgConnection),
    Mysql(sqlx::MySqlConnection),
}

impl Admin {
    /// Rolls back the transaction [`Admin::lock_rows`] opened after `ms`, in a task that hands
    /// the connection back.
    pub fn rollback_after(mut self, ms: u64) -> tokio::task::JoinHandle<Admin> {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            self.run("ROLLBACK").await;
            self
        })
    }

    pub async fn connect(fx: &SqlFixture) -> Admin {
        use sqlx::Connection;
        match fx.dialect() {
            Dialect::Postgres => {
                Admin::Postgres(sqlx::PgConnection::connect(fx.url()).await.expect("admin connection"))
            }
            Dialect::Mysql => Admin::Mysql(sqlx::MySqlConnection::connect(fx.url()).await.expect("admin connection")),
            Dialect::Sqlite => panic!("needs a server"),
        }
    }

    /// Runs `sql` with the table's quote characters written as `"`.
    pub async fn run(&mut self, sql: &str) {
        match self {
            Admin::Postgres(c) => c.execute(sqlx::AssertSqlSafe(sql.to_owned())).await.map(drop),
            Admin::Mysql(c) => c.execute(sqlx::AssertSqlSafe(sql.replace('"', "`"))).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Whether `sql` (as for [`Admin::count`]) counts any row within `within`, asked every 10 ms.
    pub async fn counts_within(&mut self, sql: &str, within: Duration) -> bool {
        let end = tokio::time::Instant::now() + within;
        loop {
            if self.count(sql).await > 0 {
                return true;
            }
            if tokio::time::Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The one number `sql` (quotes written as `"`) answers.
    pub async fn count(&mut self, sql: &str) -> i64 {
        match self {
            Admin::Postgres(c) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(c).await,
            Admin::Mysql(c) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql.replace('"', "`"))).fetch_one(c).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Opens a transaction that locks the rows of `table` matching `cond` (plain test names).
    pub async fn lock_rows(&mut self, table: &str, cond: &str) {
        let begin = match self {
            Admin::Postgres(_) => "BEGIN",
            Admin::Mysql(_) => "START TRANSACTION",
        };
        self.run(begin).await;
        self.run(&format!("SELECT * FROM \"{table}\" WHERE {cond} FOR UPDATE")).await;
    }
}

/// Renew and release of one lease never wait behind another lease: a renewal
/// that hangs on a row locked by another transaction does not delay the renewal of a lease
/// whose owner id shared one of the 64 stripes of old; and a burst of acquires that occupy
/// every pooled connection (each blocked on a locked row) does not delay a renewal either.
pub async fn check_renewals_not_starved(fx: &SqlFixture) -> Result<(), LockError> {
    let table = fx.options().table;
    let ttl = Duration::from_secs(5);
    let quick = Duration::from_millis(700);
    let mut admin = Admin::connect(fx).await;

    // One hung renewal.
    let lock = fx.sql_client().await?;
    let store = Arc::clone(lock.store());
    let owner = |n: u128| OwnerId::from_hex(&format!("{n:032x}")).expect("32 hex digits");
    let (a, b) = (owner(0x1_0000_0001), owner(0x1_0000_0041));
    let (na, nb) = (LockName::new("hung-a")?, LockName::new("hung-b")?);
    assert!(matches!(store.try_lock(&Claim::new(&na, a, ttl), false).await?, TryLock::Acquired { .. }));
    assert!(matches!(store.try_lock(&Claim::new(&nb, b, ttl), false).await?, TryLock::Acquired { .. }));
    admin.lock_rows(&table, "name = 'hung-a'").await;
    let hung = {
        let (store, na) = (Arc::clone(&store), na.clone());
        tokio::spawn(async move { store.renew(&na, a, ttl).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    let renewed = store.renew(&nb, b, ttl).await;
    let took = t.elapsed();
    admin.run("ROLLBACK").await;
    let _ = hung.await;
    assert_eq!(renewed?, lock_core::backend::RenewOutcome::Renewed);
    assert!(took < quick, "a renewal waited {took:?} behind another lease's hung renewal");

    // A burst of acquires, each holding a pooled connection while it waits for a row lock.
    let rw = lock_sql::connect_rw(fx.url(), fx.options()).await?;
    let [(_, read), (_, write)] = rw.lease_stores();
    let (w, nw, nx) = (OwnerId::random(), LockName::new("burst-held")?, LockName::new("burst-busy")?);
    assert!(matches!(write.try_lock(&Claim::new(&nw, w, ttl), false).await?, TryLock::Acquired { .. }));
    let r0 = OwnerId::random();
    assert!(matches!(read.try_lock(&Claim::new(&nx, r0, ttl), false).await?, TryLock::Acquired { .. }));
    read.release(&nx, r0).await?;
    admin.lock_rows(&format!("{table}_counters"), "kind = 'rw' AND name = 'burst-busy'").await;
    let burst: Vec<_> = (0..2 * fx.options().max_connections)
        .map(|_| {
            let (read, nx) = (Arc::clone(&read), nx.clone());
            tokio::spawn(async move { read.try_lock(&Claim::new(&nx, OwnerId::random(), ttl), false).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let renewed = write.renew(&nw, w, ttl).await;
    let took = t.elapsed();
    admin.run("ROLLBACK").await;
    for b in burst {
        let _ = b.await;
    }
    assert_eq!(renewed?, lock_core::backend::RenewOutcome::Renewed, "renewal behind a burst of waiting acquires");
    assert!(took < quick, "a renewal waited {took:?} behind a burst of waiting acquires");
    assert_eq!(write.release(&nw, w).await?, lock_core::backend::ReleaseOutcome::Released);
    Ok(())
}

/// The documented privileges are enough once the tables exist, and a missing one is a `Config`
/// error that names what the user needs. A fresh database user gets exactly
/// SELECT, INSERT, UPDATE on the lease table and SELECT, INSERT, UPDATE, DELETE on the two
/// tables of the kinds (no CREATE): every kind acquires, renews and releases; without DELETE
/// on the holders table, a read acquire is a `Config` error naming DELETE.
pub async fn check_least_privilege(fx: &SqlFixture) -> Result<(), LockError> {
    let t = fx.options().table;
    let user = format!("dlock_u_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let mut admin = Admin::connect(fx).await;
    // The tables, made by a user who may.
    drop(lock_sql::connect_rw(fx.url(), fx.options()).await?);
    let (grantee, create) = match fx.dialect() {
        Dialect::Postgres => (user.clone(), format!("CREATE ROLE {user} LOGIN")),
        _ => (format!("'{user}'@'%'"), format!("CREATE USER '{user}'@'%'")),
    };
    admin.run(&create).await;
    admin.run(&format!("GRANT SELECT, INSERT, UPDATE ON \"{t}\" TO {grantee}")).await;
    for kind_table in [format!("{t}_waiters"), format!("{t}_counters"), format!("{t}_holders")] {
        admin.run(&format!("GRANT SELECT, INSERT, UPDATE, DELETE ON \"{kind_table}\" TO {grantee}")).await;
    }
    let mut url = url::Url::parse(fx.url()).map_err(|e| LockError::config(format!("bad test URL: {e}")))?;
    url.set_username(&user).map_err(|_| LockError::config("bad test URL: cannot set the user"))?;
    url.set_password(None).map_err(|_| LockError::config("bad test URL: cannot clear the password"))?;
    let url = url.to_string();

    let result = async {
        let exclusive = lock_sql::connect(&url, fx.options()).await?;
        let rw = lock_sql::connect_rw(&url, fx.options()).await?;
        let sem = lock_sql::connect_semaphore(&url, fx.options()).await?;
        let mut stores = vec![("exclusive", Arc::clone(exclusive.store()) as Arc<dyn LeaseStore>)];
        stores.extend(rw.lease_stores());
        stores.push(("permit", sem.lease_store(1)?));
        let ttl = Duration::from_secs(5);
        for (label, store) in &stores {
            let (name, me) = (LockName::new(format!("least-{label}"))?, OwnerId::random());
            assert!(
                matches!(store.try_lock(&Claim::new(&name, me, ttl), false).await?, TryLock::Acquired { .. }),
                "{label}"
            );
            assert_eq!(store.renew(&name, me, ttl).await?, lock_core::backend::RenewOutcome::Renewed, "{label}");
            assert_eq!(store.release(&name, me).await?, lock_core::backend::ReleaseOutcome::Released, "{label}");
        }
        admin.run(&format!("REVOKE DELETE ON \"{t}_holders\" FROM {grantee}")).await;
        let read = &stores[1].1;
        match read.try_lock(&Claim::new(&LockName::new("least-denied")?, OwnerId::random(), ttl), false).await {
            Err(LockError::Config { reason: message, .. }) => {
                assert!(message.contains("DELETE") && message.contains("denied"), "{message}");
            }
            other => panic!("a missing DELETE privilege must be a Config error naming it, got {other:?}"),
        }
        Ok::<(), LockError>(())
    }
    .await;
    let drop_user = match fx.dialect() {
        Dialect::Postgres => vec![format!("DROP OWNED BY {user}"), format!("DROP ROLE {user}")],
        _ => vec![format!("DROP USER {grantee}")],
    };
    for sql in drop_user {
        admin.run(&sql).await;
    }
    result
}

/// A lease table without the holder columns (docs/contract.md §5.6; the shape of the first
/// versions) is a table of another shape: connecting refuses it with a `Config` error naming
/// the columns, and leaves it as it was (no `ALTER`, its row untouched).
pub async fn check_old_table_is_refused(fx: &SqlFixture) -> Result<(), LockError> {
    let t = format!("dlock_old_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let mut admin = Admin::connect(fx).await;
    let ddl = match fx.dialect() {
        Dialect::Postgres => format!(
            "CREATE TABLE \"{t}\" (name TEXT COLLATE \"C\" NOT NULL PRIMARY KEY, owner TEXT, \
             fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)"
        ),
        _ => format!(
            "CREATE TABLE \"{t}\" (name VARBINARY(255) NOT NULL PRIMARY KEY, owner VARBINARY(32) NULL, \
             fence BIGINT NOT NULL, expires_at BIGINT NOT NULL) ENGINE=InnoDB"
        ),
    };
    admin.run(&ddl).await;
    admin.run(&format!("INSERT INTO \"{t}\" (name, owner, fence, expires_at) VALUES ('old', NULL, 41, 0)")).await;
    let refused = lock_sql::connect(fx.url(), fx.options().table(t.clone())).await;
    let result = match refused {
        Err(LockError::Config { reason }) => {
            assert!(reason.contains("holder") && reason.contains("metadata"), "names the columns: {reason}");
            Ok(())
        }
        Err(e) => Err(e),
        Ok(_) => panic!("a lease table without the holder columns was used"),
    };
    let untouched = admin.count(&format!("SELECT COUNT(*) FROM \"{t}\" WHERE name = 'old' AND fence = 41")).await;
    admin.run(&format!("DROP TABLE \"{t}\"")).await;
    assert_eq!(untouched, 1, "the table is left as it was");
    result
}

/// An acquire abandoned while its statement is still on its way (the caller's timeout fired)
/// is cleaned up by a release that, on another connection, overtakes it; the statement then
/// lands and takes the lock for an owner nobody has. The release is repeated soon, so another
/// client gets the lock within a second and a half, not only once the statement's bound (here
/// 2 × 2 s) has passed. (The conformance case `release_cancelled` failed about one run in ten on this.)
pub async fn check_overtaken_acquire_is_freed_soon(fx: &SqlFixture) -> Result<(), LockError> {
    use lock_conformance::ClientLink;
    use lock_core::{AcquireOptions, DistributedLock};
    let Some((url, proxy)) = fx.linked_url().await? else { panic!("needs a network fixture") };
    let holder = lock_sql::connect(&url, fx.options()).await?;
    let other = fx.sql_client().await?;
    let opts = AcquireOptions::new(Duration::from_secs(30)).request_timeout(Duration::from_secs(2));
    let name = LockName::new(format!("overtaken-{}", OwnerId::random().to_hex()))?;
    // A connection in the pool with the acquire statement prepared first, so the statement
    // itself (not a connect or a prepare) is what is in transit.
    holder.acquire(&name, &opts).await?.release().await?;
    let latency = Duration::from_millis(100);
    proxy.set_latency(latency).await;
    let abandoned = tokio::time::timeout(Duration::from_millis(20), holder.acquire(&name, &opts)).await;
    assert!(abandoned.is_err(), "the acquire answered within 20 ms through a {latency:?} link");
    // The background release goes out on another connection, now without latency, and finds
    // nothing; the statement lands `latency` after it was sent and takes the free lock.
    proxy.set_latency(Duration::ZERO).await;
    tokio::time::sleep(latency * 3).await;
    let t = Instant::now();
    let got = other.acquire(&name, &opts.clone().wait(Duration::from_millis(1500))).await;
    let took = t.elapsed();
    assert!(got.is_ok(), "the overtaken acquire's grant kept the lock taken: {got:?} after {took:?}");
    got?.release().await?;
    eprintln!("an overtaken acquire's grant was freed; the lock was free again after {took:?}");
    Ok(())
}

/// Queue entries of waiters that are gone never hold a free lock back: many
/// waiters cancelled (futures dropped at staggered instants, so at every await point: before,
/// during and after their statements) while a 2 s lease is held; once it is released, a
/// newcomer's `try_acquire` succeeds within 1 s. (Before, late statements of cancelled
/// attempts re-queued their departed waiters, whose entries then counted for their whole
/// lifetime: 4–5 s.)
pub async fn check_cancelled_waiters_leave_no_trace(fx: &SqlFixture) -> Result<(), LockError> {
    use lock_core::{AcquireOptions, DistributedLock};
    let (holder, waiters, fresh) = (fx.sql_client().await?, fx.sql_client().await?, fx.sql_client().await?);
    let opts = AcquireOptions::new(Duration::from_secs(2)).wait(Duration::from_secs(10));
    for round in 0..3 {
        let name = LockName::new(format!("cancelled-many-{round}"))?;
        let held = holder.acquire(&name, &opts).await?;
        let tasks: Vec<_> = (0..24u64)
            .map(|i| {
                let (waiters, name, opts) = (waiters.clone(), name.clone(), opts.clone());
                let cut = Duration::from_micros(300 + (i * 7919 + round * 104_729) % 60_000);
                tokio::spawn(async move { tokio::time::timeout(cut, waiters.acquire(&name, &opts)).await.is_err() })
            })
            .collect();
        for t in tasks {
            assert!(t.await.expect("waiter task"), "every waiter is cancelled while the lock is held");
        }
        held.release().await?;
        // The background clean-ups of the cancelled waiters (each a couple of statements).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t = Instant::now();
        let lease = loop {
            if let Some(lease) = fresh.try_acquire(&name, &opts).await? {
                break lease;
            }
            assert!(
                t.elapsed() < Duration::from_secs(1),
                "round {round}: a free lock refused a newcomer for {:?} after its waiters were cancelled",
                t.elapsed() + Duration::from_millis(300)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        lease.release().await?;
    }
    Ok(())
}

/// The subject of the tests in which one locked row must stall no other renewal: 60 leases
/// `stall-0` … `stall-59` (ttl 3 s, renewed in shared rounds) of one client whose request
/// timeout is 6 s, and that client, which must outlive them.
pub async fn stall_leases(fx: &SqlFixture) -> (lock_sql::SqlLock, Vec<lock_core::Lease>) {
    use lock_core::{AcquireOptions, DistributedLock};
    let options = lock_sql::SqlOptions { request_timeout: Duration::from_secs(6), ..fx.options() };
    let lock = lock_sql::connect(fx.url(), options).await.unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(3));
    let names: Vec<LockName> = (0..60).map(|i| LockName::new(format!("stall-{i}")).unwrap()).collect();
    let leases = futures::future::try_join_all(names.iter().map(|n| lock.acquire(n, &opts))).await.unwrap();
    (lock, leases)
}

/// A statement of ours that started before a newer one of the same lease committed, and ran
/// after it, never moves the lease's end back. The database clock such a statement reads is its
/// start (PostgreSQL's `now()`, MySQL's `UTC_TIMESTAMP()`), and it runs late when it waited for
/// the row (a waiter's attempt holds it locked) or the server was paused; the client counts its
/// validity from the newer one, so an end set back by the late one would free the lock to
/// others while the client still holds it. Here the newer statement is the test's own: it
/// extends the lease by a minute and keeps the row locked while the late renewal (then the
/// owner's own acquire, which re-grants its row) starts and waits. For the exclusive lock and
/// the write side of a read-write lock.
pub async fn check_late_statements_never_shorten(fx: &SqlFixture) -> Result<(), LockError> {
    let table = fx.options().table;
    let ttl = Duration::from_secs(10);
    let mut admin = Admin::connect(fx).await;
    let mut shortened = Vec::new();
    let lock = fx.sql_client().await?;
    let rw = lock_sql::connect_rw(fx.url(), fx.options()).await?;
    let [_, (_, write)] = rw.lease_stores();
    let cases: [(&str, Arc<dyn LeaseStore>, String); 2] = [
        ("exclusive", Arc::clone(lock.store()) as Arc<dyn LeaseStore>, format!("\"{table}\"")),
        ("write", write, format!("\"{table}_holders\"")),
    ];
    for (label, store, rows) in cases {
        for late in ["renewal", "own acquire"] {
            let name = LockName::new(format!("late-{label}-{}", &OwnerId::random().to_hex()[..8]))?;
            let me = OwnerId::random();
            let claim = Claim::new(&name, me, ttl);
            assert!(matches!(store.try_lock(&claim, false).await?, TryLock::Acquired { .. }), "{label}: free");
            let row = format!("{rows} WHERE name = '{name}' AND owner = '{}'", me.to_hex());
            let begun = admin.count(&format!("SELECT expires_at FROM {row}")).await;
            admin.run(if fx.dialect() == Dialect::Postgres { "BEGIN" } else { "START TRANSACTION" }).await;
            admin.run(&format!("UPDATE {rows} SET expires_at = expires_at + 60000 WHERE name = '{name}'")).await;
            let statement = {
                let (store, name) = (Arc::clone(&store), name.clone());
                tokio::spawn(async move {
                    if late == "renewal" {
                        store.renew(&name, me, ttl).await.map(|r| r == lock_core::backend::RenewOutcome::Renewed)
                    } else {
                        let claim = Claim::new(&name, me, ttl);
                        store.try_lock(&claim, false).await.map(|t| matches!(t, TryLock::Acquired { .. }))
                    }
                })
            };
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                !statement.is_finished(),
                "{label}, {late}: it did not wait for the locked row: the case did not happen"
            );
            admin.run("COMMIT").await;
            assert!(statement.await.expect("statement task")?, "{label}, {late}: still ours");
            let ends = admin.count(&format!("SELECT expires_at FROM {row}")).await;
            if ends < begun + 60_000 {
                let back = begun + 60_000 - ends;
                shortened.push(format!("{label}: the late {late} moved the lease's end back by {back} ms"));
            }
            store.release(&name, me).await?;
        }
    }
    assert!(shortened.is_empty(), "{} (to the clock it started at + ttl)", shortened.join("; "));
    Ok(())
}
