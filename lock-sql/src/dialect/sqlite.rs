//! SQLite: the PostgreSQL-style upsert on a WAL file with `synchronous = FULL`, one writer at a
//! time (`BEGIN IMMEDIATE`), through the crate's own pool (`pool.rs`).
//!
//! Not sqlx's pool for a file: it pings each connection as it goes back (in a task of its own)
//! and, by default, before handing it out; each ping is a trip through the connection's worker
//! thread, so a free lock's acquire + release made four more thread hand-overs than its two
//! statements (measured: 0.68× the floor's pair, whose one connection has none of them).
//! An in-memory database and the application's own pool still go through a sqlx pool, which
//! keeps the in-memory database alive (its connection held open).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;
use sqlx::error::DatabaseError;
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Executor};
use tokio::time::timeout;

use super::params::Accepted;
use super::rw::{acquire_tx, owner_stmt, Attempt, Flavor, KindSql, OwnerStmt};
use super::{
    ahead_of, bad_url, lease_params, queue_table, renewed_of, too_slow, unreachable, Dialect, Grant, Profile, Seen,
    SeenRow, Upsert,
};
use crate::adopt::{Owner, TableFacts};
use crate::decide::Plan;
use crate::error::{Class, Codes};
use crate::options::quote_table;
use crate::options::SqlOptions;
use crate::pool::{ConnPool, Use};

/// Milliseconds since the Unix epoch, on the host's clock.
const NOW: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// Microseconds since the Unix epoch (at millisecond resolution): the floor of new fences.
const NOW_US: &str = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";

pub(crate) const CODES: Codes = Codes { label: "sqlite", database: result_code };

/// The URL parameters sqlx's SQLite driver reads (it refuses others itself; checked here too
/// for the same message and the refusal of repeats).
pub(crate) const PARAMS: Accepted = Accepted {
    label: "sqlite",
    names: &[&["mode"], &["cache"], &["immutable"], &["vfs"]],
    bracketed: &[],
    // A file name may hold '#'.
    fragment: true,
};

/// SQLite (extended) result codes.
fn result_code(db: &(dyn DatabaseError + 'static)) -> Class {
    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
    let Ok(n) = code.parse::<u32>() else { return Class::Other };
    match n & 0xff {
        // BUSY and LOCKED families
        5 | 6 => Class::Transient,
        // AUTH: an authorizer refused the statement
        23 => Class::Denied,
        // CANTOPEN: the path is wrong (a missing directory, no permission)
        14 => Class::Config,
        // NOTADB, READONLY, IOERR, FULL
        26 | 8 | 10 | 13 => Class::Unavailable,
        _ => Class::Other,
    }
}

const FLAVOR: Flavor = Flavor {
    quote: '"',
    now: NOW,
    create: |c, h| {
        [
            format!(
                "CREATE TABLE IF NOT EXISTS {c} (kind TEXT NOT NULL, name TEXT NOT NULL, fence INTEGER NOT NULL, \
                 permits INTEGER NOT NULL, claim_owner TEXT, claim_until INTEGER NOT NULL, \
                 PRIMARY KEY (kind, name))"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {h} (kind TEXT NOT NULL, name TEXT NOT NULL, owner TEXT NOT NULL, \
                 mode INTEGER NOT NULL, fence INTEGER NOT NULL, expires_at INTEGER NOT NULL, \
                 PRIMARY KEY (kind, name, owner))"
            ),
        ]
    },
    insert: "INSERT OR IGNORE",
    on_conflict: "",
    // The transaction holds the file's write lock instead (BEGIN IMMEDIATE).
    for_update: "",
    numbered: false,
    begin: None,
    greatest: "MAX",
};

/// A SQLite file (or in-memory database): its pool and its statements.
pub(crate) struct Lite {
    pool: Arc<ConnPool<SqliteConnection>>,
    /// The exclusive lock's release, on a file: connections with `synchronous = NORMAL`, so a
    /// release commits without waiting for the WAL's fsync, as on PostgreSQL (lock-sql docs,
    /// "Durable commits"). Every grant's commit syncs the WAL, and with it every release
    /// written before it. Elsewhere the one pool.
    releases: Arc<ConnPool<SqliteConnection>>,
    /// Statements bounded by `busy_timeout`: the longest a statement waits for the file.
    profile: Profile,
    acquire: String,
    /// The holder's remaining lease in ms, after a refused upsert.
    read_back: String,
    /// Queues a refused waiter (or refreshes its entry); its place and the live waiters ahead
    /// of it come back.
    enqueue: String,
    leave_queue: String,
    renew: String,
    /// `renew` that sets the end where it says, sooner or not (`Dialect::end_after`).
    end_after: String,
    /// The multi-row renewal up to its lease list (see `renew_many`).
    renew_many: String,
    release: String,
    force_release: String,
    inspect: String,
    list: String,
    collect: String,
    /// Waiter entries that lapsed as long ago (a crashed waiter's; queue.rs).
    collect_queue: String,
}

pub(crate) async fn connect(url: &str, options: &SqlOptions) -> Result<Arc<dyn Dialect>, LockError> {
    Ok(Arc::new(open(url, options).await?))
}

async fn open(url: &str, options: &SqlOptions) -> Result<Lite, LockError> {
    // Cut as sqlx does: the parameters follow the first '?'.
    if let Some((_, query)) = url.split_once('?') {
        PARAMS.check_query(query, url)?;
    }
    let lower = url.to_ascii_lowercase();
    let in_memory = lower.contains(":memory:") || lower.contains("mode=memory");
    let opts = SqliteConnectOptions::from_str(url)
        .map_err(|e| bad_url(CODES, e))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a fence that was handed out survives a power cut too.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(options.request_timeout);
    let bound = options.connect_timeout;
    // The database file as SQLite names it (empty in memory): what tells it apart for hints.
    let mut file = String::new();
    let pool: (Arc<ConnPool<SqliteConnection>>, _) = if in_memory {
        // The database lives only while a connection to it is open: sqlx's pool keeps one.
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(bound)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None);
        let pool = match timeout(bound, pool.connect_with(opts)).await {
            Ok(connected) => connected.map_err(|e| unreachable(CODES, e))?,
            Err(_) => return Err(too_slow(CODES, bound)),
        };
        let pool = ConnPool::app(pool, bound, None);
        (Arc::clone(&pool), pool)
    } else {
        let pool = ConnPool::new(opts.clone(), options.max_connections, bound, None);
        let mut first = first_connection(&opts, bound).await?;
        let look = sqlx::query_scalar::<_, String>(MAIN_FILE).fetch_one(&mut first);
        file = timeout(bound, look).await.map_err(|_| too_slow(CODES, bound))?.map_err(|e| unreachable(CODES, e))?;
        pool.keep(first).await;
        let releases = opts.synchronous(SqliteSynchronous::Normal);
        (pool, ConnPool::new(releases, options.max_connections, bound, None))
    };
    let mut dialect = Lite::new(pool, &options.table, !in_memory);
    dialect.profile.database = database(&file);
    // Statements wait for the file lock at most busy_timeout.
    dialect.profile.statement_bound = options.request_timeout;
    Ok(dialect)
}

/// The first connection to a file, so that a wrong path fails here, clearly. Processes opening
/// one file at once can be answered `database is locked` while a connection is set up
/// (`PRAGMA journal_mode = WAL` meets another's WAL recovery or mode switch, where SQLite does
/// not wait for the busy timeout): such an answer is retried within `bound` (seen in CI: two
/// `dlock run`s started together on a new file).
async fn first_connection(opts: &SqliteConnectOptions, bound: Duration) -> Result<SqliteConnection, LockError> {
    let last_busy = std::sync::Mutex::new(None);
    let connect = async {
        loop {
            match opts.connect().await {
                Err(e) if is_busy(&e) => {
                    *last_busy.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                done => return done,
            }
        }
    };
    match timeout(bound, connect).await {
        Ok(connected) => connected.map_err(|e| unreachable(CODES, e)),
        // Still locked when the bound ran out: say so rather than "too slow".
        Err(_) => match last_busy.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(unreachable(CODES, e)),
            None => Err(too_slow(CODES, bound)),
        },
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED, extended codes included (`BUSY_RECOVERY`, `BUSY_SNAPSHOT`, …).
fn is_busy(e: &sqlx::Error) -> bool {
    let code = match e {
        sqlx::Error::Database(d) => d.code().and_then(|c| c.parse::<i32>().ok()),
        _ => None,
    };
    code.is_some_and(|c| matches!(c & 0xff, 5 | 6))
}

/// Over the application's own pool. Its connect options are the application's: this backend
/// wants WAL, `synchronous = FULL` and a `busy_timeout` no longer than `request_timeout`, and
/// reports `durable_fencing` only when the database is a file with `synchronous` at least FULL.
pub(crate) async fn from_pool(pool: SqlitePool, options: &SqlOptions) -> Result<Arc<dyn Dialect>, LockError> {
    let bound = options.connect_timeout;
    let look = async {
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous").fetch_one(&pool).await?;
        let file: String = sqlx::query_scalar(MAIN_FILE).fetch_one(&pool).await?;
        Ok::<_, sqlx::Error>((sync >= 2 && !file.is_empty(), file))
    };
    let (durable, file) =
        timeout(bound, look).await.map_err(|_| too_slow(CODES, bound))?.map_err(|e| unreachable(CODES, e))?;
    // The application's connections keep their own `synchronous` for releases too.
    let pool = ConnPool::app(pool, bound, None);
    let mut dialect = Lite::new((Arc::clone(&pool), pool), &options.table, durable);
    dialect.profile.statement_bound = options.request_timeout;
    dialect.profile.database = database(&file);
    Ok(Arc::new(dialect))
}

/// The main database's file, as SQLite names it (absolute; empty for a database in memory).
const MAIN_FILE: &str = "SELECT file FROM pragma_database_list WHERE name = 'main'";

/// [`Profile::database`] of `file` ([`MAIN_FILE`]): backends on one file share their release
/// hints, whether from a URL or over the application's pool; none in memory (its waiters poll).
fn database(file: &str) -> Option<String> {
    (!file.is_empty()).then(|| format!("sqlite:{file}"))
}

impl Lite {
    /// An owner-checked `UPDATE` of one lease row (`?1` name, `?2` owner, `?3` ms): whether it
    /// changed a row.
    async fn owner_update(&self, sql: &str, name: &str, owner: &str, ms: i64) -> Result<bool, sqlx::Error> {
        changed(&self.pool, Use::Keep, sql, name, owner, ms).await
    }

    /// `pools`: every statement's, and the releases' (see [`Lite::releases`]).
    fn new(pools: (Arc<ConnPool<SqliteConnection>>, Arc<ConnPool<SqliteConnection>>), t: &str, durable: bool) -> Lite {
        let (pool, releases) = pools;
        let qt = quote_table(t, '"');
        let qq = quote_table(&queue_table(t), '"');
        let lease_ddl = format!(
            "CREATE TABLE IF NOT EXISTS {qt} (name TEXT NOT NULL PRIMARY KEY, owner TEXT, \
             fence INTEGER NOT NULL, expires_at INTEGER NOT NULL, holder TEXT, metadata TEXT)"
        );
        let queue_ddl = format!(
            "CREATE TABLE IF NOT EXISTS {qq} (name TEXT NOT NULL, owner TEXT NOT NULL, seq INTEGER NOT NULL, \
             expires_at INTEGER NOT NULL, PRIMARY KEY (name, owner))"
        );
        Lite {
            pool,
            releases,
            profile: Profile::new(CODES, durable, false, lease_ddl, queue_ddl),
            // SQLite evaluates every SET expression against the old row. A free row is not
            // taken while a live waiter queued before us (?6: our place) waits (queue.rs).
            acquire: format!(
                "INSERT INTO {qt} (name, owner, fence, expires_at, holder, metadata) \
                 VALUES (?1, ?2, {NOW_US}, {NOW} + ?3, ?4, ?5) \
                 ON CONFLICT (name) DO UPDATE SET \
                   fence = CASE WHEN owner = excluded.owner THEN fence ELSE MAX(fence + 1, excluded.fence) END, \
                   owner = excluded.owner, \
                   expires_at = MAX(expires_at, excluded.expires_at), \
                   holder = excluded.holder, \
                   metadata = excluded.metadata \
                 WHERE owner = excluded.owner OR ((owner IS NULL OR expires_at <= {NOW}) AND NOT EXISTS ( \
                   SELECT 1 FROM {qq} w WHERE w.name = ?1 AND w.owner <> ?2 AND w.expires_at > {NOW} \
                   AND (w.seq, w.owner) < (?6, ?2))) \
                 RETURNING fence"
            ),
            // The remaining lease, and the live waiters queued before ?2 at place ?3.
            read_back: format!(
                "SELECT CASE WHEN owner IS NOT NULL AND expires_at > {NOW} THEN expires_at - {NOW} END, \
                   (SELECT COUNT(*) FROM {qq} w WHERE w.name = ?1 AND w.owner <> ?2 AND w.expires_at > {NOW} \
                   AND (w.seq, w.owner) < (?3, ?2)) \
                 FROM {qt} WHERE name = ?1"
            ),
            enqueue: format!(
                "INSERT INTO {qq} (name, owner, seq, expires_at) VALUES (?1, ?2, {NOW_US}, {NOW} + ?3) \
                 ON CONFLICT (name, owner) DO UPDATE SET expires_at = excluded.expires_at \
                 RETURNING seq, {}",
                ahead_of(&qq, NOW)
            ),
            leave_queue: format!("DELETE FROM {qq} WHERE name = ?1 AND (owner = ?2 OR expires_at <= {NOW})"),
            renew: format!(
                "UPDATE {qt} SET expires_at = MAX(expires_at, {NOW} + ?3) WHERE name = ?1 AND owner = ?2 \
                 AND expires_at > {NOW}"
            ),
            end_after: format!(
                "UPDATE {qt} SET expires_at = {NOW} + ?3 WHERE name = ?1 AND owner = ?2 AND expires_at > {NOW}"
            ),
            renew_many: format!(
                "UPDATE {qt} SET expires_at = MAX(expires_at, {NOW} + ?1) WHERE expires_at > {NOW} AND "
            ),
            release: format!(
                "UPDATE {qt} SET owner = NULL, expires_at = {NOW} \
                 WHERE name = ?1 AND owner = ?2 AND expires_at > {NOW}"
            ),
            force_release: format!(
                "UPDATE {qt} SET owner = NULL, expires_at = {NOW} \
                 WHERE name = ?1 AND fence = ?2 AND owner IS NOT NULL AND expires_at > {NOW}"
            ),
            inspect: format!(
                "SELECT name, fence, expires_at - {NOW}, holder, metadata FROM {qt} \
                 WHERE name = ?1 AND owner IS NOT NULL AND expires_at > {NOW}"
            ),
            // Not LIKE: SQLite's LIKE ignores ASCII case.
            list: format!(
                "SELECT name, fence, expires_at - {NOW}, holder, metadata FROM {qt} \
                 WHERE substr(name, 1, length(?1)) = ?1 AND owner IS NOT NULL AND expires_at > {NOW} \
                 ORDER BY name LIMIT ?2"
            ),
            collect: format!("DELETE FROM {qt} WHERE expires_at <= {NOW} - ?1"),
            collect_queue: format!("DELETE FROM {qq} WHERE expires_at <= {NOW} - ?1"),
        }
    }
}

/// Runs `sql` on `pool` binding `a`, `b`, `c` (in that order; `()` binds nothing): whether it
/// changed a row.
async fn changed<B: ToBind, C: ToBind>(
    pool: &ConnPool<SqliteConnection>,
    purpose: Use,
    sql: &str,
    a: &str,
    b: B,
    c: C,
) -> Result<bool, sqlx::Error> {
    let done = pool
        .with(purpose, &(sql, a, b, c), |conn, (sql, a, b, c)| {
            Box::pin(c.bind_to(b.bind_to(sqlx::query(AssertSqlSafe(*sql)).bind(*a))).execute(conn))
        })
        .await?;
    Ok(done.rows_affected() > 0)
}

/// The later binds of [`changed`]: an owner id, a fence, a count of ms, or nothing.
trait ToBind: Copy + Send + Sync {
    fn bind_to<'q>(self, q: SqliteQuery<'q>) -> SqliteQuery<'q>
    where
        Self: 'q;
}

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>;

impl ToBind for &str {
    fn bind_to<'q>(self, q: SqliteQuery<'q>) -> SqliteQuery<'q>
    where
        Self: 'q,
    {
        q.bind(self)
    }
}

impl ToBind for i64 {
    fn bind_to<'q>(self, q: SqliteQuery<'q>) -> SqliteQuery<'q>
    where
        Self: 'q,
    {
        q.bind(self)
    }
}

impl ToBind for () {
    fn bind_to<'q>(self, q: SqliteQuery<'q>) -> SqliteQuery<'q>
    where
        Self: 'q,
    {
        q
    }
}

#[async_trait]
impl Dialect for Lite {
    fn profile(&self) -> &Profile {
        &self.profile
    }

    async fn table_exists(&self, table: &str) -> Result<bool, sqlx::Error> {
        let (schema, name) = table.split_once('.').unwrap_or(("main", table));
        // `schema` is a validated plain identifier (see options.rs).
        let sql = format!("SELECT COUNT(*) FROM \"{schema}\".sqlite_master WHERE type = 'table' AND name = ?1");
        let n = self
            .pool
            .with(Use::Take, &(sql.as_str(), name), |c, (sql, name)| {
                Box::pin(sqlx::query_scalar::<_, i64>(AssertSqlSafe(*sql)).bind(*name).fetch_one(c))
            })
            .await?;
        Ok(n > 0)
    }

    async fn table_facts(&self, table: &str) -> Result<TableFacts, sqlx::Error> {
        let (schema, name) = table.split_once('.').unwrap_or(("main", table));
        let sql = format!(
            "SELECT 'trigger ' || name FROM \"{schema}\".sqlite_master WHERE type = 'trigger' AND tbl_name = ?1"
        );
        let (columns, hooks) = self
            .pool
            .with(Use::Take, &(sql.as_str(), schema, name), |c, (sql, schema, name)| {
                Box::pin(async move {
                    let columns =
                        sqlx::query_as::<_, (String, String)>("SELECT name, type FROM pragma_table_info(?1, ?2)")
                            .bind(*name)
                            .bind(*schema)
                            .fetch_all(&mut *c)
                            .await?;
                    let hooks =
                        sqlx::query_scalar::<_, String>(AssertSqlSafe(*sql)).bind(*name).fetch_all(&mut *c).await?;
                    Ok((columns, hooks))
                })
            })
            .await?;
        Ok(TableFacts { found_as: format!("{schema}.{name}"), columns, owner: Owner::NotTracked, hooks })
    }

    async fn execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        self.pool
            .with(Use::Take, sql, |c, sql| Box::pin(async move { c.execute(AssertSqlSafe(sql)).await.map(drop) }))
            .await
    }

    async fn warm_up(&self) {}

    async fn acquire(&self, grant: Grant<'_>) -> Result<Upsert, sqlx::Error> {
        self.pool.with(Use::Take, &(self, grant), |c, (d, g)| Box::pin(d.acquire_on(c, *g))).await
    }

    async fn leave_queue(&self, name: &str, owner: &str) -> Result<(), sqlx::Error> {
        changed(&self.pool, Use::Take, &self.leave_queue, name, owner, ()).await.map(drop)
    }

    async fn renew(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        self.owner_update(&self.renew, name, owner, ttl_ms).await
    }

    async fn end_after(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        self.owner_update(&self.end_after, name, owner, ttl_ms).await
    }

    /// One UPDATE for every lease: `name IN (…)` lets SQLite find the rows by primary key, the
    /// row-value test checks each one's owner.
    async fn renew_many(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let n = leases.len();
        let sql = format!(
            "{}name IN ({}) AND (name, owner) IN (VALUES {}) RETURNING name, owner",
            self.renew_many,
            lease_params(n, 2, "?{n}", ", "),
            lease_params(n, 2, "(?{n}, ?{o})", ", ")
        );
        let back = self
            .pool
            .with(Use::Keep, &(sql.as_str(), leases, ttl_ms), |c, (sql, leases, ttl_ms)| {
                let mut query = sqlx::query_as::<_, (String, String)>(AssertSqlSafe(*sql)).bind(*ttl_ms);
                for (name, owner) in leases.iter() {
                    query = query.bind(*name).bind(*owner);
                }
                Box::pin(query.fetch_all(c))
            })
            .await?;
        Ok(renewed_of(leases, &back))
    }

    async fn release(&self, name: &str, owner: &str) -> Result<bool, sqlx::Error> {
        changed(&self.releases, Use::Keep, &self.release, name, owner, ()).await
    }

    async fn force_release(&self, name: &str, fence: i64) -> Result<bool, sqlx::Error> {
        changed(&self.pool, Use::Keep, &self.force_release, name, fence, ()).await
    }

    async fn collect_idle(&self, idle_ms: i64) -> Result<u64, sqlx::Error> {
        let done = self
            .pool
            .with(Use::Take, &(self, idle_ms), |c, (d, ms)| {
                Box::pin(async move {
                    sqlx::query(AssertSqlSafe(d.collect_queue.as_str())).bind(*ms).execute(&mut *c).await?;
                    sqlx::query(AssertSqlSafe(d.collect.as_str())).bind(*ms).execute(&mut *c).await
                })
            })
            .await?;
        Ok(done.rows_affected())
    }

    async fn inspect(&self, name: &str) -> Result<Option<Seen>, sqlx::Error> {
        let row = self
            .pool
            .with(Use::Take, &(self.inspect.as_str(), name), |c, (sql, name)| {
                Box::pin(sqlx::query_as::<_, SeenRow>(AssertSqlSafe(*sql)).bind(*name).fetch_optional(c))
            })
            .await?;
        Ok(row.map(Seen::from))
    }

    async fn list(&self, prefix: &str, limit: i64) -> Result<Vec<Seen>, sqlx::Error> {
        let rows = self
            .pool
            .with(Use::Take, &(self.list.as_str(), prefix, limit), |c, (sql, prefix, limit)| {
                Box::pin(sqlx::query_as::<_, SeenRow>(AssertSqlSafe(*sql)).bind(*prefix).bind(*limit).fetch_all(c))
            })
            .await?;
        Ok(rows.into_iter().map(Seen::from).collect())
    }

    fn kind_sql(&self, table: &str) -> KindSql {
        KindSql::build(table, &FLAVOR)
    }

    async fn kind_acquire(&self, sql: &KindSql, attempt: &Attempt<'_>) -> Result<Plan, sqlx::Error> {
        self.pool
            .with(Use::Take, &(sql, attempt), |c, (sql, attempt)| {
                Box::pin(async move {
                    // IMMEDIATE: the write lock of the file first, so two acquires never both
                    // read and then both write. Dropped without commit = rolled back.
                    let mut tx = c.begin_with("BEGIN IMMEDIATE").await?;
                    let plan = acquire_tx::<Sqlite, &str>(&mut tx, sql, attempt, attempt.name).await?;
                    tx.commit().await?;
                    Ok(plan)
                })
            })
            .await
    }

    async fn kind_owner(&self, stmt: &OwnerStmt<'_>) -> Result<u64, sqlx::Error> {
        let done =
            self.pool.with(Use::Keep, stmt, |c, s| Box::pin(owner_stmt::<Sqlite, _, &str>(c, s, s.name))).await?;
        Ok(done.rows_affected())
    }
}

impl Lite {
    /// The acquire upsert on `c`; when refused, the holder's remaining lease, and the caller's
    /// place and the live waiters ahead of it (queued or refreshed on the way).
    async fn acquire_on(&self, c: &mut SqliteConnection, grant: Grant<'_>) -> Result<Upsert, sqlx::Error> {
        let Grant { name, owner, ttl_ms, who, wait } = grant;
        let fence = sqlx::query_scalar::<_, i64>(AssertSqlSafe(self.acquire.as_str()))
            .bind(name)
            .bind(owner)
            .bind(ttl_ms)
            .bind(who.holder)
            .bind(who.metadata)
            .bind(wait.place())
            .fetch_all(&mut *c)
            .await?;
        if let Some(fence) = fence.into_iter().next() {
            if wait.queued() {
                sqlx::query(AssertSqlSafe(self.leave_queue.as_str())).bind(name).bind(owner).execute(&mut *c).await?;
            }
            return Ok(Upsert::Granted(fence));
        }
        let row = sqlx::query_as::<_, (Option<i64>, i64)>(AssertSqlSafe(self.read_back.as_str()))
            .bind(name)
            .bind(owner)
            .bind(wait.place())
            .fetch_all(&mut *c)
            .await?;
        let (remaining, counted) = row.into_iter().next().map_or((None, None), |(rem, ahead)| (rem, Some(ahead)));
        let (seq, ahead) = match wait.lifetime_ms() {
            0 => (None, None),
            // Written recently: keep the entry as it is, the count above says where it stands.
            _ if wait.queued() && !wait.refresh() => (Some(wait.place()), counted),
            lifetime => {
                let (seq, ahead) = sqlx::query_as::<_, (i64, i64)>(AssertSqlSafe(self.enqueue.as_str()))
                    .bind(name)
                    .bind(owner)
                    .bind(lifetime)
                    .fetch_one(&mut *c)
                    .await?;
                (Some(seq), Some(ahead))
            }
        };
        Ok(Upsert::Held { remaining, seq, seen: None, ahead })
    }
}

#[cfg(test)]
mod tests;
