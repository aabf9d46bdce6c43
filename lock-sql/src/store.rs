//! [`SqlStore`]: the lease table and its statements, per dialect.

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    Backoff, Capabilities, FencingToken, LeaseModel, LeaseStore, LockError, LockName, OwnerId, ReleaseOutcome,
    RenewOutcome, TryLock, WakeHub, WakeMethod, WakeSubscription,
};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Connection, Executor, SqlSafeStr};
use tokio::time::timeout;

use crate::error::{classify, to_lock_error, Class};
use crate::listen::{self, Listener};
use crate::pool::{ConnPool, Setup};
use crate::SqlOptions;

/// Which database a store talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Sqlite,
    Postgres,
    Mysql,
}

impl Kind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite",
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
        }
    }
}

pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(Arc<ConnPool<PgConnection>>),
    Mysql(Arc<ConnPool<MySqlConnection>>),
}

/// Runs one statement on a connection of a [`ConnPool`], which goes back to the pool only if
/// the statement completed in an orderly way.
macro_rules! pooled {
    ($pool:expr, |$c:ident| $body:expr) => {{
        let mut guard = $pool.get().await?;
        let result = {
            let $c = guard.conn()?;
            $body.await
        };
        guard.reusable(&result);
        result
    }};
}

/// The statements of one dialect, with the (validated) table name spliced in once.
struct Statements {
    create: Arc<str>,
    acquire: Arc<str>,
    /// The holder's remaining lease in ms (SQLite), or owner, fence and remaining (MySQL).
    read_back: Arc<str>,
    renew: Arc<str>,
    release: Arc<str>,
    /// MariaDB: the acquire upsert ends in `RETURNING owner, fence, remaining`, no read-back.
    returning: bool,
}

/// Lock stripes for [`SqlStore::one_at_a_time`]: enough that unrelated leases rarely share one.
const STRIPES: usize = 64;

/// Milliseconds since the Unix epoch, on the database's clock.
pub(crate) const PG_NOW: &str = "(extract(epoch from now()) * 1000)::bigint";
pub(crate) const MY_NOW: &str = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";
pub(crate) const LITE_NOW: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

impl Statements {
    /// The statements worth preparing on every connection.
    fn hot(&self) -> Vec<Arc<str>> {
        let mut v = vec![Arc::clone(&self.acquire), Arc::clone(&self.renew), Arc::clone(&self.release)];
        if !self.read_back.is_empty() && !self.returning {
            v.push(Arc::clone(&self.read_back));
        }
        v
    }

    fn postgres(t: &str) -> Self {
        let now = PG_NOW;
        Statements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS \"{t}\" (name TEXT COLLATE \"C\" NOT NULL PRIMARY KEY, owner TEXT, \
                 fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)"
            )
            .into(),
            // One statement: insert or take over a free/expired/own row, and when that did not
            // happen, report the holder's remaining lease (the CTE's snapshot may miss a row
            // committed meanwhile: then no row comes back, and the waiter just polls).
            acquire: format!(
                "WITH granted AS ( \
                   INSERT INTO \"{t}\" AS l (name, owner, fence, expires_at) \
                   VALUES ($1, $2, 1, {now} + $3::bigint) \
                   ON CONFLICT (name) DO UPDATE SET \
                     fence = CASE WHEN l.owner = EXCLUDED.owner THEN l.fence ELSE l.fence + 1 END, \
                     owner = EXCLUDED.owner, \
                     expires_at = EXCLUDED.expires_at \
                   WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at <= {now} \
                   RETURNING fence) \
                 SELECT fence, NULL::bigint AS remaining FROM granted \
                 UNION ALL \
                 SELECT NULL::bigint, h.expires_at - {now} FROM \"{t}\" h \
                 WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM granted)"
            )
            .into(),
            read_back: "".into(),
            renew: format!(
                "UPDATE \"{t}\" SET expires_at = {now} + $3::bigint \
                 WHERE name = $1 AND owner = $2 AND expires_at > {now}"
            )
            .into(),
            // Free and notify in one statement: the notification is delivered on commit.
            release: format!(
                "WITH freed AS ( \
                   UPDATE \"{t}\" SET owner = NULL, expires_at = {now} \
                   WHERE name = $1 AND owner = $2 AND expires_at > {now} RETURNING name) \
                 SELECT pg_notify($3, name) FROM freed"
            )
            .into(),
            returning: false,
        }
    }

    fn mysql(t: &str, returning: bool) -> Self {
        let now = MY_NOW;
        // MySQL assigns ON DUPLICATE KEY UPDATE columns left to right (later ones see earlier
        // new values), MariaDB with SIMULTANEOUS_ASSIGNMENT all at once. Every assignment repeats
        // the full condition, and the order (fence, owner, expires_at) gives the same result
        // both ways: fence reads the old owner; once owner is ours the condition stays true,
        // and when the condition was false nothing it reads has changed.
        let cond = format!("(owner IS NULL OR owner = ? OR expires_at <= {now})");
        Statements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS `{t}` (name VARBINARY(255) NOT NULL PRIMARY KEY, \
                 owner VARBINARY(32) NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL) ENGINE=InnoDB"
            )
            .into(),
            acquire: format!(
                "INSERT INTO `{t}` (name, owner, fence, expires_at) VALUES (?, ?, 1, {now} + ?) \
                 ON DUPLICATE KEY UPDATE \
                   fence = IF({cond}, IF(owner = ?, fence, fence + 1), fence), \
                   owner = IF({cond}, ?, owner), \
                   expires_at = IF({cond}, {now} + ?, expires_at){}",
                if returning {
                    format!(" RETURNING owner, fence, CAST(expires_at - {now} AS SIGNED)")
                } else {
                    String::new()
                }
            )
            .into(),
            read_back: format!("SELECT owner, fence, CAST(expires_at - {now} AS SIGNED) FROM `{t}` WHERE name = ?")
                .into(),
            renew: format!(
                "UPDATE `{t}` SET expires_at = {now} + ? WHERE name = ? AND owner = ? AND expires_at > {now}"
            )
            .into(),
            release: format!(
                "UPDATE `{t}` SET owner = NULL, expires_at = {now} \
                 WHERE name = ? AND owner = ? AND expires_at > {now}"
            )
            .into(),
            returning,
        }
    }

    fn sqlite(t: &str) -> Self {
        let now = LITE_NOW;
        Statements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS \"{t}\" (name TEXT NOT NULL PRIMARY KEY, owner TEXT, \
                 fence INTEGER NOT NULL, expires_at INTEGER NOT NULL)"
            )
            .into(),
            // SQLite evaluates every SET expression against the old row.
            acquire: format!(
                "INSERT INTO \"{t}\" (name, owner, fence, expires_at) VALUES (?1, ?2, 1, {now} + ?3) \
                 ON CONFLICT (name) DO UPDATE SET \
                   fence = CASE WHEN owner = excluded.owner THEN fence ELSE fence + 1 END, \
                   owner = excluded.owner, \
                   expires_at = excluded.expires_at \
                 WHERE owner IS NULL OR owner = excluded.owner OR expires_at <= {now} \
                 RETURNING fence"
            )
            .into(),
            read_back: format!("SELECT expires_at - {now} FROM \"{t}\" WHERE name = ?1").into(),
            renew: format!(
                "UPDATE \"{t}\" SET expires_at = {now} + ?3 WHERE name = ?1 AND owner = ?2 AND expires_at > {now}"
            )
            .into(),
            release: format!(
                "UPDATE \"{t}\" SET owner = NULL, expires_at = {now} \
                 WHERE name = ?1 AND owner = ?2 AND expires_at > {now}"
            )
            .into(),
            returning: false,
        }
    }
}

/// A lease table in PostgreSQL, MySQL/MariaDB or SQLite: the [`LeaseStore`] behind
/// [`SqlLock`](crate::SqlLock). See the crate docs for the algorithm.
pub struct SqlStore {
    pub(crate) kind: Kind,
    pub(crate) db: Db,
    pub(crate) table: String,
    sql: Statements,
    pub(crate) query_timeout: Duration,
    durable: bool,
    pub(crate) hub: WakeHub,
    pub(crate) listener: Option<Listener>,
    /// Renew and release of one owner run one at a time (see [`SqlStore::one_at_a_time`]).
    stripes: Box<[tokio::sync::Mutex<()>; STRIPES]>,
}

impl std::fmt::Debug for SqlStore {
    // Deliberately without the URL: it may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore").field("backend", &self.kind.label()).field("table", &self.table).finish()
    }
}

/// Splits off the scheme and maps `mariadb:` to sqlx's `mysql:`.
fn parse_url(url: &str) -> Result<(Kind, String), LockError> {
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("sqlite") => Ok((Kind::Sqlite, url.to_owned())),
        Some("postgres") | Some("postgresql") => Ok((Kind::Postgres, url.to_owned())),
        Some("mysql") => Ok((Kind::Mysql, url.to_owned())),
        Some("mariadb") => Ok((Kind::Mysql, format!("mysql{}", &url["mariadb".len()..]))),
        _ => Err(LockError::config(
            "sql URL must start with sqlite:, postgres:, postgresql:, mysql: or mariadb: \
             (e.g. sqlite://dlock.db or postgres://user@host/db)",
        )),
    }
}

fn bad_url(kind: Kind, e: sqlx::Error) -> LockError {
    LockError::config(format!("invalid {} URL: {e}; see the lock-sql docs for the URL format", kind.label()))
}

impl SqlStore {
    /// Connects, creates the lease table if missing, and (PostgreSQL) starts the listener.
    pub async fn connect(url: &str, options: SqlOptions) -> Result<SqlStore, LockError> {
        options.validate()?;
        let (kind, url) = parse_url(url)?;
        let bound = options.connect_timeout;
        let unreachable = |e: sqlx::Error| match classify(kind, &e) {
            Class::Config => to_lock_error(kind, "connect", e),
            _ => LockError::unavailable_from(kind.label(), format!("cannot connect: {e}"), e),
        };
        let too_slow =
            || LockError::unavailable(kind.label(), format!("no connection within {bound:?} (connect_timeout)"));
        let mut durable = true;
        let mut listener_options = None;
        let db = match kind {
            Kind::Postgres => {
                let mut opts = PgConnectOptions::from_str(&url).map_err(|e| bad_url(kind, e))?;
                // Name our sessions in pg_stat_activity, unless the URL already does.
                if opts.get_application_name().is_none() {
                    opts = opts.application_name("dlock");
                }
                listener_options = Some(opts.clone());
                Db::Postgres(ConnPool::new(opts, options.max_connections, bound, None))
            }
            Kind::Mysql => {
                let opts = MySqlConnectOptions::from_str(&url).map_err(|e| bad_url(kind, e))?;
                // Row-lock waits end on the server too, not only in our timeout.
                let lock_wait = options.query_timeout.as_secs().clamp(1, 3600);
                // READ COMMITTED: no gap locks, fewer deadlocks between contenders. One text
                // query (sqlx enables multi-statements): one round trip per new connection.
                let session = format!(
                    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                     SET SESSION innodb_lock_wait_timeout = {lock_wait}"
                );
                let setup: Setup<MySqlConnection> = Arc::new(move |c| {
                    let session = session.clone();
                    Box::pin(async move { c.execute(AssertSqlSafe(session)).await.map(drop) })
                });
                Db::Mysql(ConnPool::new(opts, options.max_connections, bound, Some(setup)))
            }
            Kind::Sqlite => {
                let lower = url.to_ascii_lowercase();
                let in_memory = lower.contains(":memory:") || lower.contains("mode=memory");
                durable = !in_memory;
                let opts = SqliteConnectOptions::from_str(&url)
                    .map_err(|e| bad_url(kind, e))?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    // FULL: a fence that was handed out survives a power cut too.
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(options.query_timeout);
                let mut pool = SqlitePoolOptions::new().max_connections(options.max_connections).acquire_timeout(bound);
                if in_memory {
                    // The database lives only while a connection to it is open.
                    pool = pool.min_connections(1).idle_timeout(None).max_lifetime(None);
                } else {
                    pool = pool.min_connections(0).idle_timeout(Duration::from_secs(60));
                }
                let pool = pool.connect_with(opts);
                Db::Sqlite(timeout(bound, pool).await.map_err(|_| too_slow())?.map_err(unreachable)?)
            }
        };
        // Connect once now, so that a wrong URL or a dead server fails here, clearly.
        let version = match &db {
            Db::Postgres(p) => {
                Some(timeout(bound, first_contact(p)).await.map_err(|_| too_slow())?.map_err(unreachable)?)
            }
            Db::Mysql(p) => Some(timeout(bound, first_contact(p)).await.map_err(|_| too_slow())?.map_err(unreachable)?),
            Db::Sqlite(_) => None,
        };
        let sql = match &db {
            Db::Postgres(_) => Statements::postgres(&options.table),
            Db::Mysql(_) => Statements::mysql(&options.table, version.as_deref().is_some_and(supports_returning)),
            Db::Sqlite(_) => Statements::sqlite(&options.table),
        };
        let hub = WakeHub::new();
        let mut store = SqlStore {
            kind,
            db,
            table: options.table.clone(),
            sql,
            query_timeout: options.query_timeout,
            durable,
            hub: hub.clone(),
            listener: None,
            stripes: Box::new(std::array::from_fn(|_| tokio::sync::Mutex::new(()))),
        };
        store.create_table().await?;
        store.warm_up().await;
        if let Some(opts) = listener_options {
            let bounds = listen::Bounds { connect: bound, query: options.query_timeout };
            store.listener = Some(listen::start(opts, options.table.clone(), hub, bounds).await?);
        }
        Ok(store)
    }

    /// Serializes renew and release of one owner. A release sent while that owner's renewal
    /// is still in flight could be applied first; the renewal then finds the row freed and
    /// answers NotOwner, which the lease watchdog would report as a lost lease although the
    /// holder itself released it. Waiting here lets the renewal finish first (or be cancelled
    /// by the release, before its answer is read).
    pub(crate) async fn one_at_a_time(&self, owner: OwnerId) -> tokio::sync::MutexGuard<'_, ()> {
        // The remainder is below STRIPES, so the index is always in range.
        self.stripes[(owner.as_u128() % STRIPES as u128) as usize].lock().await
    }

    /// The lease table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    async fn create_table(&self) -> Result<(), LockError> {
        let sql = &self.sql.create;
        let mut tries = 0;
        loop {
            let r = self
                .run("create the lease table", || async {
                    match &self.db {
                        Db::Postgres(p) => pooled!(p, |c| c.execute(AssertSqlSafe(sql.clone()))).map(drop),
                        Db::Mysql(p) => pooled!(p, |c| c.execute(AssertSqlSafe(sql.clone()))).map(drop),
                        Db::Sqlite(p) => p.execute(AssertSqlSafe(sql.clone())).await.map(drop),
                    }
                })
                .await;
            match r {
                Ok(()) => return Ok(()),
                // Concurrent `CREATE TABLE IF NOT EXISTS` can still collide in PostgreSQL's
                // catalog (unique violation on pg_type); the second try sees the table.
                Err(LockError::Backend { .. }) if tries < 3 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens a second connection and prepares the lock statements on both. Statements are
    /// prepared per connection, so later each costs one round trip, not two; and the spare
    /// connection serves a release while a renewal that the release cancelled takes the other
    /// one down with it. Best effort, bounded by the query timeout.
    async fn warm_up(&self) {
        let hot = self.sql.hot();
        let _ = timeout(self.query_timeout, async {
            match &self.db {
                Db::Postgres(p) => {
                    let (mut a, mut b) = (p.get().await, p.get().await);
                    for g in [&mut a, &mut b].into_iter().flatten() {
                        if let Ok(c) = g.conn() {
                            prepare_all(c, &hot).await;
                            g.reusable(&Ok::<(), sqlx::Error>(()));
                        }
                    }
                }
                Db::Mysql(p) => {
                    let (mut a, mut b) = (p.get().await, p.get().await);
                    for g in [&mut a, &mut b].into_iter().flatten() {
                        if let Ok(c) = g.conn() {
                            prepare_all(c, &hot).await;
                            g.reusable(&Ok::<(), sqlx::Error>(()));
                        }
                    }
                }
                Db::Sqlite(_) => {}
            }
        })
        .await;
    }

    /// Runs `op`, re-running it on transient conflicts (deadlock, busy), all within
    /// `query_timeout`.
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.run_bounded(what, usize::MAX, op).await
    }

    /// [`SqlStore::run`], re-running at most `conflicts` times on transient conflicts.
    pub(crate) async fn run_bounded<T, F, Fut>(&self, what: &str, conflicts: usize, mut op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let kind = self.kind;
        let mut conflicted = 0;
        let work = async {
            let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
            let mut broken = 0;
            loop {
                match op().await {
                    Ok(v) => return Ok(v),
                    // Every statement is safe to repeat: acquire and renew are idempotent for one
                    // owner, and a repeated release at worst reports NotOwner for a lock it freed.
                    Err(e) if broken < 2 && matches!(classify(kind, &e), Class::Broken) => {
                        broken += 1;
                        tracing::debug!(backend = kind.label(), error = %e, "{what}: connection broken; retrying on another");
                    }
                    Err(e) if conflicted < conflicts && matches!(classify(kind, &e), Class::Transient) => {
                        conflicted += 1;
                        tracing::debug!(backend = kind.label(), error = %e, "{what}: transient conflict; retrying");
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    Err(e) => return Err(to_lock_error(kind, what, e)),
                }
            }
        };
        match timeout(self.query_timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(LockError::unavailable(
                kind.label(),
                format!("{what} did not answer within {:?} (query_timeout)", self.query_timeout),
            )),
        }
    }
}

/// Opens the first connection and reads the server version.
async fn first_contact<C>(pool: &ConnPool<C>) -> Result<String, sqlx::Error>
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
    for<'r> String: sqlx::Decode<'r, C::Database> + sqlx::Type<C::Database>,
    for<'q> <C::Database as sqlx::Database>::Arguments: sqlx::IntoArguments<C::Database>,
    usize: sqlx::ColumnIndex<<C::Database as sqlx::Database>::Row>,
{
    pooled!(pool, |c| sqlx::query_scalar::<C::Database, String>("SELECT VERSION()").fetch_one(c))
}

/// Prepares (and so caches on the connection) every statement. Best effort: a
/// failure here resurfaces, with its real error, when the statement runs.
async fn prepare_all<C>(c: &mut C, statements: &[Arc<str>])
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    for sql in statements {
        if let Err(e) = (&mut *c).prepare(AssertSqlSafe(Arc::clone(sql)).into_sql_str()).await {
            tracing::debug!(error = %e, "could not prepare a lock statement ahead");
        }
    }
}

/// Whether the server is MariaDB 10.5 or later, whose `INSERT … ON DUPLICATE KEY UPDATE …
/// RETURNING` returns the row as it is after the statement: acquire then takes one round trip
/// instead of two. `DLOCK_SQL_MYSQL_RETURNING=0` turns it off (diagnostics, and tests of the
/// MySQL path on MariaDB).
fn supports_returning(version: &str) -> bool {
    if std::env::var("DLOCK_SQL_MYSQL_RETURNING").is_ok_and(|v| v.trim() == "0") || !version.contains("MariaDB") {
        return false;
    }
    // Some proxies report MariaDB as "5.5.5-10.x.y-MariaDB".
    let version = version.strip_prefix("5.5.5-").unwrap_or(version);
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty());
    let major = parts.next().and_then(|s| s.parse::<u32>().ok()).unwrap_or(0);
    let minor = parts.next().and_then(|s| s.parse::<u32>().ok()).unwrap_or(0);
    (major, minor) >= (10, 5)
}

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

pub(crate) fn remaining(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

pub(crate) fn token(kind: Kind, fence: i64) -> Result<TryLock, LockError> {
    match u64::try_from(fence) {
        Ok(t) => Ok(TryLock::Acquired { token: FencingToken(t) }),
        Err(_) => Err(LockError::backend(
            kind.label(),
            format!("the lease table holds a negative fence ({fence}); was it edited by hand?"),
        )),
    }
}

#[async_trait]
impl LeaseStore for SqlStore {
    fn backend(&self) -> &str {
        self.kind.label()
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new();
        caps.wake = if self.kind == Kind::Postgres { WakeMethod::Notify } else { WakeMethod::Poll };
        caps.lease_model = LeaseModel::PerLock;
        caps.durable_fencing = self.durable;
        caps.durable_leases = self.durable;
        caps.rw_lock = true;
        caps.semaphore = true;
        // Expiry is stored in whole milliseconds of the database clock.
        caps.min_ttl = Duration::from_millis(10);
        caps.max_ttl = Duration::from_secs(365 * 24 * 3600);
        caps
    }

    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        let (n, o, ms) = (name.as_str(), owner.to_hex(), ttl_ms(ttl));
        let o = o.as_str();
        let sql = &self.sql;
        let kind = self.kind;
        match &self.db {
            Db::Postgres(p) => {
                let row = self
                    .run("acquire", || async {
                        pooled!(p, |c| sqlx::query_as::<_, (Option<i64>, Option<i64>)>(AssertSqlSafe(
                            sql.acquire.clone()
                        ))
                        .bind(n)
                        .bind(o)
                        .bind(ms)
                        .fetch_all(c))
                        .map(|v| v.into_iter().next())
                    })
                    .await?;
                match row {
                    Some((Some(fence), _)) => token(kind, fence),
                    Some((None, rem)) => Ok(TryLock::Held { remaining: remaining(rem) }),
                    None => Ok(TryLock::Held { remaining: None }),
                }
            }
            Db::Mysql(p) => {
                let row = self
                    .run("acquire", || async {
                        let upsert =
                            sqlx::query_as::<_, (Option<Vec<u8>>, i64, i64)>(AssertSqlSafe(sql.acquire.clone()))
                                .bind(n.as_bytes())
                                .bind(o.as_bytes())
                                .bind(ms)
                                .bind(o.as_bytes())
                                .bind(o.as_bytes())
                                .bind(o.as_bytes())
                                .bind(o.as_bytes())
                                .bind(o.as_bytes())
                                .bind(ms);
                        let mut guard = p.get().await?;
                        let c = guard.conn()?;
                        let result = if sql.returning {
                            upsert.fetch_all(&mut *c).await
                        } else {
                            // sqlx sets CLIENT_FOUND_ROWS: rows_affected cannot tell a grant from
                            // a refusal. Read the row back; only our own attempt can make us the
                            // owner.
                            match upsert.fetch_all(&mut *c).await {
                                Ok(_) => {
                                    sqlx::query_as::<_, (Option<Vec<u8>>, i64, i64)>(AssertSqlSafe(
                                        sql.read_back.clone(),
                                    ))
                                    .bind(n.as_bytes())
                                    .fetch_all(&mut *c)
                                    .await
                                }
                                Err(e) => Err(e),
                            }
                        };
                        guard.reusable(&result);
                        result.map(|v| v.into_iter().next())
                    })
                    .await?;
                match row {
                    Some((Some(holder), fence, _)) if holder == o.as_bytes() => token(kind, fence),
                    Some((_, _, rem)) => Ok(TryLock::Held { remaining: remaining(Some(rem)) }),
                    None => Ok(TryLock::Held { remaining: None }),
                }
            }
            Db::Sqlite(p) => {
                let fence = self
                    .run("acquire", || async {
                        sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql.acquire.clone()))
                            .bind(n)
                            .bind(o)
                            .bind(ms)
                            .fetch_all(p)
                            .await
                            .map(|v| v.into_iter().next())
                    })
                    .await?;
                if let Some(fence) = fence {
                    return token(kind, fence);
                }
                let rem = self
                    .run("read the holder's lease", || async {
                        sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql.read_back.clone()))
                            .bind(n)
                            .fetch_all(p)
                            .await
                            .map(|v| v.into_iter().next())
                    })
                    .await?;
                Ok(TryLock::Held { remaining: remaining(rem) })
            }
        }
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let _serial = self.one_at_a_time(owner).await;
        let (n, o, ms) = (name.as_str(), owner.to_hex(), ttl_ms(ttl));
        let o = o.as_str();
        let sql = &self.sql.renew;
        let rows = match &self.db {
            Db::Postgres(p) => self
                .run("renew", || async {
                    pooled!(p, |c| sqlx::query(AssertSqlSafe(sql.clone())).bind(n).bind(o).bind(ms).execute(c))
                })
                .await?
                .rows_affected(),
            Db::Mysql(p) => {
                // CLIENT_FOUND_ROWS makes this "rows matched", which is what we ask.
                self.run("renew", || async {
                    pooled!(p, |c| sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(ms)
                        .bind(n.as_bytes())
                        .bind(o.as_bytes())
                        .execute(c))
                })
                .await?
                .rows_affected()
            }
            Db::Sqlite(p) => self
                .run("renew", || async {
                    sqlx::query(AssertSqlSafe(sql.clone())).bind(n).bind(o).bind(ms).execute(p).await
                })
                .await?
                .rows_affected(),
        };
        Ok(if rows > 0 { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let _serial = self.one_at_a_time(owner).await;
        let (n, o) = (name.as_str(), owner.to_hex());
        let o = o.as_str();
        let sql = &self.sql.release;
        let freed = match &self.db {
            Db::Postgres(p) => {
                let channel = self.table.as_str();
                self.run("release", || async {
                    pooled!(p, |c| sqlx::query(AssertSqlSafe(sql.clone())).bind(n).bind(o).bind(channel).fetch_all(c))
                        .map(|v| !v.is_empty())
                })
                .await?
            }
            Db::Mysql(p) => {
                self.run("release", || async {
                    pooled!(p, |c| sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(n.as_bytes())
                        .bind(o.as_bytes())
                        .execute(c))
                })
                .await?
                .rows_affected()
                    > 0
            }
            Db::Sqlite(p) => {
                self.run("release", || async {
                    sqlx::query(AssertSqlSafe(sql.clone())).bind(n).bind(o).execute(p).await
                })
                .await?
                .rows_affected()
                    > 0
            }
        };
        Ok(if freed { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.listener.as_ref().map(|_| self.hub.subscribe(name.as_str())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_versions() {
        assert!(supports_returning("10.11.19-MariaDB-0+deb12u1"));
        assert!(supports_returning("11.4.2-MariaDB"));
        assert!(supports_returning("5.5.5-10.6.12-MariaDB"));
        assert!(!supports_returning("10.4.30-MariaDB"));
        assert!(!supports_returning("8.0.36"));
        assert!(!supports_returning("8.4.0-commercial"));
    }

    #[test]
    fn schemes() {
        assert_eq!(parse_url("sqlite://x.db").unwrap().0, Kind::Sqlite);
        assert_eq!(parse_url("postgresql://h/db").unwrap().0, Kind::Postgres);
        assert_eq!(parse_url("POSTGRES://h/db").unwrap().0, Kind::Postgres);
        assert_eq!(parse_url("mariadb://root@h:3306/test").unwrap(), (Kind::Mysql, "mysql://root@h:3306/test".into()));
        for bad in ["redis://h", "nocolon", "", "mssql://h"] {
            assert!(matches!(parse_url(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }
}
