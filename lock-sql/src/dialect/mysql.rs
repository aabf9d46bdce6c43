//! MySQL and MariaDB: an `ON DUPLICATE KEY UPDATE` upsert that evaluates its condition once (in
//! its first assignment, into a session variable), the row read back (or `RETURNING` on MariaDB
//! 10.5+), names as bytes.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;
use sqlx::error::DatabaseError;
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPool};
use sqlx::{AssertSqlSafe, Executor};
use tokio::time::timeout;

use super::params::Accepted;
use super::rw::{acquire_tx, owner_stmt, Attempt, KindSql, OwnerStmt};
use super::{
    ahead_of, bad_url, queue_table, seen_rows, too_slow, unreachable, Dialect, Grant, Profile, Seen, Upsert, Who,
};
use crate::adopt::{Owner, TableFacts};
use crate::decide::Plan;
use crate::error::{Class, Codes};
use crate::options::quote_table;
use crate::options::SqlOptions;
use crate::pool::{ConnPool, Setup, Use};
use crate::tls::Judged;
use sql::{Shape, FLAVOR, NOW, NO_COUNT};

mod acquire;
mod renew;
mod sql;

pub(crate) const CODES: Codes = Codes { label: "mysql", database: server_error };

/// The URL parameters sqlx's MySQL driver reads (`sqlx-mysql` `options/parse.rs`); it ignores
/// any other silently, `ssl_mode=` (underscore) too.
pub(crate) const PARAMS: Accepted = Accepted {
    label: "mysql",
    names: &[
        &["ssl-mode", "sslmode"],
        &["ssl-ca", "sslca"],
        &["ssl-cert", "sslcert"],
        &["ssl-key", "sslkey"],
        &["charset"],
        &["collation"],
        &["statement-cache-capacity"],
        &["socket"],
        &["timezone", "time-zone"],
    ],
    bracketed: &[],
    fragment: false,
};

fn server_error(db: &(dyn DatabaseError + 'static)) -> Class {
    let Some(my) = db.try_downcast_ref::<MySqlDatabaseError>() else { return Class::Other };
    match my.number() {
        // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
        1213 | 1205 => Class::Transient,
        // too many connections, shutdown in progress, killed/interrupted, read-only
        // server (a replica after failover), MariaDB connection killed
        1040 | 1053 | 1077 | 1078 | 1079 | 1152 | 1153 | 1158 | 1159 | 1160 | 1161 | 1290 | 1317 | 1836 | 1927
        | 4031 => Class::Unavailable,
        // access denied, unknown database
        1044 | 1045 | 1049 | 1698 => Class::Config,
        // command denied on a table or column, missing privilege
        1142 | 1143 | 1227 => Class::Denied,
        _ => Class::Other,
    }
}

/// A MySQL or MariaDB database: its pool and its statements.
pub(crate) struct Mysql {
    pool: Arc<ConnPool<MySqlConnection>>,
    /// Durable when `innodb_flush_log_at_trx_commit = 1` (an acknowledged commit survives a
    /// crash); statements bounded by the request timeout or the row-lock wait, the longer.
    profile: Profile,
    /// The acquire upsert of a caller not queued: the queue's summary on the lease row
    /// (`sql::Shape::Light`).
    acquire: Arc<str>,
    /// The acquire upsert that checks the queue itself (`sql::Shape::Queue`).
    acquire_queued: Arc<str>,
    /// The acquire upsert that also counts the waiters ahead (MariaDB: in `RETURNING`).
    acquire_counting: Arc<str>,
    /// Owner, fence and the remaining lease, after an upsert without `RETURNING`.
    read_back: Arc<str>,
    read_back_counting: Arc<str>,
    /// Queues a refused waiter (or refreshes its entry), then its place and the live waiters
    /// ahead of it are read (or returned).
    enqueue: Arc<str>,
    place: Arc<str>,
    leave_queue: Arc<str>,
    renew: Arc<str>,
    /// `renew` that sets the end where it says, sooner or not (`Dialect::end_after`).
    end_after: Arc<str>,
    /// The multi-row renewal up to its lease list (see `renew_many`).
    renew_many: Arc<str>,
    /// `renew_many` that does not wait for a row another transaction holds locked (see
    /// `renew_batch`).
    renew_many_nowait: Arc<str>,
    /// Which of a batch are still ours, up to its lease list (see `renew_batch`).
    renew_read: Arc<str>,
    /// The lease table, quoted.
    quoted: Arc<str>,
    release: Arc<str>,
    force_release: Arc<str>,
    inspect: Arc<str>,
    list: Arc<str>,
    collect: Arc<str>,
    /// Waiter entries that lapsed as long ago (a crashed waiter's; queue.rs).
    collect_queue: Arc<str>,
    /// MariaDB: the acquire upsert ends in `RETURNING owner, fence, remaining`, no read-back.
    returning: bool,
}

pub(crate) async fn connect(url: &str, options: &SqlOptions) -> Result<Arc<dyn Dialect>, LockError> {
    PARAMS.check_url(url)?;
    let opts = MySqlConnectOptions::from_str(url).map_err(|e| bad_url(CODES, e))?;
    Judged::mysql(&opts, Some(url)).enforce(options.tls, Some(url))?;
    // Row-lock waits end on the server too, not only in our timeout.
    let lock_wait = options.request_timeout.as_secs().clamp(1, 3600);
    // READ COMMITTED: no gap locks, fewer deadlocks between contenders. One text query (sqlx
    // enables multi-statements): one round trip per new connection.
    let database = identity(&opts);
    let pool = ConnPool::new(opts, options.max_connections, options.connect_timeout, Some(session(lock_wait)));
    open(pool, options, lock_wait, database).await
}

/// Over the application's own pool (see [`ConnPool::app`] for the cost).
pub(crate) async fn from_pool(pool: MySqlPool, options: &SqlOptions) -> Result<Arc<dyn Dialect>, LockError> {
    Judged::mysql(&pool.connect_options(), None).enforce(options.tls, None)?;
    let lock_wait = options.request_timeout.as_secs().clamp(1, 3600);
    let database = identity(&pool.connect_options());
    open(ConnPool::app(pool, options.connect_timeout, Some(session(lock_wait))), options, lock_wait, database).await
}

/// What tells a database apart within the process ([`Profile::database`]): the user, the host
/// (or socket), port and database the connect options name, never the password; a backend from
/// a URL and one over the application's pool to the same database share their release hints.
fn identity(o: &MySqlConnectOptions) -> String {
    let (user, db) = (o.get_username(), o.get_database().unwrap_or_default());
    match o.get_socket() {
        Some(socket) => format!("mysql://{user}@unix:{}/{db}", socket.display()),
        None => format!("mysql://{user}@{}:{}/{db}", o.get_host(), o.get_port()),
    }
}

fn session(lock_wait: u64) -> Setup<MySqlConnection> {
    let session = format!(
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; SET SESSION innodb_lock_wait_timeout = {lock_wait}"
    );
    Arc::new(move |c| {
        let session = session.clone();
        Box::pin(async move { c.execute(AssertSqlSafe(session)).await.map(drop) })
    })
}

async fn open(
    pool: Arc<ConnPool<MySqlConnection>>,
    options: &SqlOptions,
    lock_wait: u64,
    database: String,
) -> Result<Arc<dyn Dialect>, LockError> {
    let bound = options.connect_timeout;
    // Connect once now, so that a wrong URL or a dead server fails here, clearly. Fences are
    // durable only when InnoDB writes its log at every commit: the setting is global, so it is
    // checked, not set (0 loses about a second of commits when mysqld crashes, 2 when the host
    // does).
    let first = pool.with(Use::Take, &(), |c: &mut MySqlConnection, _: &()| {
        Box::pin(async move {
            sqlx::query_as::<_, (String, i64)>("SELECT VERSION(), CAST(@@innodb_flush_log_at_trx_commit AS SIGNED)")
                .fetch_one(c)
                .await
        })
    });
    let (version, flush) =
        timeout(bound, first).await.map_err(|_| too_slow(CODES, bound))?.map_err(|e| unreachable(CODES, e))?;
    let durable = flush == 1;
    if !durable {
        tracing::warn!(
            innodb_flush_log_at_trx_commit = flush,
            "the server may lose acknowledged commits in a crash, so fencing tokens may repeat after one: \
             durable_fencing = false; set innodb_flush_log_at_trx_commit = 1 on the server"
        );
    }
    let mut dialect =
        Mysql::new(pool, &options.table, supports_returning(&version), durable, version.contains("MariaDB"));
    // Row-lock waits end after innodb_lock_wait_timeout; the statement itself is short.
    dialect.profile.statement_bound = options.request_timeout.max(Duration::from_secs(lock_wait));
    dialect.profile.database = Some(database);
    Ok(Arc::new(dialect))
}

impl Mysql {
    /// An owner-checked `UPDATE` of one lease row (binds: ms, name, owner): whether it matched
    /// a row (CLIENT_FOUND_ROWS makes the count "rows matched", which is what we ask).
    async fn owner_update(&self, sql: &Arc<str>, name: &str, owner: &str, ms: i64) -> Result<bool, sqlx::Error> {
        let args = (Arc::clone(sql), name.as_bytes(), owner.as_bytes(), ms);
        let done = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(sqlx::query(AssertSqlSafe(Arc::clone(&a.0))).bind(a.3).bind(a.1).bind(a.2).execute(c))
            })
            .await?;
        Ok(done.rows_affected() > 0)
    }

    fn new(pool: Arc<ConnPool<MySqlConnection>>, t: &str, returning: bool, durable: bool, mariadb: bool) -> Mysql {
        let qt = quote_table(t, '`');
        let qq = quote_table(&queue_table(t), '`');
        let (lease_ddl, queue_ddl) = sql::ddl(&qt, &qq);
        let ahead = sql::ahead(&qq);
        Mysql {
            pool,
            profile: Profile::new(CODES, durable, false, lease_ddl, queue_ddl),
            acquire: sql::upsert(&qt, &qq, Shape::Light, returning, NO_COUNT).into(),
            acquire_queued: sql::upsert(&qt, &qq, Shape::Queue, returning, NO_COUNT).into(),
            acquire_counting: sql::upsert(&qt, &qq, Shape::Queue, returning, &ahead).into(),
            read_back: sql::read_back(&qt, NO_COUNT).into(),
            read_back_counting: sql::read_back(&qt, &ahead).into(),
            enqueue: sql::enqueue(&qq, returning).into(),
            place: format!("SELECT seq, {} FROM {qq} WHERE name = ? AND owner = ?", ahead_of(&qq, NOW)).into(),
            leave_queue: format!("DELETE FROM {qq} WHERE name = ? AND (owner = ? OR expires_at <= {NOW})").into(),
            renew: format!(
                "UPDATE {qt} SET expires_at = GREATEST(expires_at, {NOW} + ?) WHERE name = ? AND owner = ? \
                 AND expires_at > {NOW}"
            )
            .into(),
            end_after: format!(
                "UPDATE {qt} SET expires_at = {NOW} + ? WHERE name = ? AND owner = ? AND expires_at > {NOW}"
            )
            .into(),
            renew_many: format!(
                "UPDATE {qt} SET expires_at = GREATEST(expires_at, {NOW} + ?) WHERE expires_at > {NOW} AND "
            )
            .into(),
            renew_many_nowait: sql::renew_many_nowait(&qt, mariadb).into(),
            renew_read: format!("SELECT name, owner FROM {qt} WHERE expires_at > {NOW} AND ").into(),
            quoted: qt.clone().into(),
            release: format!(
                "UPDATE {qt} SET owner = NULL, expires_at = {NOW} \
                 WHERE name = ? AND owner = ? AND expires_at > {NOW}"
            )
            .into(),
            force_release: format!(
                "UPDATE {qt} SET owner = NULL, expires_at = {NOW} \
                 WHERE name = ? AND fence = ? AND owner IS NOT NULL AND expires_at > {NOW}"
            )
            .into(),
            inspect: format!(
                "SELECT name, fence, CAST(expires_at - {NOW} AS SIGNED), holder, metadata FROM {qt} \
                 WHERE name = ? AND owner IS NOT NULL AND expires_at > {NOW}"
            )
            .into(),
            list: format!(
                "SELECT name, fence, CAST(expires_at - {NOW} AS SIGNED), holder, metadata FROM {qt} \
                 WHERE name LIKE ? ESCAPE '!' AND owner IS NOT NULL AND expires_at > {NOW} \
                 ORDER BY name LIMIT ?"
            )
            .into(),
            // Not a row whose queue summary is still live (sql.rs): its waiters' entries would
            // outlive it.
            collect: format!("DELETE FROM {qt} WHERE expires_at <= {NOW} - ? AND queued_until <= {NOW} - ?").into(),
            collect_queue: format!("DELETE FROM {qq} WHERE expires_at <= {NOW} - ?").into(),
            returning,
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

/// `schema.table` → (`Some(schema)`, `table`); `table` → (`None`, `table`): the URL's database.
fn split(table: &str) -> (Option<&str>, &str) {
    match table.split_once('.') {
        Some((schema, t)) => (Some(schema), t),
        None => (None, table),
    }
}

/// The values the exclusive lock's statements bind: names and owner ids as bytes.
struct Args<'a> {
    dialect: &'a Mysql,
    name: &'a [u8],
    owner: &'a [u8],
    ms: i64,
    /// Acquire only.
    who: Who<'a>,
}

/// Whether an upsert's `row` refused `owner` a row that was free (unowned or expired).
fn refused_free(row: &Row, owner: &str) -> bool {
    let (holder, _, remaining, _, _) = row;
    match holder {
        Some(h) => h != owner.as_bytes() && *remaining <= 0,
        None => true,
    }
}

/// A row as `inspect` and `list` read it: name, fence, remaining ms, holder, metadata (bytes).
type SeenRow = (Vec<u8>, i64, i64, Option<Vec<u8>>, Option<Vec<u8>>);

impl From<SeenRow> for Seen {
    fn from((name, fence, remaining_ms, holder, metadata): SeenRow) -> Seen {
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        Seen { name: text(name), fence, remaining_ms, holder: holder.map(text), metadata: metadata.map(text) }
    }
}

/// The row after an upsert: owner, fence, remaining ms, the live waiters ahead (when counted),
/// `queued_until`.
type Row = (Option<Vec<u8>>, i64, i64, Option<i64>, i64);

#[async_trait]
impl Dialect for Mysql {
    fn profile(&self) -> &Profile {
        &self.profile
    }

    async fn table_exists(&self, table: &str) -> Result<bool, sqlx::Error> {
        let n = self
            .pool
            .with(Use::Take, &split(table), |c, (schema, t)| {
                Box::pin(
                    sqlx::query_scalar::<_, i64>(
                        "SELECT COUNT(*) FROM information_schema.tables \
                         WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
                    )
                    .bind(*schema)
                    .bind(*t)
                    .fetch_one(c),
                )
            })
            .await?;
        Ok(n > 0)
    }

    async fn table_facts(&self, table: &str) -> Result<TableFacts, sqlx::Error> {
        let (columns, hooks) = self
            .pool
            .with(Use::Take, &split(table), |c, (schema, t)| {
                Box::pin(async move {
                    let columns = sqlx::query_as::<_, (String, String)>(
                        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR) FROM information_schema.COLUMNS \
                         WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                    )
                    .bind(*schema)
                    .bind(*t)
                    .fetch_all(&mut *c)
                    .await?;
                    // Visible only with the TRIGGER privilege on the table (see adopt.rs).
                    let mut hooks = sqlx::query_scalar::<_, String>(
                        "SELECT CAST(CONCAT('trigger ', TRIGGER_NAME) AS CHAR) FROM information_schema.TRIGGERS \
                         WHERE EVENT_OBJECT_SCHEMA = COALESCE(?, DATABASE()) AND EVENT_OBJECT_TABLE = ?",
                    )
                    .bind(*schema)
                    .bind(*t)
                    .fetch_all(&mut *c)
                    .await?;
                    hooks.extend(crate::adopt::mysql_table_kind(&mut *c, *schema, t).await?);
                    Ok((columns, hooks))
                })
            })
            .await?;
        let found_as = match split(table) {
            (Some(schema), t) => format!("{schema}.{t}"),
            (None, t) => format!("{t} (in the URL's database)"),
        };
        Ok(TableFacts { found_as, columns, owner: Owner::NotTracked, hooks })
    }

    async fn execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        self.pool
            .with(Use::Take, sql, |c, sql| Box::pin(async move { c.execute(AssertSqlSafe(sql)).await.map(drop) }))
            .await
    }

    async fn warm_up(&self) {
        let mut hot = vec![Arc::clone(&self.acquire), Arc::clone(&self.renew), Arc::clone(&self.release)];
        if !self.returning {
            hot.push(Arc::clone(&self.read_back));
        }
        self.pool.prepare_on_two(&hot).await;
    }

    async fn acquire(&self, grant: Grant<'_>) -> Result<Upsert, sqlx::Error> {
        let Grant { name, owner, ttl_ms, who, wait } = grant;
        let shape = if wait.queued() { Shape::Queue } else { Shape::Light };
        let mut row = self.upsert(shape, name, owner, ttl_ms, who, wait).await?.into_iter().next();
        if shape == Shape::Light && row.as_ref().is_some_and(|r| refused_free(r, owner)) {
            // Refused by the queue's summary alone: ask the queue (sql.rs, module docs).
            row = self.upsert(Shape::Queue, name, owner, ttl_ms, who, wait).await?.into_iter().next();
        }
        match row {
            Some((Some(holder), fence, _, _, _)) if holder == owner.as_bytes() => {
                if wait.queued() {
                    self.leave_queue(name, owner).await?;
                }
                Ok(Upsert::Granted(fence))
            }
            // Free but refused: owed to a waiter queued before us, no lease to wait out.
            Some((holder, _, rem, counted, queued_until)) => {
                let remaining = (holder.is_some() && rem > 0).then_some(rem);
                let (seq, ahead) = match (wait.refresh(), wait.queued()) {
                    (false, true) => (Some(wait.place()), counted),
                    _ => self.enqueue(name, owner, wait, queued_until).await?.unzip(),
                };
                Ok(Upsert::Held { remaining, seq, seen: None, ahead })
            }
            // No row: MySQL's read-back after the row was granted, ended and collected in
            // between (lock-model's `mysql` model reaches it). An entry capped by 0 lives no
            // time: the waiter is not queued, and its next attempt asks again.
            None => {
                let (seq, ahead) = self.enqueue(name, owner, wait, 0).await?.unzip();
                Ok(Upsert::Held { remaining: None, seq, seen: None, ahead })
            }
        }
    }

    async fn leave_queue(&self, name: &str, owner: &str) -> Result<(), sqlx::Error> {
        let args = (Arc::clone(&self.leave_queue), name.as_bytes(), owner.as_bytes());
        self.pool
            .with(Use::Take, &args, |c, (sql, name, owner)| {
                Box::pin(sqlx::query(AssertSqlSafe(Arc::clone(sql))).bind(*name).bind(*owner).execute(c))
            })
            .await
            .map(drop)
    }

    async fn collect_idle(&self, idle_ms: i64) -> Result<u64, sqlx::Error> {
        let args = (self, idle_ms);
        let done = self
            .pool
            .with(Use::Take, &args, |c, (d, ms)| {
                Box::pin(async move {
                    sqlx::query(AssertSqlSafe(Arc::clone(&d.collect_queue))).bind(*ms).execute(&mut *c).await?;
                    sqlx::query(AssertSqlSafe(Arc::clone(&d.collect))).bind(*ms).bind(*ms).execute(&mut *c).await
                })
            })
            .await?;
        Ok(done.rows_affected())
    }

    async fn inspect(&self, name: &str) -> Result<Option<Seen>, sqlx::Error> {
        Ok(seen_rows::<_, SeenRow, _>(&self.pool, &self.inspect, name.as_bytes(), None).await?.into_iter().next())
    }

    async fn list(&self, prefix: &str, limit: i64) -> Result<Vec<Seen>, sqlx::Error> {
        seen_rows::<_, SeenRow, _>(&self.pool, &self.list, super::like_prefix(prefix).as_bytes(), Some(limit)).await
    }

    async fn renew(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        self.owner_update(&self.renew, name, owner, ttl_ms).await
    }

    async fn end_after(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        self.owner_update(&self.end_after, name, owner, ttl_ms).await
    }

    async fn renew_many(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        self.renew_batch(leases, ttl_ms).await
    }

    async fn release(&self, name: &str, owner: &str) -> Result<bool, sqlx::Error> {
        let args = Args { dialect: self, name: name.as_bytes(), owner: owner.as_bytes(), ms: 0, who: Who::default() };
        let done = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(sqlx::query(AssertSqlSafe(a.dialect.release.clone())).bind(a.name).bind(a.owner).execute(c))
            })
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn force_release(&self, name: &str, fence: i64) -> Result<bool, sqlx::Error> {
        let args = (Arc::clone(&self.force_release), name.as_bytes(), fence);
        let done = self
            .pool
            .with(Use::Keep, &args, |c, (sql, name, fence)| {
                Box::pin(sqlx::query(AssertSqlSafe(Arc::clone(sql))).bind(*name).bind(*fence).execute(c))
            })
            .await?;
        Ok(done.rows_affected() > 0)
    }

    fn kind_sql(&self, table: &str) -> KindSql {
        KindSql::build(table, &FLAVOR)
    }

    async fn kind_acquire(&self, sql: &KindSql, attempt: &Attempt<'_>) -> Result<Plan, sqlx::Error> {
        self.pool
            .with(Use::Take, &(sql, attempt), |c, (sql, a)| {
                Box::pin(acquire_tx::<MySql, &[u8]>(c, sql, a, a.name.as_bytes()))
            })
            .await
    }

    async fn kind_owner(&self, stmt: &OwnerStmt<'_>) -> Result<u64, sqlx::Error> {
        let done = self
            .pool
            .with(Use::Keep, stmt, |c, s| Box::pin(owner_stmt::<MySql, _, &[u8]>(c, s, s.name.as_bytes())))
            .await?;
        Ok(done.rows_affected())
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
    fn identities_tell_databases_apart_without_the_password() {
        let of = |url: &str| identity(&MySqlConnectOptions::from_str(url).unwrap());
        let a = of("mysql://u:secret@db:3306/app");
        assert_eq!(a, of("mysql://u:other@db/app"), "the password and the default port are not part of it");
        assert!(!a.contains("secret"));
        assert_ne!(a, of("mysql://u@db:3306/app2"));
        assert_ne!(a, of("mysql://u@db:3307/app"));
        assert_ne!(a, of("mysql://v@db:3306/app"));
        assert_ne!(of("mysql://u@localhost/app?socket=/run/a.sock"), of("mysql://u@localhost/app?socket=/run/b.sock"));
    }
}
