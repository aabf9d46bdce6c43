//! PostgreSQL name resolution is pinned: operators and functions planted in a schema on the
//! lock role's `search_path` (ahead of `pg_catalog`, which is then no longer searched first)
//! never run inside the lock's statements, whether the backend opens its own connections or
//! borrows the application's, and the application's own `search_path` is left as it was.
//!
//! Needs a superuser URL (`DLOCK_TEST_POSTGRES_URL`, default the local test server) to create
//! a role, schemas and operators; they are dropped at the end.

use std::time::Duration;

use dlock_testkit::planted;
use lock_core::{AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockName};
use lock_sql::{SqlBackend, SqlOptions};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};

fn admin_url() -> String {
    std::env::var("DLOCK_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// The hostile schema (dlock-testkit's `planted`): each planted operator or function records
/// that it ran, then lies (the clock reads 0, concatenation drops the token, `unnest` returns
/// nothing).
fn plant(h: &str) -> Vec<String> {
    let mut statements = planted::schema(h);
    statements.extend([
        planted::function(h, "mul(numeric, integer)", "numeric", "numeric * integer", "SELECT 0::numeric"),
        planted::operator(h, "*", "numeric", "integer", "mul"),
        planted::function(h, "cat(text, bigint)", "text", "text || bigint", "SELECT $1"),
        planted::operator(h, "||", "text", "bigint", "cat"),
        planted::function(h, "unnest(text[])", "SETOF text", "unnest(text[])", "SELECT NULL::text WHERE false"),
        planted::function(h, "now()", "timestamptz", "now()", "SELECT 'epoch'::timestamptz"),
        planted::function(h, "pg_notify(text, text)", "void", "pg_notify(text, text)", ""),
    ]);
    statements
}

/// A role whose `search_path` puts the hostile schema before `pg_catalog`, with a schema of its
/// own (first on the path, so an unqualified lease table is created there).
struct Setting {
    admin: PgConnection,
    role: String,
    hostile: String,
    home: String,
    url: String,
}

impl Setting {
    async fn new() -> Setting {
        let mut admin = PgConnection::connect(&admin_url()).await.expect("the PostgreSQL test server (superuser)");
        let (role, hostile, home) = (unique("dlock_sp_role"), unique("dlock_sp_hostile"), unique("dlock_sp_home"));
        let mut setup = vec![format!("CREATE ROLE {role} LOGIN")];
        setup.extend(plant(&hostile));
        setup.push(format!("CREATE SCHEMA {home} AUTHORIZATION {role}"));
        setup.push(format!("ALTER ROLE {role} SET search_path = {home}, {hostile}, pg_catalog"));
        for sql in setup {
            admin.execute(AssertSqlSafe(sql.clone())).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let mut url = url::Url::parse(&admin_url()).expect("test URL");
        url.set_username(&role).expect("a URL with a user");
        url.set_password(None).expect("a URL with a user");
        Setting { admin, role, hostile, home, url: url.to_string() }
    }

    /// Every call the planted code recorded.
    async fn calls(&mut self) -> Vec<(String, String)> {
        sqlx::query_as(AssertSqlSafe(format!("SELECT what, who FROM {}.calls", self.hostile)))
            .fetch_all(&mut self.admin)
            .await
            .expect("read the calls")
    }

    /// The lease row's expiry is on the server's real clock (a planted clock reads 0).
    async fn expiry_is_real(&mut self, table: &str) -> bool {
        let sql = format!(
            "SELECT expires_at > (extract(epoch from now()) * 1000)::bigint - 600000 FROM {}.{table} WHERE name = 'pinned'",
            self.home
        );
        sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut self.admin).await.expect("the lease row")
    }

    async fn drop_all(mut self) {
        for sql in [
            format!("DROP SCHEMA {} CASCADE", self.home),
            format!("DROP SCHEMA {} CASCADE", self.hostile),
            format!("DROP OWNED BY {}", self.role),
            format!("DROP ROLE {}", self.role),
        ] {
            let _ = self.admin.execute(AssertSqlSafe(sql)).await;
        }
    }
}

fn options(table: &str) -> SqlOptions {
    SqlOptions {
        table: table.to_owned(),
        max_connections: 4,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        idle_gc_after: None,
        tls: lock_sql::SqlTls::Warn,
    }
}

/// Acquire, a refused contender, renew, release, a takeover with a higher token, the
/// read-write lock and the semaphore: every statement kind the backend runs.
async fn exercise(backend: &SqlBackend) {
    let lock = backend.lock();
    let name = LockName::new("pinned").unwrap();
    let opts = AcquireOptions::new(Duration::from_secs(30));
    let first = lock.acquire(&name, &opts).await.expect("acquire");
    assert!(lock.try_acquire(&name, &opts).await.expect("try_acquire").is_none(), "a held lock was granted twice");
    first.renew().await.expect("renew");
    let token = first.token();
    first.release().await.expect("release");
    let second = lock.acquire(&name, &opts).await.expect("acquire after release");
    assert!(second.token() > token, "tokens must grow: {:?} then {:?}", token, second.token());
    // A waiter queued behind a holder gets the lock handed over on release (NOTIFY).
    let waiter = {
        let lock = backend.lock();
        let (name, opts) = (name.clone(), opts.clone().wait(Duration::from_secs(10)));
        tokio::spawn(async move { lock.acquire(&name, &opts).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    second.release().await.expect("release to the waiter");
    let third = waiter.await.unwrap().expect("the waiter's grant");
    assert!(third.token() > second.token());
    third.release().await.expect("release");
    let rw = backend.rw().await.expect("rw");
    let read = rw.acquire_read(&name, &opts).await.expect("read");
    assert!(rw.try_acquire_write(&name, &opts).await.expect("try write").is_none(), "a writer beside a reader");
    read.release().await.expect("release read");
    let sem = backend.semaphore().await.expect("semaphore");
    let permit = sem.acquire_permit(&name, 2, &opts).await.expect("permit");
    permit.renew().await.expect("renew permit");
    permit.release().await.expect("release permit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_operators_never_run_in_the_locks_statements() {
    let mut s = Setting::new().await;
    let table = unique("dlock_sp");
    let backend = SqlBackend::connect(&s.url, options(&table)).await.expect("connect as the lock role");
    exercise(&backend).await;
    // The table landed in the role's own schema, where its path said.
    let real = s.expiry_is_real(&table).await;
    drop(backend);
    let calls = s.calls().await;
    s.drop_all().await;
    assert!(real, "the lease row's expiry is not on the server's clock");
    assert!(calls.is_empty(), "planted code ran inside the lock's statements: {calls:?}");
}

/// Over the application's pool: the same, and the application's connections keep its path
/// (and the planner settings our sessions change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_operators_never_run_over_an_application_pool() {
    let mut s = Setting::new().await;
    let table = unique("dlock_sp");
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(4).connect(&s.url).await.expect("app pool");
    let backend = SqlBackend::from_pg_pool(pool.clone(), options(&table)).await.expect("connect over the pool");
    exercise(&backend).await;
    let real = s.expiry_is_real(&table).await;
    let expected = format!("{}, {}, pg_catalog", s.home, s.hostile);
    // Every connection of the pool at once (the backend used some of them).
    let mut lent = Vec::new();
    for _ in 0..4 {
        lent.push(pool.acquire().await.expect("a pool connection"));
    }
    let mut paths = Vec::new();
    for c in &mut lent {
        let path = sqlx::query_scalar::<_, String>("SHOW search_path").fetch_one(&mut **c).await.unwrap();
        let seq = sqlx::query_scalar::<_, String>("SHOW enable_seqscan").fetch_one(&mut **c).await.unwrap();
        let bitmap = sqlx::query_scalar::<_, String>("SHOW enable_bitmapscan").fetch_one(&mut **c).await.unwrap();
        paths.push((path, seq, bitmap));
    }
    drop(lent);
    drop(backend);
    pool.close().await;
    let calls = s.calls().await;
    s.drop_all().await;
    assert!(real, "the lease row's expiry is not on the server's clock");
    assert!(
        paths.iter().all(|(p, seq, bitmap)| *p == expected && seq == "on" && bitmap == "on"),
        "the application's sessions lost their search_path {expected:?} or planner settings: {paths:?}"
    );
    assert!(calls.is_empty(), "planted code ran inside the lock's statements: {calls:?}");
}
