//! The SQL fixtures of the conformance suite, and checks specific to the SQL backend shared by
//! the three dialect test files.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_conformance::proxy::FaultProxy;
use lock_conformance::{Fixture, LinkedClient, ServerControl};
use lock_core::{
    backend::{Claim, LeaseStore, TryLock},
    AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName, OwnerId,
};
use lock_sql::{SqlLock, SqlOptions};
use sqlx::Executor;
use tokio::time::Instant;

mod child;
mod fake_tls;
mod handoff;
mod local;
mod safety;
mod squat;
#[allow(unused_imports)]
pub use child::connect_child;
#[allow(unused_imports)]
pub use fake_tls::*;
#[allow(unused_imports)]
pub use handoff::*;
#[allow(unused_imports)]
pub use local::*;
#[allow(unused_imports)] // not every dialect's test file uses them
pub use safety::*;
#[allow(unused_imports)]
pub use squat::*;

/// Which database a fixture runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
    Mysql,
}

impl Dialect {
    /// The backend label, as the library's clients report it.
    pub fn label(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }
}

/// A lease table of its own (random name) in a database: SQLite in a fresh temp dir, or the
/// PostgreSQL / MariaDB server named by `DLOCK_TEST_POSTGRES_URL` / `DLOCK_TEST_MYSQL_URL`.
pub struct SqlFixture {
    dialect: Dialect,
    url: String,
    options: SqlOptions,
    upstream: Option<SocketAddr>,
    server: Option<Arc<dyn ServerControl>>,
    provenance: String,
    // Keeps the SQLite file (and, for private servers, the data dir) until the fixture goes.
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// Logs to stderr when `DLOCK_TEST_LOG` is set (an `EnvFilter`, e.g. `lock_sql=debug`).
fn init_log() {
    if let Ok(filter) = std::env::var("DLOCK_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

fn random_table() -> String {
    init_log();
    format!("dlock_t_{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

fn test_options(table: String) -> SqlOptions {
    SqlOptions {
        table,
        max_connections: 4,
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
        idle_gc_after: None,
        tls: lock_sql::SqlTls::Warn,
    }
}

/// The URL of a shared server, and where it came from (`env …` when from the environment).
fn shared_url(var: &str, default: &str) -> (String, String) {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => (url, format!("env {var}")),
        _ => (default.to_owned(), format!("the shared local server at {default} (default; set {var} to change)")),
    }
}

async fn upstream_of(url: &str, default_port: u16) -> Result<SocketAddr, LockError> {
    let parsed = url::Url::parse(url).map_err(|e| LockError::config(format!("bad test URL: {e}")))?;
    let host = parsed.host_str().unwrap_or("127.0.0.1").to_owned();
    let port = parsed.port().unwrap_or(default_port);
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| LockError::unavailable_from("test", format!("cannot resolve {host}"), e))?
        .next();
    addr.ok_or_else(|| LockError::unavailable("test", format!("{host} has no address")))
}

impl SqlFixture {
    /// SQLite: a fresh file in a temp dir.
    pub async fn sqlite() -> Result<SqlFixture, LockError> {
        let dir = tempfile::tempdir().map_err(|e| LockError::unavailable_from("test", "no temp dir", e))?;
        let url = format!("sqlite://{}", dir.path().join("locks.db").display());
        Ok(SqlFixture {
            dialect: Dialect::Sqlite,
            url,
            options: test_options(random_table()),
            upstream: None,
            server: None,
            provenance: "sqlite file in a temp dir".into(),
            _keep: Some(Box::new(dir)),
        })
    }

    /// PostgreSQL from `DLOCK_TEST_POSTGRES_URL` (default: the local test server).
    pub async fn postgres() -> Result<SqlFixture, LockError> {
        Self::shared(Dialect::Postgres, "DLOCK_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test", 5432)
            .await
    }

    /// A fixture on the shared server named by `var` (else `default`), which the suite may not
    /// stop.
    async fn shared(dialect: Dialect, var: &str, default: &str, default_port: u16) -> Result<SqlFixture, LockError> {
        let (url, provenance) = shared_url(var, default);
        let upstream = upstream_of(&url, default_port).await?;
        Ok(SqlFixture {
            dialect,
            provenance,
            url,
            options: test_options(random_table()),
            upstream: Some(upstream),
            server: None,
            _keep: None,
        })
    }

    /// A fixture on a private server of its own, kept running until the fixture goes.
    fn private<S>(dialect: Dialect, server: S) -> Result<SqlFixture, LockError>
    where
        S: std::ops::Deref<Target = dlock_testkit::servers::TestServer> + Send + Sync + 'static,
    {
        let upstream = server.addr().ok_or_else(|| LockError::unavailable("test", "private server has no address"))?;
        Ok(SqlFixture {
            dialect,
            provenance: server.provenance().to_owned(),
            url: server.url().to_owned(),
            options: test_options(random_table()),
            upstream: Some(upstream),
            server: server.control(),
            _keep: Some(Box::new(server)),
        })
    }

    /// A private PostgreSQL server for this fixture alone (initdb in a temp dir, free port),
    /// which the suite may stop, restart and pause.
    pub async fn postgres_private() -> Result<SqlFixture, LockError> {
        Self::private(Dialect::Postgres, dlock_testkit::servers::postgres::PostgresServer::start_local().await?)
    }

    /// A private MariaDB server for this fixture alone (temp dir, free port), which the suite
    /// may stop, restart and pause.
    pub async fn mysql_private() -> Result<SqlFixture, LockError> {
        Self::private(Dialect::Mysql, dlock_testkit::servers::mysql::MysqlServer::start_local().await?)
    }

    /// MySQL/MariaDB from `DLOCK_TEST_MYSQL_URL` (default: the local test server).
    pub async fn mysql() -> Result<SqlFixture, LockError> {
        Self::shared(Dialect::Mysql, "DLOCK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test", 3306).await
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The direct URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The options every client of this fixture uses.
    pub fn options(&self) -> SqlOptions {
        self.options.clone()
    }

    /// A URL through a fresh [`FaultProxy`] in front of the server (`None` for SQLite).
    pub async fn linked_url(&self) -> Result<Option<(String, Arc<FaultProxy>)>, LockError> {
        let Some(upstream) = self.upstream else { return Ok(None) };
        let proxy = FaultProxy::start(upstream).await?;
        let mut url = url::Url::parse(&self.url).map_err(|e| LockError::config(format!("bad test URL: {e}")))?;
        let local = proxy.local_addr();
        url.set_host(Some(&local.ip().to_string())).map_err(|e| LockError::config(format!("bad test URL: {e}")))?;
        url.set_port(Some(local.port())).map_err(|_| LockError::config("bad test URL: cannot set port"))?;
        Ok(Some((url.to_string(), proxy)))
    }

    /// A client with the concrete type (for store-level checks).
    pub async fn sql_client(&self) -> Result<SqlLock, LockError> {
        lock_sql::connect(&self.url, self.options.clone()).await
    }
}

lock_conformance::impl_fixture! {
    SqlFixture, backend: f.dialect.label(), |f| {
        client: f.sql_client().await?,
        rw: lock_sql::connect_rw(&f.url, f.options.clone()).await?,
        semaphore: lock_sql::connect_semaphore(&f.url, f.options.clone()).await?,
    }

    /// Through a [`FaultProxy`] for PostgreSQL and MySQL. SQLite has no network between client
    /// and database (it is a file), so it has no link to break: `None`.
    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let Some((url, proxy)) = self.linked_url().await? else { return Ok(None) };
        let client = lock_sql::connect(&url, self.options.clone()).await?;
        Ok(Some(LinkedClient { client: Arc::new(client), link: proxy }))
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        self.server.clone()
    }

    /// The exclusive lock, both sides of the read-write lock and a one-permit semaphore.
    async fn lease_stores(&self) -> Result<Vec<(&'static str, Arc<dyn LeaseStore>)>, LockError> {
        let exclusive = self.sql_client().await?;
        let rw = lock_sql::connect_rw(&self.url, self.options.clone()).await?;
        let sem = lock_sql::connect_semaphore(&self.url, self.options.clone()).await?;
        let mut stores = vec![("exclusive", Arc::clone(exclusive.store()) as Arc<dyn LeaseStore>)];
        stores.extend(rw.lease_stores());
        stores.push(("permit", sem.lease_store(1)?));
        Ok(stores)
    }

    fn provenance(&self) -> String {
        self.provenance.clone()
    }

    /// This test binary re-run as a child (`conformance_waiter_child`, every dialect's file).
    async fn queued_waiter(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<Box<dyn lock_conformance::waiter_process::QueuedWaiter>>, LockError> {
        child::queued_waiter(self, name, opts).await
    }

    /// PostgreSQL only: MySQL and SQLite send no grant messages (their waiters poll).
    async fn forge_grant(&self, name: &LockName, token: u64) -> Result<Option<usize>, LockError> {
        if self.dialect != Dialect::Postgres {
            return Ok(None);
        }
        forge_pg_grants(&self.url, &self.options.table, name, token).await.map(Some)
    }

    /// PostgreSQL: the claim window of a grant in the release (1 s, lock-sql `handoff` docs): a
    /// grant its waiter never claims lapses then, and with nobody else queued a newcomer's try
    /// takes the lock; the leave of a dropped wait frees it sooner, a round trip or two after the
    /// drop. The second second is slack for a loaded machine. MySQL and SQLite grant nothing in
    /// the release: the default.
    fn untaken_grant_bound(&self) -> Duration {
        match self.dialect {
            Dialect::Postgres => Duration::from_secs(2),
            _ => self.base_ttl().max(self.expiry_bound()) * 2,
        }
    }

    /// What `idle_gc_after` runs, with no idle time: deletes every row whose lease ended (a
    /// few ms first, so that the database clock has moved past the last grant).
    async fn collect_idle(&self, _name: &LockName) -> Result<bool, LockError> {
        let lock = self.sql_client().await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
        lock.store().collect_idle(Duration::ZERO).await?;
        Ok(true)
    }
}

impl Drop for SqlFixture {
    /// Drops this fixture's tables from the shared server: the lease table, the waiter queue and
    /// the kinds' two (best effort, bounded; left behind, they pile up run after run).
    fn drop(&mut self) {
        // SQLite files and private servers go away with the fixture.
        if self.dialect == Dialect::Sqlite || self.server.is_some() {
            return;
        }
        let (dialect, url, table) = (self.dialect, self.url.clone(), self.options.table.clone());
        // A thread with its own runtime: Drop cannot await, and may run outside any runtime.
        let t = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async move {
                let q = if dialect == Dialect::Mysql { '`' } else { '"' };
                let all = ["", "_waiters", "_counters", "_holders"].map(|suffix| format!("{q}{table}{suffix}{q}"));
                let sql = format!("DROP TABLE IF EXISTS {}", all.join(", "));
                let work = async {
                    match dialect {
                        Dialect::Postgres => {
                            let pool = sqlx::PgPool::connect(&url).await?;
                            pool.execute(sqlx::AssertSqlSafe(sql)).await?;
                            pool.close().await;
                        }
                        Dialect::Mysql => {
                            let pool = sqlx::MySqlPool::connect(&url).await?;
                            pool.execute(sqlx::AssertSqlSafe(sql)).await?;
                            pool.close().await;
                        }
                        Dialect::Sqlite => {}
                    }
                    Ok::<_, sqlx::Error>(())
                };
                let _ = tokio::time::timeout(Duration::from_secs(3), work).await;
            });
        });
        let _ = t.join();
    }
}

/// Names that must work as bound parameters, distinct from each other.
pub fn hostile_names() -> Vec<String> {
    vec![
        "a/b".into(),
        "../x".into(),
        "'".into(),
        "\"".into(),
        "`".into(),
        "it's \"quoted\" `twice`".into(),
        "'; DROP TABLE x; --".into(),
        "\\".into(),
        "%_".into(),
        "x".repeat(255),
        format!("{}x", "é".repeat(127)),
        "ключ 🔒 鍵".into(),
        "a".into(),
        "A".into(),
        "a ".into(),
        " a".into(),
        "é".into(),
        "e\u{301}".into(),
    ]
}

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new(Duration::from_millis(ttl_ms)).request_timeout(Duration::from_secs(2))
}

/// Every hostile name can be taken, is independent of every other (case, trailing blanks,
/// Unicode normalisation), and the table survives.
pub async fn check_hostile_names(fx: &SqlFixture) -> Result<(), LockError> {
    let a = fx.client().await?;
    let b = fx.client().await?;
    let names = hostile_names();
    let o = opts(5000);
    let mut held = Vec::new();
    for n in &names {
        let name = LockName::new(n)?;
        let lease = a.try_acquire(&name, &o).await?;
        assert!(lease.is_some(), "{n:?} should be free (distinct from the names before it)");
        assert!(b.try_acquire(&name, &o).await?.is_none(), "{n:?} is held by a");
        held.push(lease);
    }
    for (n, lease) in names.iter().zip(held) {
        let lease = lease.expect("checked above");
        lease.release().await?;
        let again = b.try_acquire(&LockName::new(n)?, &o).await?.expect("free after release");
        assert!(again.token() > lease.token(), "{n:?}: token must grow");
        again.release().await?;
    }
    Ok(())
}

/// After a holder stops renewing, another client takes over once the ttl passed, with a greater
/// token; the stale holder's renew and release find another owner.
pub async fn check_takeover_fence(fx: &SqlFixture) -> Result<(), LockError> {
    let a = fx.client().await?;
    let b = fx.client().await?;
    let name = LockName::new("takeover")?;
    let short = opts(400).auto_renew(false);
    let mut last = 0;
    for round in 0..3 {
        let first = a.try_acquire(&name, &short).await?.expect("free");
        assert!(first.token().get() > last, "round {round}: token regressed");
        assert!(b.try_acquire(&name, &short).await?.is_none(), "live lease must block");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let second = b.try_acquire(&name, &short).await?.expect("expired lease must be taken over");
        assert!(second.token() > first.token(), "takeover must bump the fence");
        assert!(matches!(first.renew().await, Err(LockError::Lost { .. })), "stale renew must fail");
        assert!(matches!(first.release().await, Err(LockError::Lost { .. })), "stale release must fail");
        assert!(b.try_acquire(&name, &short).await?.is_none(), "stale release must not free it");
        last = second.token().get();
        second.release().await?;
    }
    Ok(())
}

/// Store level: an attempt by the same owner re-grants with the same token; a contender sees
/// the holder's remaining lease.
pub async fn check_idempotent_and_remaining(fx: &SqlFixture) -> Result<(), LockError> {
    let lock = fx.sql_client().await?;
    let store = lock.store();
    let name = LockName::new("idempotent")?;
    let me = OwnerId::random();
    let ttl = Duration::from_secs(3);
    let TryLock::Acquired { token: t1 } = store.try_lock(&Claim::new(&name, me, ttl), false).await? else {
        panic!("free")
    };
    let TryLock::Acquired { token: t2 } = store.try_lock(&Claim::new(&name, me, ttl), false).await? else {
        panic!("same owner")
    };
    assert_eq!(t1, t2, "a retry by the same owner gets the same grant");
    match store.try_lock(&Claim::new(&name, OwnerId::random(), ttl), false).await? {
        TryLock::Held { remaining: Some(r) } => {
            assert!(r <= ttl && r > Duration::from_millis(1500), "remaining {r:?} should be close to {ttl:?}")
        }
        other => panic!("expected Held with remaining, got {other:?}"),
    }
    assert_eq!(store.release(&name, OwnerId::random()).await?, lock_core::backend::ReleaseOutcome::NotOwner);
    assert_eq!(store.renew(&name, OwnerId::random(), ttl).await?, lock_core::backend::RenewOutcome::NotOwner);
    assert_eq!(store.renew(&name, me, ttl).await?, lock_core::backend::RenewOutcome::Renewed);
    assert_eq!(store.release(&name, me).await?, lock_core::backend::ReleaseOutcome::Released);
    assert_eq!(store.release(&name, me).await?, lock_core::backend::ReleaseOutcome::NotOwner);
    let TryLock::Acquired { token: t3 } = store.try_lock(&Claim::new(&name, me, ttl), false).await? else {
        panic!("free")
    };
    assert!(t3 > t1, "after release even the same owner gets a new token");
    Ok(())
}

/// `tasks` clients (separate pools) each add 1 to a shared counter `rounds` times with
/// read-sleep-write under the lock; the final count must be exact and tokens strictly grow.
pub async fn check_counter(fx: &SqlFixture, tasks: usize, rounds: usize) -> Result<(), LockError> {
    let counter = Arc::new(AtomicU64::new(0));
    let last_token = Arc::new(AtomicU64::new(0));
    let mut joins = Vec::new();
    for _ in 0..tasks {
        let client = fx.client().await?;
        let (counter, last_token) = (Arc::clone(&counter), Arc::clone(&last_token));
        joins.push(tokio::spawn(async move {
            let name = LockName::new("counter")?;
            let o = opts(3000).wait(Duration::from_secs(60));
            for _ in 0..rounds {
                let lease = client.acquire(&name, &o).await?;
                let prev = last_token.swap(lease.token().get(), Ordering::SeqCst);
                assert!(lease.token().get() > prev, "token {} after {prev}", lease.token());
                let v = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                counter.store(v + 1, Ordering::SeqCst);
                lease.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for j in joins {
        j.await.expect("task panicked")?;
    }
    assert_eq!(counter.load(Ordering::SeqCst), (tasks * rounds) as u64, "lost updates: two holders at once");
    Ok(())
}

/// A bad table name is a configuration error, before any connection is tried.
pub async fn check_bad_table(url: &str) {
    for bad in ["1x", "a-b", "x\"; DROP TABLE y; --", "", &"t".repeat(64)] {
        let r = lock_sql::connect(url, SqlOptions::default().table(bad)).await;
        assert!(matches!(r, Err(LockError::Config { .. })), "table {bad:?}: {:?}", r.err());
    }
}

/// The backend at `url` grants and releases a lock.
pub async fn check_provisioned(url: &str) {
    let lock = lock_sql::connect(url, SqlOptions::default()).await.unwrap();
    let name = LockName::new("provisioned").unwrap();
    let lease = lock.try_acquire(&name, &AcquireOptions::new(Duration::from_secs(2))).await.unwrap().expect("free");
    lease.release().await.unwrap();
}

/// A server nobody listens on is `Unavailable`, quickly.
pub async fn check_unreachable(url: &str) {
    let started = Instant::now();
    let o = SqlOptions { connect_timeout: Duration::from_secs(2), ..SqlOptions::default() };
    let r = lock_sql::connect(url, o).await;
    assert!(matches!(r, Err(LockError::Unavailable { .. })), "{:?}", r.err());
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
}

/// A waiter gets the lock within `bound` of its release ([`measure_wake_latency`]); `label`
/// names the database in the printed latency.
pub async fn check_wake_latency(fx: &SqlFixture, label: &str, bound: Duration) {
    let latency = measure_wake_latency(fx).await.unwrap();
    eprintln!("{label} wake-up latency after release: {latency:?}");
    assert!(latency < bound, "{latency:?}");
}

/// Returns how long a waiter took to get the lock after the holder released it (ttl 10 s, so
/// only a wake-up or a poll explains a fast grant).
pub async fn measure_wake_latency(fx: &SqlFixture) -> Result<Duration, LockError> {
    let a = fx.client().await?;
    let b = fx.client().await?;
    let name = LockName::new("wake")?;
    let o = opts(10_000).wait(Duration::from_secs(20));
    let held = a.try_acquire(&name, &o).await?.expect("free");
    let waiter = tokio::spawn(async move {
        let lease = b.acquire(&name, &o).await?;
        let at = Instant::now();
        lease.release().await?;
        Ok::<_, LockError>(at)
    });
    // Let the waiter settle into its long sleep.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let released = Instant::now();
    held.release().await?;
    let got = waiter.await.expect("waiter panicked")?;
    Ok(got - released)
}

/// Read-write locks and semaphores: every hostile name works for both kinds, distinct from
/// every other name, and the same name as exclusive lock, rw lock and semaphore are three locks.
pub async fn check_kinds_hostile_names(fx: &SqlFixture) -> Result<(), LockError> {
    let rw = lock_sql::connect_rw(fx.url(), fx.options()).await?;
    let sem = lock_sql::connect_semaphore(fx.url(), fx.options()).await?;
    let lock = fx.client().await?;
    let o = opts(5000);
    let mut held = Vec::new();
    for n in &hostile_names() {
        let name = LockName::new(n)?;
        let w = rw.try_acquire_write(&name, &o).await?.unwrap_or_else(|| panic!("{n:?}: rw should be free"));
        assert!(rw.try_acquire_read(&name, &o).await?.is_none(), "{n:?}: written, no reader");
        let p = sem.try_acquire_permit(&name, 1, &o).await?.unwrap_or_else(|| panic!("{n:?}: sem should be free"));
        assert!(sem.try_acquire_permit(&name, 1, &o).await?.is_none(), "{n:?}: one permit only");
        let l = lock.try_acquire(&name, &o).await?.unwrap_or_else(|| panic!("{n:?}: lock should be free"));
        held.push((n.clone(), w, p, l));
    }
    for (n, w, p, l) in held {
        let name = LockName::new(&n)?;
        w.release().await?;
        p.release().await?;
        l.release().await?;
        let r = rw.try_acquire_read(&name, &o).await?.expect("free after release");
        assert!(r.token() > w.token(), "{n:?}: rw token must grow");
        r.release().await?;
        let q = sem.try_acquire_permit(&name, 1, &o).await?.expect("free after release");
        assert!(q.token() > p.token(), "{n:?}: semaphore token must grow");
        q.release().await?;
    }
    Ok(())
}

/// A reader and a permit holder that stop renewing are freed after their ttl; the takeover gets
/// a greater token, and the stale holder's renew and release fail. Repeated, tokens keep rising.
pub async fn check_kinds_expiry_and_takeover(fx: &SqlFixture) -> Result<(), LockError> {
    let rw = lock_sql::connect_rw(fx.url(), fx.options()).await?;
    let rw2 = lock_sql::connect_rw(fx.url(), fx.options()).await?;
    let sem = lock_sql::connect_semaphore(fx.url(), fx.options()).await?;
    let sem2 = lock_sql::connect_semaphore(fx.url(), fx.options()).await?;
    let name = LockName::new("kinds-takeover")?;
    let short = opts(400).auto_renew(false);
    let mut last = (0, 0);
    for round in 0..3 {
        let reader = rw.try_acquire_read(&name, &short).await?.expect("free");
        assert!(reader.token().get() > last.0, "round {round}: rw token regressed");
        assert!(rw2.try_acquire_write(&name, &short).await?.is_none(), "a live reader must block a writer");
        let permit = sem.try_acquire_permit(&name, 1, &short).await?.expect("free");
        assert!(permit.token().get() > last.1, "round {round}: semaphore token regressed");
        assert!(sem2.try_acquire_permit(&name, 1, &short).await?.is_none(), "a live permit must block");
        assert!(
            matches!(sem2.try_acquire_permit(&name, 2, &short).await, Err(LockError::InvalidOptions { .. })),
            "disagreeing permits must be InvalidOptions"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let writer = rw2.try_acquire_write(&name, &short).await?.expect("an expired reader must be freed");
        assert!(writer.token() > reader.token(), "takeover must bump the rw fence");
        let taken = sem2.try_acquire_permit(&name, 1, &short).await?.expect("an expired permit must be freed");
        assert!(taken.token() > permit.token(), "takeover must bump the semaphore fence");
        assert!(matches!(reader.renew().await, Err(LockError::Lost { .. })), "stale reader renew must fail");
        assert!(matches!(reader.release().await, Err(LockError::Lost { .. })), "stale reader release must fail");
        assert!(matches!(permit.renew().await, Err(LockError::Lost { .. })), "stale permit renew must fail");
        assert!(matches!(permit.release().await, Err(LockError::Lost { .. })), "stale permit release must fail");
        assert!(rw.try_acquire_read(&name, &short).await?.is_none(), "the writer still holds");
        assert!(sem.try_acquire_permit(&name, 1, &short).await?.is_none(), "the taker still holds");
        last = (writer.token().get(), taken.token().get());
        writer.release().await?;
        taken.release().await?;
    }
    Ok(())
}
