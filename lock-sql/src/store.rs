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
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Executor};
use tokio::time::timeout;

use crate::error::{classify, to_lock_error, Class};
use crate::listen::{self, Listener};
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

enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    Mysql(MySqlPool),
}

/// The statements of one dialect, with the (validated) table name spliced in once.
struct Statements {
    create: Arc<str>,
    acquire: Arc<str>,
    /// The holder's remaining lease in ms (SQLite), or owner, fence and remaining (MySQL).
    read_back: Arc<str>,
    renew: Arc<str>,
    release: Arc<str>,
}

/// Milliseconds since the Unix epoch, on the database's clock.
const PG_NOW: &str = "(extract(epoch from now()) * 1000)::bigint";
const MY_NOW: &str = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";
const LITE_NOW: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

impl Statements {
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
        }
    }

    fn mysql(t: &str) -> Self {
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
                   expires_at = IF({cond}, {now} + ?, expires_at)"
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
        }
    }
}

/// A lease table in PostgreSQL, MySQL/MariaDB or SQLite: the [`LeaseStore`] behind
/// [`SqlLock`](crate::SqlLock). See the crate docs for the algorithm.
pub struct SqlStore {
    kind: Kind,
    db: Db,
    table: String,
    sql: Statements,
    query_timeout: Duration,
    durable: bool,
    hub: WakeHub,
    listener: Option<Listener>,
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
                let opts = PgConnectOptions::from_str(&url).map_err(|e| bad_url(kind, e))?.application_name("dlock");
                listener_options = Some(opts.clone());
                let pool = PgPoolOptions::new()
                    .max_connections(options.max_connections)
                    .min_connections(0)
                    .acquire_timeout(bound)
                    .idle_timeout(Duration::from_secs(60))
                    .connect_with(opts);
                Db::Postgres(timeout(bound, pool).await.map_err(|_| too_slow())?.map_err(unreachable)?)
            }
            Kind::Mysql => {
                let opts = MySqlConnectOptions::from_str(&url).map_err(|e| bad_url(kind, e))?;
                // Row-lock waits end on the server too, not only in our timeout.
                let lock_wait = options.query_timeout.as_secs().clamp(1, 3600);
                let pool = MySqlPoolOptions::new()
                    .max_connections(options.max_connections)
                    .min_connections(0)
                    .acquire_timeout(bound)
                    .idle_timeout(Duration::from_secs(60))
                    .after_connect(move |conn, _meta| {
                        Box::pin(async move {
                            // READ COMMITTED: no gap locks, fewer deadlocks between contenders.
                            conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
                            conn.execute(AssertSqlSafe(format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}")))
                                .await?;
                            Ok(())
                        })
                    })
                    .connect_with(opts);
                Db::Mysql(timeout(bound, pool).await.map_err(|_| too_slow())?.map_err(unreachable)?)
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
        let sql = match kind {
            Kind::Postgres => Statements::postgres(&options.table),
            Kind::Mysql => Statements::mysql(&options.table),
            Kind::Sqlite => Statements::sqlite(&options.table),
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
        };
        store.create_table().await?;
        if let Some(opts) = listener_options {
            let bounds = listen::Bounds { connect: bound, query: options.query_timeout };
            store.listener = Some(listen::start(opts, options.table.clone(), hub, bounds).await?);
        }
        Ok(store)
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
                        Db::Postgres(p) => p.execute(AssertSqlSafe(sql.clone())).await.map(drop),
                        Db::Mysql(p) => p.execute(AssertSqlSafe(sql.clone())).await.map(drop),
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

    /// Runs `op`, re-running it on transient conflicts (deadlock, busy), all within
    /// `query_timeout`.
    async fn run<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let kind = self.kind;
        let work = async {
            let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
            loop {
                match op().await {
                    Ok(v) => return Ok(v),
                    Err(e) if matches!(classify(kind, &e), Class::Transient) => {
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

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

fn remaining(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

fn token(kind: Kind, fence: i64) -> Result<TryLock, LockError> {
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
                        sqlx::query_as::<_, (Option<i64>, Option<i64>)>(AssertSqlSafe(sql.acquire.clone()))
                            .bind(n)
                            .bind(o)
                            .bind(ms)
                            .fetch_optional(p)
                            .await
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
                        sqlx::query(AssertSqlSafe(sql.acquire.clone()))
                            .bind(n.as_bytes())
                            .bind(o.as_bytes())
                            .bind(ms)
                            .bind(o.as_bytes())
                            .bind(o.as_bytes())
                            .bind(o.as_bytes())
                            .bind(o.as_bytes())
                            .bind(o.as_bytes())
                            .bind(ms)
                            .execute(p)
                            .await?;
                        // sqlx sets CLIENT_FOUND_ROWS: rows_affected cannot tell a grant from a
                        // refusal. Read the row back; only our own attempt can make us the owner.
                        sqlx::query_as::<_, (Option<Vec<u8>>, i64, i64)>(AssertSqlSafe(sql.read_back.clone()))
                            .bind(n.as_bytes())
                            .fetch_optional(p)
                            .await
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
                            .fetch_optional(p)
                            .await
                    })
                    .await?;
                if let Some(fence) = fence {
                    return token(kind, fence);
                }
                let rem = self
                    .run("read the holder's lease", || async {
                        sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql.read_back.clone()))
                            .bind(n)
                            .fetch_optional(p)
                            .await
                    })
                    .await?;
                Ok(TryLock::Held { remaining: remaining(rem) })
            }
        }
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let (n, o, ms) = (name.as_str(), owner.to_hex(), ttl_ms(ttl));
        let o = o.as_str();
        let sql = &self.sql.renew;
        let rows = match &self.db {
            Db::Postgres(p) => self
                .run("renew", || async {
                    sqlx::query(AssertSqlSafe(sql.clone())).bind(n).bind(o).bind(ms).execute(p).await
                })
                .await?
                .rows_affected(),
            Db::Mysql(p) => {
                // CLIENT_FOUND_ROWS makes this "rows matched", which is what we ask.
                self.run("renew", || async {
                    sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(ms)
                        .bind(n.as_bytes())
                        .bind(o.as_bytes())
                        .execute(p)
                        .await
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
        let (n, o) = (name.as_str(), owner.to_hex());
        let o = o.as_str();
        let sql = &self.sql.release;
        let freed = match &self.db {
            Db::Postgres(p) => {
                let channel = self.table.as_str();
                self.run("release", || async {
                    sqlx::query(AssertSqlSafe(sql.clone())).bind(n).bind(o).bind(channel).fetch_optional(p).await
                })
                .await?
                .is_some()
            }
            Db::Mysql(p) => {
                self.run("release", || async {
                    sqlx::query(AssertSqlSafe(sql.clone())).bind(n.as_bytes()).bind(o.as_bytes()).execute(p).await
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
