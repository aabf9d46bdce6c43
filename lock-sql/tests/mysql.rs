//! The SQL backend on MySQL/MariaDB (`DLOCK_TEST_MYSQL_URL`, default the local test server): the
//! conformance suite plus MySQL-specific checks.

mod common;
#[macro_use]
mod extras;

use std::time::Duration;

use common::SqlFixture;

lock_conformance::conformance_tests!(mysql, || async { crate::common::SqlFixture::mysql().await });
lock_conformance::waiter_child_test!(common::connect_child);

server_extra_tests!(mysql_server, mysql, mysql_private, Mysql);

#[tokio::test]
async fn extra_unreachable_is_unavailable() {
    common::check_unreachable("mysql://root@127.0.0.1:1/test").await;
    common::check_unreachable("mariadb://root@127.0.0.1:1/test").await;
}

/// Polling: a waiter gets the lock within its capped back-off after the release.
#[tokio::test]
async fn extra_poll_wakes_waiter() {
    common::check_wake_latency(&SqlFixture::mysql().await.unwrap(), "mysql", Duration::from_millis(1000)).await;
}

/// MySQL proper has no `INSERT … RETURNING`; on MariaDB the same two-statement path (upsert,
/// then read the row back) is forced by `DLOCK_SQL_MYSQL_RETURNING=0`. Run under nextest, this
/// test has its process to itself; under `cargo test` other tests of this binary may take the
/// same path meanwhile, which is equally correct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_mysql_path_without_returning() {
    std::env::set_var("DLOCK_SQL_MYSQL_RETURNING", "0");
    let fx = SqlFixture::mysql().await.unwrap();
    common::check_idempotent_and_remaining(&fx).await.unwrap();
    common::check_hostile_names(&fx).await.unwrap();
    common::check_counter(&fx, 5, 10).await.unwrap();
    common::check_takeover_fence(&fx).await.unwrap();
    // The queue's summary read back, not returned.
    check_queue_summary(&fx).await;
}

/// Durable fencing is declared only when InnoDB writes its log at every commit:
/// the setting is global, so lock-sql checks it at connect. A private server, switched to 2
/// (commits survive a crash of mysqld but not of the host) and back to 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_durable_fencing_follows_innodb_flush_setting() {
    use dlock_testkit::servers::mysql::MysqlServer;
    use lock_core::LockService;
    use sqlx::{Connection, Executor};
    let server = MysqlServer::start_local().await.expect("a private mariadb server");
    let mut admin = sqlx::MySqlConnection::connect(server.url()).await.unwrap();
    let options = lock_sql::SqlOptions::default();
    for (flush, durable) in [(2, false), (0, false), (1, true)] {
        admin
            .execute(sqlx::AssertSqlSafe(format!("SET GLOBAL innodb_flush_log_at_trx_commit = {flush}")))
            .await
            .unwrap();
        let lock = lock_sql::connect(server.url(), options.clone()).await.unwrap();
        assert_eq!(lock.capabilities().durable_fencing, durable, "innodb_flush_log_at_trx_commit = {flush}");
        let sem = lock_sql::connect_semaphore(server.url(), options.clone()).await.unwrap();
        assert_eq!(sem.capabilities().durable_fencing, durable, "semaphore, innodb_flush_log_at_trx_commit = {flush}");
    }
}

/// On MySQL/MariaDB: an acquire transaction that fails is rolled back before its
/// pooled connection is reused. A lock-wait timeout (1205, which on InnoDB ends only the
/// statement and leaves the transaction open) is re-run and granted once the row is free; a
/// failure that ends the attempt (here a refused DELETE after the counter row was locked) leaves
/// no transaction behind: the counter row is free at once for everyone else, where a connection
/// returned inside its transaction would keep it locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_conflict_rolls_back_before_reuse() {
    use lock_core::{
        backend::{Claim, TryLock},
        OwnerId,
    };
    let fx = SqlFixture::mysql().await.unwrap();
    let t = fx.options().table;
    // innodb_lock_wait_timeout = 2 s (whole seconds of request_timeout); 0.9 s left to re-run.
    let options =
        lock_sql::SqlOptions { max_connections: 1, request_timeout: Duration::from_millis(2900), ..fx.options() };
    let ttl = Duration::from_secs(10);
    let (_rw, read, name, first) = common::conflict_reader(fx.url(), options.clone(), ttl).await;

    // The holder rows locked: the acquire's purge waits, times out after 2 s (1205), is re-run.
    let mut admin = common::Admin::connect(&fx).await;
    admin.lock_rows(&format!("{t}_holders"), "kind = 'rw' AND name = 'conflict'").await;
    let unlock = admin.rollback_after(2300);
    let second = OwnerId::random();
    let started = std::time::Instant::now();
    let got = read.try_lock(&Claim::new(&name, second, ttl), false).await;
    let mut admin = unlock.await.unwrap();
    assert!(matches!(got, Ok(TryLock::Acquired { .. })), "after a lock-wait timeout: {got:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the first attempt waited out the lock: {:?}",
        started.elapsed()
    );
    assert_eq!(read.renew(&name, first, ttl).await.unwrap(), lock_core::backend::RenewOutcome::Renewed);
    assert_counter_row_free(&mut admin, &t).await;

    // An attempt that fails for good after locking the counter row: a user without DELETE on
    // the holders table (the purge is refused, 1142).
    let user = format!("dlock_rb_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    admin.run(&format!("CREATE USER '{user}'@'%'")).await;
    admin.run(&format!("GRANT SELECT, INSERT, UPDATE ON \"{t}\" TO '{user}'@'%'")).await;
    admin.run(&format!("GRANT SELECT, INSERT, UPDATE, DELETE ON \"{t}_waiters\" TO '{user}'@'%'")).await;
    admin.run(&format!("GRANT SELECT, INSERT, UPDATE ON \"{t}_counters\" TO '{user}'@'%'")).await;
    admin.run(&format!("GRANT SELECT, INSERT, UPDATE ON \"{t}_holders\" TO '{user}'@'%'")).await;
    let mut url = url::Url::parse(fx.url()).unwrap();
    url.set_username(&user).unwrap();
    url.set_password(None).unwrap();
    let result = async {
        let rw = lock_sql::connect_rw(url.as_str(), options).await?;
        let [(_, read), _] = rw.lease_stores();
        let refused = read.try_lock(&Claim::new(&name, OwnerId::random(), ttl), false).await;
        assert!(matches!(&refused, Err(lock_core::LockError::Config { .. })), "{refused:?}");
        // The connection went back to the pool; the row it locked must be free.
        assert_counter_row_free(&mut admin, &t).await;
        drop(rw);
        Ok::<_, lock_core::LockError>(())
    }
    .await;
    admin.run(&format!("DROP USER '{user}'@'%'")).await;
    result.unwrap();
}

/// Another session can lock the read-write lock's counter row without waiting.
async fn assert_counter_row_free(admin: &mut common::Admin, t: &str) {
    let common::Admin::Mysql(c) = admin else { panic!("a MySQL admin") };
    use sqlx::Executor;
    c.execute("START TRANSACTION").await.unwrap();
    let sql = format!("SELECT fence FROM `{t}_counters` WHERE kind = 'rw' AND name = 'conflict' FOR UPDATE NOWAIT");
    let locked = c.execute(sqlx::AssertSqlSafe(sql)).await;
    c.execute("ROLLBACK").await.unwrap();
    assert!(locked.is_ok(), "the counter row is still locked by a pooled connection's transaction: {locked:?}");
}

/// The acquire upsert evaluates its condition once, into `@dlock_granted`, which its later
/// assignments read. Under both assignment modes (MariaDB's `SIMULTANEOUS_ASSIGNMENT` makes every
/// assignment see the old row) and with the variable left at 1 in the session before each
/// attempt, a held lock is refused with its holder's row untouched, a re-grant keeps its token,
/// and a free lock is granted with a greater token.
#[tokio::test]
async fn extra_acquire_condition_once_in_both_assignment_modes() {
    use lock_core::{
        backend::{Claim, LeaseStore, TryLock},
        LockName, OwnerId,
    };
    use sqlx::Executor;
    let fx = SqlFixture::mysql().await.unwrap();
    let name = LockName::new("condition-once").unwrap();
    let ttl = Duration::from_secs(10);
    for mode in ["", ",SIMULTANEOUS_ASSIGNMENT"] {
        let set = format!("SET SESSION sql_mode = CONCAT(@@sql_mode, '{mode}')");
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(1)
            .after_connect(move |c, _| {
                let set = set.clone();
                Box::pin(async move { c.execute(sqlx::AssertSqlSafe(set)).await.map(drop) })
            })
            .connect(fx.url())
            .await
            .unwrap();
        let backend = lock_sql::SqlBackend::from_mysql_pool(pool.clone(), fx.options()).await.unwrap();
        let lock = backend.lock();
        let store = lock.store();
        let stale = || async { sqlx::query("SET @dlock_granted = 1").execute(&pool).await.unwrap() };
        let (a, b) = (OwnerId::random(), OwnerId::random());
        stale().await;
        let TryLock::Acquired { token: t1 } = store.try_lock(&Claim::new(&name, a, ttl), false).await.unwrap() else {
            panic!("free")
        };
        stale().await;
        let held = store.try_lock(&Claim::new(&name, b, ttl), false).await.unwrap();
        assert!(matches!(held, TryLock::Held { remaining: Some(_) }), "mode {mode:?}: held, got {held:?}");
        stale().await;
        let again = store.try_lock(&Claim::new(&name, a, ttl), false).await.unwrap();
        assert!(matches!(again, TryLock::Acquired { token } if token == t1), "mode {mode:?}: re-grant, {again:?}");
        assert_eq!(store.release(&name, b).await.unwrap(), lock_core::backend::ReleaseOutcome::NotOwner);
        assert_eq!(store.release(&name, a).await.unwrap(), lock_core::backend::ReleaseOutcome::Released);
        stale().await;
        let TryLock::Acquired { token: t2 } = store.try_lock(&Claim::new(&name, b, ttl), false).await.unwrap() else {
            panic!("free")
        };
        assert!(t2 > t1, "mode {mode:?}: the token must grow");
        assert_eq!(store.release(&name, b).await.unwrap(), lock_core::backend::ReleaseOutcome::Released);
    }
}

/// One lease's trouble never delays another's renewal: 200
/// leases renewed in shared rounds over a 30 ms link, one of them force-released. MySQL's
/// batched UPDATE then matches one row fewer than it was given; asking each lease on its own
/// after that (one round trip each, in sequence: seconds) lost every lease of the round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_a_lease_lost_in_a_round_delays_no_other() {
    use lock_conformance::ClientLink;
    use lock_core::{AcquireOptions, DistributedLock, LockName};
    let fx = SqlFixture::mysql().await.unwrap();
    let (url, proxy) = fx.linked_url().await.unwrap().expect("a network fixture");
    let lock = lock_sql::connect(&url, fx.options()).await.unwrap();
    let admin = fx.sql_client().await.unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(3));
    let names: Vec<LockName> = (0..200).map(|i| LockName::new(format!("round-{i}")).unwrap()).collect();
    let leases = futures::future::try_join_all(names.iter().map(|n| lock.acquire(n, &opts))).await.unwrap();
    proxy.set_latency(Duration::from_millis(30)).await;
    assert!(admin.force_release(&names[0]).await.unwrap().is_some(), "force-released");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let lost: Vec<&str> = leases[1..].iter().filter(|l| !l.is_valid()).map(|l| l.name().as_str()).collect();
    assert!(lost.is_empty(), "{} leases lost beside the force-released one: {lost:?}", lost.len());
    assert!(!leases[0].is_valid(), "the force-released lease is lost");
    proxy.set_latency(Duration::ZERO).await;
    for lease in leases.into_iter().skip(1) {
        lease.release().await.unwrap();
    }
}

/// One locked row stalls no other renewal of its round: 60 leases renewed in
/// shared rounds (ttl 3 s); another transaction locks one lease's row for 4.5 s. Every other
/// lease stays valid. Before, the round's one UPDATE waited on the locked row (up to the lock
/// wait timeout, then again on every retry) until every lease of the round had expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_a_locked_row_stalls_no_other_renewal() {
    let fx = SqlFixture::mysql().await.unwrap();
    let (_lock, leases) = common::stall_leases(&fx).await;
    let table = fx.options().table;
    let mut admin = common::Admin::connect(&fx).await;
    admin.lock_rows(&table, "name = 'stall-0'").await;
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let lost: Vec<&str> = leases[1..].iter().filter(|l| !l.is_valid()).map(|l| l.name().as_str()).collect();
    admin.run("ROLLBACK").await;
    assert!(lost.is_empty(), "{} leases lost beside the one whose row was locked: {lost:?}", lost.len());
    for lease in leases.into_iter().skip(1) {
        lease.release().await.unwrap();
    }
}

/// The queue's summary on the lease row (`dialect/mysql/sql.rs`): a caller not queued reads
/// `queued_until` instead of the queue. A free row owed to a queued waiter is still refused to
/// a newcomer, and once every waiter has left, a newcomer is granted the row although the
/// summary still lies ahead (it is asked again with the queue's own check). The waiter here
/// attempts only when the test says so, as a waiter between two polls would.
#[tokio::test]
async fn extra_queue_summary_keeps_the_order_and_lets_go_when_waiters_leave() {
    check_queue_summary(&SqlFixture::mysql().await.unwrap()).await;
}

/// [`extra_queue_summary_keeps_the_order_and_lets_go_when_waiters_leave`] on `fx`.
async fn check_queue_summary(fx: &SqlFixture) {
    use lock_core::backend::{Claim, LeaseStore, ReleaseOutcome, TryLock};
    use lock_core::{LockName, OwnerId};
    let backend = lock_sql::SqlBackend::connect(fx.url(), fx.options()).await.unwrap();
    let lock = backend.lock();
    let store = lock.store();
    let name = LockName::new(format!("summary-{}", OwnerId::random().to_hex())).unwrap();
    let ttl = Duration::from_secs(10);
    let (holder, waiter, newcomer) = (OwnerId::random(), OwnerId::random(), OwnerId::random());
    let name = &name;
    let attempt = |owner, waiting| async move { store.try_lock(&Claim::new(name, owner, ttl), waiting).await.unwrap() };
    assert!(matches!(attempt(holder, false).await, TryLock::Acquired { .. }), "a free lock");
    let queued = attempt(waiter, true).await;
    assert!(matches!(queued, TryLock::Held { remaining: Some(_) }), "held, the waiter queued: {queued:?}");
    assert_eq!(store.release(name, holder).await.unwrap(), ReleaseOutcome::Released);
    let owed = attempt(newcomer, false).await;
    assert!(matches!(owed, TryLock::Held { .. }), "a free row owed to a queued waiter went to a newcomer: {owed:?}");
    let releaser = attempt(holder, false).await;
    assert!(
        matches!(releaser, TryLock::Held { .. }),
        "the releaser came straight back ahead of the waiter: {releaser:?}"
    );
    assert!(matches!(attempt(waiter, true).await, TryLock::Acquired { .. }), "the queued waiter's turn");
    assert_eq!(store.release(name, waiter).await.unwrap(), ReleaseOutcome::Released);
    let after = attempt(newcomer, false).await;
    assert!(matches!(after, TryLock::Acquired { .. }), "every waiter left, yet a newcomer was refused: {after:?}");
    assert_eq!(store.release(name, newcomer).await.unwrap(), ReleaseOutcome::Released);
}

/// The collector keeps a lease row whose queue summary is still live: deleting it would let a
/// newcomer's fresh row (summary 0) overtake the waiters queued on the old one.
#[tokio::test]
async fn extra_collecting_idle_rows_keeps_a_row_with_live_waiters() {
    use lock_core::backend::{Claim, LeaseStore, ReleaseOutcome, TryLock};
    use lock_core::{LockName, OwnerId};
    let fx = SqlFixture::mysql().await.unwrap();
    let backend = lock_sql::SqlBackend::connect(fx.url(), fx.options()).await.unwrap();
    let lock = backend.lock();
    let store = lock.store();
    let name = LockName::new(format!("collect-{}", OwnerId::random().to_hex())).unwrap();
    let (holder, waiter, newcomer) = (OwnerId::random(), OwnerId::random(), OwnerId::random());
    let short = Duration::from_millis(300);
    let got = store.try_lock(&Claim::new(&name, holder, short), false).await.unwrap();
    assert!(matches!(got, TryLock::Acquired { .. }), "a free lock: {got:?}");
    // Queued for the queue's lifetime at a 10 s ttl (seconds), far past the holder's lease.
    let long = Duration::from_secs(10);
    let queued = store.try_lock(&Claim::new(&name, waiter, long), true).await.unwrap();
    assert!(matches!(queued, TryLock::Held { remaining: Some(_) }), "held, the waiter queued: {queued:?}");
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    // The holder's lease has ended: its row is idle by its end alone.
    store.collect_idle(Duration::ZERO).await.unwrap();
    let owed = store.try_lock(&Claim::new(&name, newcomer, long), false).await.unwrap();
    assert!(matches!(owed, TryLock::Held { .. }), "the collector's deletion let a newcomer overtake: {owed:?}");
    let turn = store.try_lock(&Claim::new(&name, waiter, long), true).await.unwrap();
    assert!(matches!(turn, TryLock::Acquired { .. }), "the queued waiter's turn: {turn:?}");
    assert_eq!(store.release(&name, waiter).await.unwrap(), ReleaseOutcome::Released);
}

/// A release wakes the earliest waiter of this process at once (lock-sql `local.rs`).
#[tokio::test]
async fn extra_a_release_wakes_this_process_s_earliest_waiter() {
    common::check_local_hints(&SqlFixture::mysql().await.unwrap()).await.unwrap();
}
