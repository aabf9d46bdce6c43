//! The SQL backend on PostgreSQL (`DLOCK_TEST_POSTGRES_URL`, default the local test server): the
//! conformance suite plus PostgreSQL-specific checks.

mod common;
#[macro_use]
mod extras;

use std::sync::Arc;
use std::time::Duration;

use common::SqlFixture;
use lock_core::backend::{Claim, LeaseStore, TryLock};
use lock_core::{AcquireOptions, DistributedLock, DistributedSemaphore, LockName, OwnerId};

lock_conformance::conformance_tests!(postgres, || async { crate::common::SqlFixture::postgres().await });
lock_conformance::waiter_child_test!(common::connect_child);

server_extra_tests!(postgres_server, postgres, postgres_private, Postgres);

check_tests!(SqlFixture::postgres; extra_table_of_another_owner_is_refused => check_foreign_owner);

#[tokio::test]
async fn extra_unreachable_is_unavailable() {
    common::check_unreachable("postgres://postgres@127.0.0.1:1/test").await;
}

check_tests!(multi SqlFixture::postgres;
    // The grant in the release: provisional until the head claims it (the claim's answer is the
    // lease), and a head that leaves with a grant in flight hands it on.
    extra_handoff_is_provisional_until_claimed => check_handoff_claim,
    extra_handoff_leave_hands_on => check_handoff_leave,
    // A grant nobody takes up lapses after the claim window.
    extra_a_dead_heads_grant_lapses => check_dead_head_lapses,
    // A waiter's clean-up cut short with a grant in flight is finished by the next.
    extra_a_cut_abandon_is_finished_later => check_cut_abandon_finishes,
);

/// LISTEN/NOTIFY: a waiter gets the lock right after the release, long before any poll or
/// the 10 s lease would have let it in.
#[tokio::test]
async fn extra_notify_wakes_waiter_fast() {
    let fx = SqlFixture::postgres().await.unwrap();
    common::check_wake_latency(&fx, "postgres", Duration::from_millis(300)).await;
}

/// TLS comes from the URL (rustls): `sslmode=require` encrypts (the server's own pg_stat_ssl
/// says so), and `sslmode=verify-full` refuses this server's self-signed certificate instead of
/// silently connecting in the clear. Needs a server with `ssl = on` (Debian's default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_tls_from_url() {
    use sqlx::Executor;
    let fx = SqlFixture::postgres().await.unwrap();
    let admin = sqlx::PgPool::connect(fx.url()).await.unwrap();
    let ssl_on: String = sqlx::query_scalar("SHOW ssl").fetch_one(&admin).await.unwrap();
    if ssl_on != "on" {
        eprintln!("NOT RUN: the server has ssl = {ssl_on}");
        return;
    }
    let sep = if fx.url().contains('?') { '&' } else { '?' };
    // A session name of our own, to find exactly this client's sessions.
    let app = format!("dlock_tls_{}", std::process::id());
    let url = format!("{}{sep}sslmode=require&application_name={app}", fx.url());
    let lock = lock_sql::connect(&url, fx.options()).await.unwrap();
    let name = LockName::new("tls").unwrap();
    let lease = lock.try_acquire(&name, &AcquireOptions::new(Duration::from_secs(2))).await.unwrap().expect("free");
    let (plain, encrypted): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE NOT s.ssl), count(*) FILTER (WHERE s.ssl) \
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1",
    )
    .bind(&app)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(encrypted >= 2 && plain == 0, "sessions of the client: {encrypted} encrypted, {plain} plain");
    lease.release().await.unwrap();

    let strict = format!("{}{sep}sslmode=verify-full", fx.url());
    let r = lock_sql::connect(&strict, fx.options()).await;
    assert!(matches!(r, Err(lock_core::LockError::Unavailable { .. })), "{:?}", r.err());
    admin.execute("SELECT 1").await.unwrap();
}

/// The LISTEN connection is killed on the server (`pg_terminate_backend`): the client reconnects
/// on its own and waiters are again woken by NOTIFY, not by their fallback timers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_listener_reconnects() {
    use lock_conformance::Fixture;
    use tokio::time::Instant;
    let fx = SqlFixture::postgres().await.unwrap();
    let admin = sqlx::PgPool::connect(fx.url()).await.unwrap();
    let listen = format!("LISTEN \"{}\"", fx.options().table);
    let a = fx.client().await.unwrap();
    let b = fx.client().await.unwrap();
    let killed: Vec<bool> =
        sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE starts_with(query, $1)")
            .bind(&listen)
            .fetch_all(&admin)
            .await
            .unwrap();
    assert_eq!(killed.len(), 2, "each client keeps one LISTEN connection");
    let back = async {
        loop {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE starts_with(query, $1)")
                .bind(&listen)
                .fetch_one(&admin)
                .await
                .unwrap();
            if n == 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), back).await.expect("listeners did not reconnect");

    let name = LockName::new("relisten").unwrap();
    let o = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(20));
    let held = a.try_acquire(&name, &o).await.unwrap().expect("free");
    let waiter = tokio::spawn(async move {
        let lease = b.acquire(&name, &o).await.unwrap();
        let at = Instant::now();
        lease.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let latency = waiter.await.unwrap() - released;
    eprintln!("wake-up latency after the listeners reconnected: {latency:?}");
    assert!(latency < Duration::from_millis(300), "{latency:?}: woken by a timer, not by NOTIFY");
}

/// Durable fencing rests on durable commits. The server acknowledges commits
/// before they are written (`synchronous_commit = off`, WAL writer every 10 s), and is killed
/// (SIGKILL) right after several grants: our sessions set `synchronous_commit = on` themselves,
/// so after the restart the next token of the lock and of the semaphore is above the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_fences_survive_a_crash_of_an_async_commit_server() {
    use dlock_testkit::servers::postgres::PostgresServer;
    use sqlx::Connection;
    let server = PostgresServer::start_local_with(&["synchronous_commit=off", "wal_writer_delay=10000ms"])
        .await
        .expect("a private postgres server");
    let control = server.control().expect("a local server");
    let mut plain = sqlx::PgConnection::connect(server.url()).await.unwrap();
    let setting: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut plain).await.unwrap();
    assert_eq!(setting, "off", "the server must default to asynchronous commits, or this test proves nothing");
    drop(plain);
    let options = lock_sql::SqlOptions::default();
    let opts = AcquireOptions::new(Duration::from_secs(30)).request_timeout(Duration::from_secs(5));
    let name = LockName::new("fences-survive-a-crash").unwrap();
    let lock = lock_sql::connect(server.url(), options.clone()).await.unwrap();
    let sem = lock_sql::connect_semaphore(server.url(), options.clone()).await.unwrap();
    let (mut last, mut last_permit) = (0, 0);
    for _ in 0..5 {
        let lease = lock.acquire(&name, &opts).await.unwrap();
        last = lease.token().get();
        lease.release().await.unwrap();
        let permit = sem.acquire_permit(&name, 1, &opts).await.unwrap();
        last_permit = permit.token().get();
        permit.release().await.unwrap();
    }
    control.stop().await.unwrap();
    drop((lock, sem));
    control.start().await.unwrap();
    let lock = lock_sql::connect(server.url(), options.clone()).await.unwrap();
    let sem = lock_sql::connect_semaphore(server.url(), options).await.unwrap();
    let next = lock.acquire(&name, &opts).await.unwrap().token().get();
    let next_permit = sem.acquire_permit(&name, 1, &opts).await.unwrap().token().get();
    assert!(next > last, "lock token {next} after the crash, {last} before it: a fence was lost");
    assert!(next_permit > last_permit, "permit token {next_permit} after the crash, {last_permit} before it");
}

/// Every release commits without waiting for the WAL flush (sql.rs `RELEASE_COMMITS_ASYNC`),
/// so a crash right after one may lose it. What such a crash must not do: bring back anything
/// but the released lease itself (its owner, its token, its end, never later), give the lock to
/// anyone before that lease's end, keep it past that end, or let a token go back. The WAL writer
/// waits 10 s here and the server is SIGKILLed right after the release, so the release is lost
/// unless something flushed it; the test says which happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_a_release_lost_in_a_crash_gives_the_lock_to_nobody_before_its_lease_ends() {
    use dlock_testkit::servers::postgres::PostgresServer;
    use tokio::time::Instant;
    let server =
        PostgresServer::start_local_with(&["wal_writer_delay=10000ms"]).await.expect("a private postgres server");
    let control = server.control().expect("a local server");
    let options = lock_sql::SqlOptions::default();
    // Longer than a restart takes, so that a lost release is still seen after it.
    let ttl = Duration::from_secs(10);
    let opts = AcquireOptions::new(ttl).request_timeout(Duration::from_secs(5));
    let name = LockName::new("release-lost-in-a-crash").unwrap();
    let lock = lock_sql::connect(server.url(), options.clone()).await.unwrap();
    let sent = Instant::now();
    let lease = lock.acquire(&name, &opts).await.unwrap();
    let token = lease.token().get();
    lease.release().await.unwrap();
    control.stop().await.unwrap();
    drop(lock);
    control.start().await.unwrap();
    let lock = lock_sql::connect(server.url(), options).await.unwrap();
    let back = lock.inspect(&name).await.unwrap();
    let looked = Instant::now();
    if let Some(info) = &back {
        assert_eq!(info.token.get(), token, "a crash brought back a lease that was not the released one: {info:?}");
        let left = info.remaining.expect("PostgreSQL knows a lease's time left");
        // The database's clock counted the lease from its statement, after `sent`; 50 ms for
        // the clocks' reading.
        assert!(
            looked + left <= sent + ttl + Duration::from_millis(50),
            "the lease came back longer than it was granted: {left:?} left {:?} after the grant's send",
            looked - sent
        );
        if left > Duration::from_millis(500) {
            let refused = lock.try_acquire(&name, &opts).await.unwrap();
            assert!(refused.is_none(), "the lease came back, yet the lock was granted: {refused:?}");
        }
    }
    let next = lock.acquire(&name, &opts.clone().wait(ttl * 2)).await.unwrap();
    let got = sent.elapsed();
    assert!(next.token().get() > token, "token {} after the crash, {token} before it", next.token());
    if back.is_some() {
        assert!(got + Duration::from_millis(50) >= ttl, "granted {got:?} after the first grant, inside its lease");
        assert!(got <= ttl + Duration::from_secs(2), "the lost release kept the lock past its lease: {got:?}");
    }
    next.release().await.unwrap();
    eprintln!(
        "MEASURED release then SIGKILL: the release was {} by the crash; the lock was granted again {got:?} after \
         the first grant (ttl {ttl:?})",
        if back.is_some() { "lost" } else { "kept" }
    );
}

/// A conflict inside an acquire transaction (here PostgreSQL's `lock_timeout`, set through the
/// URL, firing while a test transaction holds the counter row) rolls the transaction back
/// before the connection is reused: the re-run really runs, and the acquire is
/// granted once the row is free, instead of failing with "current transaction is aborted".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_conflict_rolls_back_before_reuse() {
    let fx = SqlFixture::postgres().await.unwrap();
    let url = format!("{}?options[lock_timeout]=100", fx.url());
    let options = lock_sql::SqlOptions { max_connections: 1, ..fx.options() };
    let ttl = Duration::from_secs(5);
    let (_rw, read, name, first) = common::conflict_reader(&url, options, ttl).await;
    let mut admin = common::Admin::connect(&fx).await;
    admin.lock_rows(&format!("{}_counters", fx.options().table), "kind = 'rw' AND name = 'conflict'").await;
    let unlock = admin.rollback_after(400);
    let second = OwnerId::random();
    let got = read.try_lock(&Claim::new(&name, second, ttl), false).await;
    let _admin = unlock.await.unwrap();
    assert!(matches!(got, Ok(TryLock::Acquired { .. })), "after lock-timeout conflicts: {got:?}");
    // The one pooled connection is usable for plain statements too.
    assert_eq!(read.renew(&name, first, ttl).await.unwrap(), lock_core::backend::RenewOutcome::Renewed);
}

/// Wake-up keys are per kind: releasing an exclusive lock whose name looks like a
/// read-write lock's or semaphore's key wakes none of their waiters, and a permit or writer
/// released wakes no exclusive waiter named like its key; the right release does wake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_wake_keys_are_per_kind() {
    let fx = SqlFixture::postgres().await.unwrap();
    let exclusive = Arc::clone(fx.sql_client().await.unwrap().store()) as Arc<dyn LeaseStore>;
    let rw = lock_sql::connect_rw(fx.url(), fx.options()).await.unwrap();
    let sem = lock_sql::connect_semaphore(fx.url(), fx.options()).await.unwrap();
    let [(_, read), (_, write)] = rw.lease_stores();
    let permit = sem.lease_store(1).unwrap();
    let ttl = Duration::from_secs(5);
    let name = |s: &str| LockName::new(s).unwrap();
    let cycle = |store: Arc<dyn LeaseStore>, n: LockName| async move {
        let o = OwnerId::random();
        assert!(
            matches!(store.try_lock(&Claim::new(&n, o, ttl), false).await.unwrap(), TryLock::Acquired { .. }),
            "{n}"
        );
        store.release(&n, o).await.unwrap();
    };
    let quiet = Duration::from_millis(500);

    let kinds = [&read, &write, &permit];
    let mut subs = Vec::new();
    for s in kinds {
        subs.push(s.subscribe(&name("x")).await.unwrap().expect("postgres listens"));
    }
    for key in ["dlock-rw-read:x", "dlock-rw-write:x", "dlock-sem:x"] {
        cycle(Arc::clone(&exclusive), name(key)).await;
    }
    for (sub, kind) in subs.iter().zip(["read", "write", "permit"]) {
        assert!(
            tokio::time::timeout(quiet, sub.woken()).await.is_err(),
            "{kind} waiter of x woken by an exclusive lock"
        );
    }

    let ex_subs = [
        exclusive.subscribe(&name("dlock-sem:y")).await.unwrap().expect("postgres listens"),
        exclusive.subscribe(&name("dlock-rw-write:y")).await.unwrap().expect("postgres listens"),
        exclusive.subscribe(&name("dlock-rw-read:y")).await.unwrap().expect("postgres listens"),
    ];
    cycle(Arc::clone(&permit), name("y")).await;
    cycle(Arc::clone(&write), name("y")).await;
    for sub in &ex_subs {
        assert!(tokio::time::timeout(quiet, sub.woken()).await.is_err(), "an exclusive waiter woken by another kind");
    }

    // The check can fail: the right release does wake.
    let own = permit.subscribe(&name("z")).await.unwrap().expect("postgres listens");
    cycle(Arc::clone(&permit), name("z")).await;
    assert!(tokio::time::timeout(Duration::from_secs(2), own.woken()).await.is_ok(), "a permit release wakes");
    // The exclusive lock wakes the head of its waiter queue, by owner id.
    let (holder, waiter, z) = (OwnerId::random(), OwnerId::random(), name("z"));
    assert!(matches!(exclusive.try_lock(&Claim::new(&z, holder, ttl), false).await.unwrap(), TryLock::Acquired { .. }));
    let queued = lock_core::backend::Claim::new(&z, waiter, ttl);
    assert!(matches!(exclusive.try_lock(&queued, true).await.unwrap(), TryLock::Held { .. }));
    let own = exclusive.subscribe_waiter(&z, waiter).await.unwrap().expect("postgres listens");
    exclusive.release(&z, holder).await.unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(2), own.woken()).await.is_ok(), "an exclusive release wakes");
    exclusive.abandon(&z, waiter).await.unwrap();
}

/// A cancelled acquire leaves no grant behind. Its upsert waits for a row another
/// transaction inserted and has not committed; the acquire is cancelled meanwhile, and its
/// background release finds nothing of ours (the row is not visible yet). Then the row commits
/// and the cancelled upsert, still running on the server, takes the lock for an owner nobody
/// has. The release is repeated once that statement can no longer commit, so another client
/// gets the lock within a few seconds, not after the 30 s ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_cancelled_acquire_leaves_no_grant() {
    let fx = SqlFixture::postgres().await.unwrap();
    let lock = fx.sql_client().await.unwrap();
    let other = fx.sql_client().await.unwrap();
    let table = fx.options().table;
    let mut admin = common::Admin::connect(&fx).await;
    admin.run("BEGIN").await;
    admin
        .run(&format!("INSERT INTO \"{table}\" (name, owner, fence, expires_at) VALUES ('cancelled', NULL, 1, 0)"))
        .await;
    let name = LockName::new("cancelled").unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(30)).request_timeout(Duration::from_secs(2));
    let acquire = tokio::spawn({
        let (name, opts) = (name.clone(), opts.clone());
        async move { lock.acquire(&name, &opts).await }
    });
    // Cancel only once the upsert waits on the server for the uncommitted row: a fixed delay
    // cancelled it before it was sent on a loaded machine, and the scenario did not happen.
    let mut watcher = common::Admin::connect(&fx).await;
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{table}%' \
         AND pid <> pg_backend_pid()"
    );
    let blocked = watcher.counts_within(&waiting, Duration::from_secs(5)).await;
    assert!(
        blocked,
        "the acquire's upsert never waited for the uncommitted row (the acquire had ended: {})",
        acquire.is_finished()
    );
    acquire.abort();
    assert!(acquire.await.is_err_and(|e| e.is_cancelled()), "the acquire should still wait for the uncommitted row");
    tokio::time::sleep(Duration::from_millis(300)).await;
    admin.run("COMMIT").await;
    // The cancelled upsert's late grant: the row gets an owner nobody knows, and a fence above
    // the inserted 1 (which stays when the background release frees the row again before
    // this check looks: under load its early repeat can come right after the grant).
    let owned =
        format!("SELECT count(*) FROM \"{table}\" WHERE name = 'cancelled' AND (owner IS NOT NULL OR fence > 1)");
    let granted = admin.counts_within(&owned, Duration::from_secs(2)).await;
    assert!(granted, "the cancelled upsert did not take the row: the scenario did not happen");
    let t = tokio::time::Instant::now();
    let wait = opts.clone().wait(Duration::from_secs(12));
    let lease = other.acquire(&name, &wait).await;
    let took = t.elapsed();
    assert!(lease.is_ok(), "the lock stayed taken by the cancelled acquire: {lease:?} after {took:?}");
    assert!(took < Duration::from_secs(8), "free only after {took:?}");
    eprintln!("a cancelled acquire's late grant was freed after {took:?}");
}

/// Election observers cost a NOTIFY only where someone observes (lock-sql/src/dialect/postgres/observers.rs):
/// a grant and a release of an unobserved name send no `dlock:<name>`; with an observer's feed
/// registered both do, and the feed fires; once the feed is dropped its row goes and the
/// notifications stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_observers_are_notified_only_while_they_observe() {
    let fx = SqlFixture::postgres().await.unwrap();
    let store = Arc::clone(fx.sql_client().await.unwrap().store()) as Arc<dyn LeaseStore>;
    let mut raw = sqlx::postgres::PgListener::connect(fx.url()).await.unwrap();
    raw.listen(&fx.options().table).await.unwrap();
    let name = LockName::new(format!("observed/{}", OwnerId::random().to_hex())).unwrap();
    let key = format!("dlock:{name}");
    let cycle = || async {
        let o = OwnerId::random();
        let granted = store.try_lock(&Claim::new(&name, o, Duration::from_secs(5)), false).await.unwrap();
        assert!(matches!(granted, TryLock::Acquired { .. }));
        store.release(&name, o).await.unwrap();
    };
    cycle().await;
    assert_eq!(heard(&mut raw, &key).await, 0, "an unobserved grant or release notified");

    let mut feed = store.watch_changes(&name).await.unwrap().expect("postgres notifies observers");
    cycle().await;
    assert_eq!(heard(&mut raw, &key).await, 2, "the grant and the release notify an observer");
    assert!(tokio::time::timeout(Duration::from_secs(2), feed.changed()).await.unwrap(), "the feed fires");

    drop(feed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    cycle().await;
    assert_eq!(heard(&mut raw, &key).await, 0, "a dropped observer's row still notified");
}

/// How many notifications with `payload` arrive until none comes for 500 ms (other tests' are
/// skipped).
async fn heard(raw: &mut sqlx::postgres::PgListener, payload: &str) -> usize {
    payloads(raw).await.iter().filter(|p| *p == payload).count()
}

/// The payloads that arrive until none comes for 500 ms.
async fn payloads(raw: &mut sqlx::postgres::PgListener) -> Vec<String> {
    let mut all = Vec::new();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(500), raw.recv()).await {
        all.push(m.payload().to_owned());
    }
    all
}

/// The listener's hub is live once its LISTEN is confirmed: a waiter's subscription says so
/// (its wait then skips the re-try), and a wake-up for a waiter, sent before that waiter
/// registered, is kept for it and for nobody else.
#[tokio::test]
async fn extra_an_early_wake_up_is_kept_for_its_waiter() {
    let fx = SqlFixture::postgres().await.unwrap();
    let store = lock_sql::SqlStore::connect(fx.url(), fx.options()).await.unwrap();
    let admin = sqlx::PgPool::connect(fx.url()).await.unwrap();
    let name = LockName::new("early").unwrap();
    let before = tokio::time::Instant::now();
    let (early, other) = (OwnerId::random(), OwnerId::random());
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(&fx.options().table)
        .bind(format!("dlock-waiter:{}", early.to_hex()))
        .execute(&admin)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sub = store.subscribe_waiter(&name, early).await.unwrap().expect("PostgreSQL notifies");
    let since = sub.live_since().expect("the listener's LISTEN was confirmed at connect");
    assert!(since <= before, "live since the LISTEN, not since the registration");
    tokio::time::timeout(Duration::from_secs(1), sub.woken()).await.expect("the wake-up sent before it registered");
    let nobody = store.subscribe_waiter(&name, other).await.unwrap().unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(50), nobody.woken()).await;
    assert!(quiet.is_err(), "another waiter does not get it");
}

/// A hand-off notifies the head's own client only (its queue entry names the channel that
/// client listens on alone), not every client of the table. A queue table without that column
/// (the previous versions' shape) is refused at connect, not altered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_a_handoff_notifies_only_the_heads_client() {
    let fx = SqlFixture::postgres().await.unwrap();
    let table = format!("dlock_wake_{}", &OwnerId::random().to_hex()[..12]);
    let admin = sqlx::PgPool::connect(fx.url()).await.unwrap();
    // The queue table as the previous versions made it: no `wake` column.
    let old = format!("\"{table}_waiters\"");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {old} (name TEXT COLLATE \"C\" NOT NULL, owner TEXT NOT NULL, \
         seq BIGINT NOT NULL, expires_at BIGINT NOT NULL, ttl_ms BIGINT NOT NULL DEFAULT 0, holder TEXT, \
         metadata TEXT, PRIMARY KEY (name, owner))"
    )))
    .execute(&admin)
    .await
    .unwrap();
    let opts = fx.options().table(table.clone());
    match lock_sql::connect(fx.url(), opts.clone()).await {
        Err(lock_core::LockError::Config { reason }) => assert!(reason.contains("wake"), "names the column: {reason}"),
        Err(e) => panic!("expected a Config error, got {e}"),
        Ok(_) => panic!("a waiter queue without the wake column was used"),
    }
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {old}"))).execute(&admin).await.unwrap();
    let (holder, waiter) = (lock_sql::connect(fx.url(), opts.clone()), lock_sql::connect(fx.url(), opts));
    let (holder, waiter) = (holder.await.unwrap(), waiter.await.unwrap());
    let mut raw = sqlx::postgres::PgListener::connect(fx.url()).await.unwrap();
    raw.listen(&table).await.unwrap();
    let name = LockName::new("handed").unwrap();
    let lease_opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(10));
    let queued = |owner_is: &'static str| {
        let (admin, table) = (admin.clone(), table.clone());
        async move {
            let sql = format!("SELECT count(*) FROM \"{table}_waiters\" WHERE name = 'handed' AND {owner_is}");
            for _ in 0..200 {
                let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone())).fetch_one(&admin).await.unwrap();
                if n > 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("no waiter entry ({owner_is}) appeared");
        }
    };

    // A waiter of this version: its entry names its client's channel.
    let held = holder.acquire(&name, &lease_opts).await.unwrap();
    let wait = spawn_acquire(waiter, &name, &lease_opts);
    queued("wake IS NOT NULL").await;
    held.release().await.unwrap();
    let (lease, _waiter) = wait.await.unwrap().unwrap();
    let grants = grants_heard(&mut raw).await;
    assert!(grants.is_empty(), "the hand-off was notified on the table's channel too: {grants:?}");
    lease.release().await.unwrap();
    for t in [format!("{table}_waiters"), table] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE \"{t}\""))).execute(&admin).await.unwrap();
    }
}

/// A client with nobody waiting stops listening after `IDLE_UNLISTEN` (30 s), so that
/// PostgreSQL, which wakes every listening session of the database at each `NOTIFY`, no longer
/// wakes its session (dialect/postgres/listen.rs); its next wait makes it listen again and is
/// handed the lock at the release, not at its own fallback re-try (up to 2 s later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_an_idle_client_stops_listening_and_its_next_wait_is_woken_at_once() {
    let fx = SqlFixture::postgres().await.unwrap();
    let app = format!("dlock-idle-{}", &OwnerId::random().to_hex()[..12]);
    let sep = if fx.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}application_name={app}", fx.url());
    let admin = sqlx::PgPool::connect(fx.url()).await.unwrap();
    let waiter = lock_sql::connect(&url, fx.options()).await.unwrap();
    let holder = lock_sql::connect(fx.url(), fx.options()).await.unwrap();
    // The listener's session is the one of `app` whose last statement was (UN)LISTEN.
    let last_ran = |prefix: &'static str, within: Duration| {
        let (admin, app) = (admin.clone(), app.clone());
        async move {
            let until = tokio::time::Instant::now() + within;
            while tokio::time::Instant::now() < until {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE $2",
                )
                .bind(&app)
                .bind(format!("{prefix}%"))
                .fetch_one(&admin)
                .await
                .unwrap();
                if n > 0 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        }
    };
    assert!(last_ran("LISTEN", Duration::from_secs(5)).await, "the client listens once connected");
    let stopped = std::time::Instant::now();
    assert!(last_ran("UNLISTEN", Duration::from_secs(45)).await, "an idle client stops listening");
    assert!(stopped.elapsed() >= Duration::from_secs(25), "not before its idle time: {:?}", stopped.elapsed());

    let name = LockName::new("idle-wake").unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(10));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let wait = spawn_acquire(waiter, &name, &opts);
    assert!(last_ran("LISTEN", Duration::from_secs(5)).await, "a wait makes it listen again");
    // Settled: its wake-up after listening again has made it look once more.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = std::time::Instant::now();
    held.release().await.unwrap();
    let (lease, _waiter) = wait.await.unwrap().unwrap();
    let took = released.elapsed();
    assert!(took < Duration::from_millis(400), "granted {took:?} after the release, not at the release");
    lease.release().await.unwrap();
}

/// `waiter`'s `acquire` of `name`, running in a task of its own: the lease, and the client
/// back so that the lease outlives nothing it needs.
fn spawn_acquire(
    waiter: lock_sql::SqlLock,
    name: &LockName,
    opts: &AcquireOptions,
) -> tokio::task::JoinHandle<Result<(lock_core::Lease, lock_sql::SqlLock), lock_core::LockError>> {
    let (name, opts) = (name.clone(), opts.clone());
    tokio::spawn(async move { waiter.acquire(&name, &opts).await.map(|l| (l, waiter)) })
}

/// The grant notifications heard until none comes for 500 ms.
async fn grants_heard(raw: &mut sqlx::postgres::PgListener) -> Vec<String> {
    payloads(raw).await.into_iter().filter(|p| p.starts_with("dlock-grant:")).collect()
}

/// A grant notification is a hint, never a grant: a role with no privilege
/// but `SELECT` on the lock's tables (`NOTIFY` needs none) reads the waiter's owner id and
/// channel and sends it `dlock-grant:<owner>:<fence>` on every channel its client listens on,
/// forged (fence 9e18) and replayed (the fence a genuine hand-off would carry next), while
/// another client holds. The waiter must keep waiting, and after the release return the
/// database's grant: the fence the row holds, far below the forged one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_a_forged_grant_notification_is_only_a_hint() {
    let fx = SqlFixture::postgres().await.unwrap();
    let table = fx.options().table;
    let admin = sqlx::PgPool::connect(fx.url()).await.unwrap();
    let role = format!("dlock_forger_{}", &OwnerId::random().to_hex()[..12]);
    let run = |sql: String| {
        let admin = admin.clone();
        async move { sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&admin).await.unwrap() }
    };
    // The tables exist once a client connected.
    let (holder, waiter) = (fx.sql_client().await.unwrap(), fx.sql_client().await.unwrap());
    run(format!("CREATE ROLE {role} LOGIN")).await;
    run(format!("GRANT SELECT ON \"{table}\", \"{table}_waiters\" TO {role}")).await;
    let mut url = url::Url::parse(fx.url()).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(None).unwrap();
    // The role goes whatever the outcome.
    let outcome = tokio::spawn(forge_grants(holder, waiter, url.to_string(), table)).await;
    run(format!("DROP OWNED BY {role}")).await;
    run(format!("DROP ROLE {role}")).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn forge_grants(holder: lock_sql::SqlLock, waiter: lock_sql::SqlLock, forger_url: String, table: String) {
    let forger = sqlx::PgPool::connect(&forger_url).await.unwrap();
    let name = LockName::new("forged").unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(20));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let wait = spawn_acquire(waiter, &name, &opts);
    let entry = format!("SELECT owner, wake FROM \"{table}_waiters\" WHERE name = 'forged'");
    let mut found = None;
    for _ in 0..300 {
        found = sqlx::query_as::<_, (String, Option<String>)>(sqlx::AssertSqlSafe(entry.clone()))
            .fetch_optional(&forger)
            .await
            .unwrap();
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (owner, wake) = found.expect("the waiter's queue entry, read by the SELECT-only role");
    let wake = wake.expect("the entry names its client's channel");
    let replayed = held.token().0 + 1;
    for fence in ["9000000000000000000".to_owned(), replayed.to_string()] {
        for channel in [&table, &wake] {
            let forged = format!("NOTIFY \"{channel}\", 'dlock-grant:{owner}:{fence}'");
            sqlx::query(sqlx::AssertSqlSafe(forged)).execute(&forger).await.unwrap();
        }
    }
    let t = tokio::time::Instant::now();
    while t.elapsed() < Duration::from_millis(500) {
        if wait.is_finished() {
            let got = wait.await.unwrap().map(|(l, _)| l.token());
            panic!("the waiter returned while another client holds: {got:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let info = holder.inspect(&name).await.unwrap().expect("still held");
    assert_eq!(info.token, held.token(), "the holder still holds, with its own fence");
    held.release().await.unwrap();
    let (lease, waiter) = tokio::time::timeout(Duration::from_secs(10), wait).await.unwrap().unwrap().unwrap();
    let row = waiter.inspect(&name).await.unwrap().expect("held by the waiter");
    assert_eq!(lease.token(), row.token, "the waiter's fence is the row's");
    assert!(lease.token() > info.token, "{:?} after {:?}", lease.token(), info.token);
    assert!(lease.token().0 < 9_000_000_000_000_000_000, "the forged fence: {:?}", lease.token());
    lease.release().await.unwrap();
    forger.close().await;
}

/// One lease's trouble never delays another's renewal: 60 leases renewed in
/// shared rounds (ttl 3 s). Another transaction locks one lease's row for 4.5 s: first alone,
/// then another lease's row with a manual renewal of that lease hanging on it, holding that
/// lease's turn (the request timeout is 6 s). Every other lease stays valid. Before, the round's one UPDATE
/// waited on the locked row, and the round waited for the hanging lease's turn, until every
/// lease of the round had expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_a_locked_row_stalls_no_other_renewal() {
    use sqlx::Connection;
    let fx = SqlFixture::postgres().await.unwrap();
    let (_lock, leases) = common::stall_leases(&fx).await;
    let table = fx.options().table;
    let mut admin = sqlx::PgConnection::connect(fx.url()).await.unwrap();
    for (k, manual) in [(0, false), (1, true)] {
        let mut tx = admin.begin().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("SELECT * FROM \"{table}\" WHERE name = 'stall-{k}' FOR UPDATE")))
            .execute(&mut *tx)
            .await
            .unwrap();
        let hold = Duration::from_millis(4500);
        let hanging = async {
            if manual {
                let _ = tokio::time::timeout(hold, leases[k].renew()).await;
            }
        };
        tokio::join!(hanging, tokio::time::sleep(hold));
        let lost: Vec<&str> = leases[2..].iter().filter(|l| !l.is_valid()).map(|l| l.name().as_str()).collect();
        tx.rollback().await.unwrap();
        assert!(
            lost.is_empty(),
            "{} leases lost beside the one whose row was locked (manual renewal hanging: {manual}): {lost:?}",
            lost.len()
        );
    }
    for lease in leases.into_iter().skip(2) {
        lease.release().await.unwrap();
    }
}
