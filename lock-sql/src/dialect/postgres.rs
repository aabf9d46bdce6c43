//! PostgreSQL: one upsert with a CTE per acquire, releases that notify in the same statement,
//! and one LISTEN connection per client (see the crate docs).

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{LockError, WakeHub};
use sqlx::error::DatabaseError;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, Postgres as Pg};
use sqlx::{AssertSqlSafe, Executor};
use tokio::time::timeout;

use super::params::Accepted;
use super::rw::{acquire_tx, owner_stmt, Attempt, Flavor, KindSql, OwnerStmt};
use super::{
    bad_url, queue_table, renewed_of, too_slow, unreachable, Dialect, Grant, Profile, Seen, SeenRow, Upsert, Who,
};
use crate::adopt::{Owner, TableFacts};
use crate::decide::Plan;
use crate::error::{Class, Codes};
use crate::listen::{self, Listener};
use crate::observers::{self, OBSERVER_SEQ};
use crate::options::quote_table;
use crate::pool::{ConnPool, Setup, Use};
use crate::wake;
use crate::SqlOptions;

/// Milliseconds since the Unix epoch, on the database's clock.
const NOW: &str = "(extract(epoch from now()) * 1000)::bigint";

/// Microseconds since the Unix epoch, on the database's clock: the floor of new fences.
const NOW_US: &str = "(extract(epoch from now()) * 1000000)::bigint";

pub(crate) const CODES: Codes = Codes { label: "postgres", database: sqlstate };

/// The URL parameters sqlx's PostgreSQL driver reads (`sqlx-postgres` `options/parse.rs`); it
/// ignores any other, libpq's `sslpassword`, `connect_timeout` or `target_session_attrs` too.
pub(crate) const PARAMS: Accepted = Accepted {
    label: "postgres",
    names: &[
        &["sslmode", "ssl-mode"],
        &["sslrootcert", "ssl-root-cert", "ssl-ca"],
        &["sslcert", "ssl-cert"],
        &["sslkey", "ssl-key"],
        &["statement-cache-capacity"],
        &["host"],
        &["hostaddr"],
        &["port"],
        &["dbname"],
        &["user"],
        &["password"],
        &["application_name"],
        &["options"],
    ],
    bracketed: &["options"],
    fragment: false,
};

/// PostgreSQL SQLSTATEs.
fn sqlstate(db: &(dyn DatabaseError + 'static)) -> Class {
    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
    match code.as_str() {
        "40001" | "40P01" | "55P03" => Class::Transient,
        // the session was terminated (restart, pg_terminate_backend)
        "57P01" | "57P02" => Class::Broken,
        c if c.starts_with("08") => Class::Broken,
        "57P03" | "57014" | "53300" | "25006" | "53100" | "53200" => Class::Unavailable,
        c if c.starts_with("28") || c == "3D000" => Class::Config,
        // insufficient_privilege
        "42501" => Class::Denied,
        _ => Class::Other,
    }
}

const FLAVOR: Flavor = Flavor {
    quote: '"',
    now: NOW,
    create: |c, h| {
        [
            format!(
                "CREATE TABLE IF NOT EXISTS {c} (kind TEXT NOT NULL, name TEXT COLLATE \"C\" NOT NULL, \
                 fence BIGINT NOT NULL, permits BIGINT NOT NULL, claim_owner TEXT, claim_until BIGINT NOT NULL, \
                 PRIMARY KEY (kind, name))"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {h} (kind TEXT NOT NULL, name TEXT COLLATE \"C\" NOT NULL, \
                 owner TEXT NOT NULL, mode BIGINT NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL, \
                 PRIMARY KEY (kind, name, owner))"
            ),
        ]
    },
    insert: "INSERT",
    on_conflict: " ON CONFLICT DO NOTHING",
    for_update: " FOR UPDATE",
    numbered: true,
    begin: Some("BEGIN"),
};

/// A PostgreSQL database: its pool, its statements and its listener.
pub(crate) struct Postgres {
    pool: Arc<ConnPool<PgConnection>>,
    channel: String,
    /// Statements bounded by the `statement_timeout` of every session.
    profile: Profile,
    acquire: Arc<str>,
    /// `acquire` without the grant's queue clean-up, for attempts that cannot be queued.
    acquire_first: Arc<str>,
    leave_queue: Arc<str>,
    observe: Arc<str>,
    renew: Arc<str>,
    /// Every given lease's renewal in one statement (see `renew_many`).
    renew_many: Arc<str>,
    release: Arc<str>,
    force_release: Arc<str>,
    inspect: Arc<str>,
    list: Arc<str>,
    collect: Arc<str>,
    /// Stops with the dialect (and so with the store).
    _listener: Listener,
}

pub(crate) async fn connect(url: &str, options: &SqlOptions, hub: WakeHub) -> Result<Arc<dyn Dialect>, LockError> {
    PARAMS.check_url(url)?;
    let mut opts = PgConnectOptions::from_str(url).map_err(|e| bad_url(CODES, e))?;
    // Name our sessions in pg_stat_activity, unless the URL already does.
    if opts.get_application_name().is_none() {
        opts = opts.application_name("dlock");
    }
    let pool = ConnPool::new(opts.clone(), options.max_connections, options.connect_timeout, Some(session(options)));
    open(pool, opts, options, hub).await
}

/// Over the application's own pool (see [`ConnPool::app`] for the cost); the listener opens one
/// connection of its own with the pool's connect options.
pub(crate) async fn from_pool(pool: PgPool, options: &SqlOptions, hub: WakeHub) -> Result<Arc<dyn Dialect>, LockError> {
    let opts = (*pool.connect_options()).clone();
    open(ConnPool::app(pool, options.connect_timeout, Some(session(options))), opts, options, hub).await
}

/// The settings every session of ours runs with. Fences must survive a crash of the server: a
/// server configured with `synchronous_commit = off` acknowledges commits it may still lose,
/// and a lost fence lets a token repeat. The setting is the session's to choose; one round trip
/// per new connection. And the server ends every statement within the request timeout, so that
/// one whose caller was cancelled cannot commit a grant long after its clean-up ran (see
/// inflight.rs).
fn session(options: &SqlOptions) -> Setup<PgConnection> {
    let session =
        format!("SET synchronous_commit = on; SET statement_timeout = {}", options.request_timeout.as_millis().max(1));
    Arc::new(move |c| {
        let session = session.clone();
        Box::pin(async move { c.execute(AssertSqlSafe(session)).await.map(drop) })
    })
}

async fn open(
    pool: Arc<ConnPool<PgConnection>>,
    opts: PgConnectOptions,
    options: &SqlOptions,
    hub: WakeHub,
) -> Result<Arc<dyn Dialect>, LockError> {
    let bound = options.connect_timeout;
    // Connect once now, so that a wrong URL or a dead server fails here, clearly.
    let ping = pool.with(Use::Take, &(), |c: &mut PgConnection, _: &()| {
        Box::pin(async move { c.execute("SELECT 1").await.map(drop) })
    });
    timeout(bound, ping).await.map_err(|_| too_slow(CODES, bound))?.map_err(|e| unreachable(CODES, e))?;
    let bounds = listen::Bounds { connect: bound, query: options.request_timeout, codes: CODES };
    let listener = listen::start(opts, options.table.clone(), hub, bounds).await?;
    let mut dialect = Postgres::new(pool, &options.table, listener);
    dialect.profile.statement_bound = options.request_timeout;
    Ok(Arc::new(dialect))
}

impl Postgres {
    fn new(pool: Arc<ConnPool<PgConnection>>, t: &str, listener: Listener) -> Postgres {
        let qt = quote_table(t, '"');
        let qq = quote_table(&queue_table(t), '"');
        // The head of the queue: the live waiter with the lowest (seq, owner).
        let head = format!(
            "SELECT w.owner FROM {qq} w WHERE w.name = f.name AND w.expires_at > {NOW} \
             AND w.seq < {OBSERVER_SEQ} ORDER BY w.seq, w.owner LIMIT 1"
        );
        let lease_ddl = format!(
            "CREATE TABLE IF NOT EXISTS {qt} (name TEXT COLLATE \"C\" NOT NULL PRIMARY KEY, owner TEXT, \
             fence BIGINT NOT NULL, expires_at BIGINT NOT NULL, holder TEXT, metadata TEXT)"
        );
        let queue_ddl = format!(
            "CREATE TABLE IF NOT EXISTS {qq} (name TEXT COLLATE \"C\" NOT NULL, owner TEXT NOT NULL, \
             seq BIGINT NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (name, owner))"
        );
        // `dlock:<name>` for election observers, only while one observes (crate::observers).
        let notify_observers = |name: &str| observers::notify(t, &qq, name, NOW);
        Postgres {
            pool,
            profile: Profile::new(CODES, true, true, lease_ddl, queue_ddl),
            channel: t.to_owned(),
            // One statement: insert or take over a free/expired/own row unless a live waiter
            // queued before us ($7: our place, i64::MAX when not queued); when that did not
            // happen, report the holder's remaining lease (none when the row is free but owed
            // to a waiter) and, for a waiting attempt ($6: the entry's lifetime, 0 for
            // try_acquire), queue us or refresh our entry. A grant of an attempt that may be
            // queued deletes our entry and the name's expired ones; the first attempt of a wait
            // (and try_acquire) has no entry and runs the statement without that clean-up. (The
            // CTEs' snapshot may miss a row committed meanwhile: then no row comes back, and the
            // waiter just re-tries.)
            acquire: acquire(&qt, &qq, &notify_observers("l.name"), true).into(),
            acquire_first: acquire(&qt, &qq, &notify_observers("l.name"), false).into(),
            observe: observers::mark(&qq, NOW).into(),
            leave_queue: format!("DELETE FROM {qq} WHERE name = $1 AND (owner = $2 OR expires_at <= {NOW})").into(),
            renew: format!(
                "UPDATE {qt} SET expires_at = {NOW} + $3::bigint \
                 WHERE name = $1 AND owner = $2 AND expires_at > {NOW}"
            )
            .into(),
            renew_many: format!(
                "UPDATE {qt} AS l SET expires_at = {NOW} + $1::bigint \
                 FROM unnest($2::text[], $3::text[]) AS r(name, owner) \
                 WHERE l.name = r.name AND l.owner = r.owner AND l.expires_at > {NOW} \
                 RETURNING l.name, l.owner"
            )
            .into(),
            // Free, notify the head of the queue and the name's observers in one statement:
            // the notifications are delivered on commit (see `observers`).
            release: format!(
                "WITH freed AS ( \
                   UPDATE {qt} SET owner = NULL, expires_at = {NOW} \
                   WHERE name = $1 AND owner = $2 AND expires_at > {NOW} RETURNING name) \
                 SELECT (SELECT pg_notify($3, $4 || h.owner) FROM ({head}) h)::text, {} FROM freed f",
                notify_observers("f.name")
            )
            .into(),
            force_release: format!(
                "WITH freed AS ( \
                   UPDATE {qt} SET owner = NULL, expires_at = {NOW} \
                   WHERE name = $1 AND fence = $2 AND owner IS NOT NULL AND expires_at > {NOW} RETURNING name) \
                 SELECT (SELECT pg_notify($3, $4 || h.owner) FROM ({head}) h)::text, {} FROM freed f",
                notify_observers("f.name")
            )
            .into(),
            inspect: format!(
                "SELECT name, fence, expires_at - {NOW}, holder, metadata FROM {qt} \
                 WHERE name = $1 AND owner IS NOT NULL AND expires_at > {NOW}"
            )
            .into(),
            list: format!(
                "SELECT name, fence, expires_at - {NOW}, holder, metadata FROM {qt} \
                 WHERE name LIKE $1 ESCAPE '!' AND owner IS NOT NULL AND expires_at > {NOW} \
                 ORDER BY name LIMIT $2"
            )
            .into(),
            // Waiter entries that lapsed as long ago go with them (a crashed waiter's; queue.rs).
            collect: format!(
                "WITH lapsed AS (DELETE FROM {qq} WHERE expires_at <= {NOW} - $1::bigint) \
                 DELETE FROM {qt} WHERE expires_at <= {NOW} - $1::bigint"
            )
            .into(),
            _listener: listener,
        }
    }
}

/// The exclusive acquire statement (see `Postgres::new`): `$1` name, `$2` owner, `$3` ttl ms,
/// `$4` holder, `$5` metadata, `$6` the queue entry's lifetime in ms (0: never queue), `$7` the
/// caller's place. `clean_up`: a grant deletes the caller's queue entry and the name's expired
/// ones (only an attempt that may be queued needs it: the clause costs the server a DELETE's
/// executor set-up per acquire, BENCHMARKS.md "SQL acquire statements").
fn acquire(qt: &str, qq: &str, notify_observers: &str, clean_up: bool) -> String {
    let dequeued = if clean_up {
        format!(
            ", dequeued AS ( \
               DELETE FROM {qq} WHERE $6::bigint > 0 AND name = $1 AND (owner = $2 OR expires_at <= {NOW}) \
               AND EXISTS (SELECT 1 FROM granted))"
        )
    } else {
        String::new()
    };
    format!(
        "WITH ahead AS ( \
           SELECT 1 FROM {qq} w WHERE w.name = $1 AND w.owner <> $2 AND w.expires_at > {NOW} \
           AND w.seq < {OBSERVER_SEQ} \
           AND (w.seq, w.owner) < ($7::bigint, $2::text) LIMIT 1), \
         granted AS ( \
           INSERT INTO {qt} AS l (name, owner, fence, expires_at, holder, metadata) \
           VALUES ($1, $2, {NOW_US}, {NOW} + $3::bigint, $4, $5) \
           ON CONFLICT (name) DO UPDATE SET \
             fence = CASE WHEN l.owner = EXCLUDED.owner THEN l.fence \
                     ELSE GREATEST(l.fence + 1, EXCLUDED.fence) END, \
             owner = EXCLUDED.owner, \
             expires_at = EXCLUDED.expires_at, \
             holder = EXCLUDED.holder, \
             metadata = EXCLUDED.metadata \
           WHERE l.owner = EXCLUDED.owner \
              OR ((l.owner IS NULL OR l.expires_at <= {NOW}) AND NOT EXISTS (SELECT 1 FROM ahead)) \
           RETURNING fence, {notify_observers}), \
         queued AS ( \
           INSERT INTO {qq} AS w (name, owner, seq, expires_at) \
           SELECT $1, $2, {NOW_US}, {NOW} + $6::bigint \
           WHERE $6::bigint > 0 AND NOT EXISTS (SELECT 1 FROM granted) \
           ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at \
           RETURNING seq){dequeued} \
         SELECT fence, NULL::bigint AS remaining, NULL::bigint AS seq FROM granted \
         UNION ALL \
         SELECT NULL::bigint, \
           CASE WHEN h.owner IS NOT NULL AND h.expires_at > {NOW} THEN h.expires_at - {NOW} END, \
           (SELECT seq FROM queued) \
         FROM {qt} h WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM granted)"
    )
}

/// The catalog's view of table `quoted` (as the session's `search_path` finds it): where, whose,
/// its columns, and its triggers, rules or other kind than a plain table.
async fn pg_table_facts(c: &mut PgConnection, quoted: &str) -> Result<TableFacts, sqlx::Error> {
    // Superusers count as members of every role: for them only their own and superusers' tables
    // are trusted (a trigger would run with superuser rights).
    let (schema, kind, owner, trusted) = sqlx::query_as::<_, (String, String, String, bool)>(
        "SELECT n.nspname::text, c.relkind::text, r.rolname::text, \
           r.rolname = current_user OR r.rolsuper OR (pg_has_role(current_user, r.oid, 'MEMBER') \
             AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)) \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_roles r ON r.oid = c.relowner \
         WHERE c.oid = to_regclass($1)",
    )
    .bind(quoted)
    .fetch_one(&mut *c)
    .await?;
    let columns = sqlx::query_as::<_, (String, String)>(
        "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute \
         WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    .bind(quoted)
    .fetch_all(&mut *c)
    .await?;
    let mut hooks = sqlx::query_scalar::<_, String>(
        "SELECT 'trigger ' || tgname::text FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal \
         UNION ALL SELECT 'rule ' || rulename::text FROM pg_rewrite \
         WHERE ev_class = to_regclass($1) AND rulename <> '_RETURN'",
    )
    .bind(quoted)
    .fetch_all(&mut *c)
    .await?;
    if !matches!(kind.as_str(), "r" | "p") {
        hooks.push(format!("relkind {kind:?} (not a plain table)"));
    }
    let table = quoted.rsplit('.').next().unwrap_or(quoted).trim_matches('"');
    Ok(TableFacts {
        found_as: format!("{schema}.{table}"),
        columns,
        owner: if trusted { Owner::Trusted } else { Owner::Other(owner) },
        hooks,
    })
}

/// The values the exclusive lock's statements bind.
struct Args<'a> {
    sql: &'a Arc<str>,
    name: &'a str,
    owner: &'a str,
    ms: i64,
    /// The NOTIFY channel (release only).
    channel: &'a str,
    /// Acquire only.
    who: Who<'a>,
}

#[async_trait]
impl Dialect for Postgres {
    fn profile(&self) -> &Profile {
        &self.profile
    }

    async fn table_exists(&self, table: &str) -> Result<bool, sqlx::Error> {
        let quoted = quote_table(table, '"');
        self.pool
            .with(Use::Take, quoted.as_str(), |c, t| {
                Box::pin(sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL").bind(t).fetch_one(c))
            })
            .await
    }

    async fn table_facts(&self, table: &str) -> Result<TableFacts, sqlx::Error> {
        let quoted = quote_table(table, '"');
        self.pool.with(Use::Take, quoted.as_str(), |c, t| Box::pin(pg_table_facts(c, t))).await
    }

    async fn execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        self.pool
            .with(Use::Take, sql, |c, sql| Box::pin(async move { c.execute(AssertSqlSafe(sql)).await.map(drop) }))
            .await
    }

    async fn warm_up(&self) {
        let hot = [
            Arc::clone(&self.acquire),
            Arc::clone(&self.acquire_first),
            Arc::clone(&self.renew),
            Arc::clone(&self.renew_many),
            Arc::clone(&self.release),
        ];
        self.pool.prepare_on_two(&hot).await;
    }

    async fn acquire(&self, grant: Grant<'_>) -> Result<Upsert, sqlx::Error> {
        let Grant { name, owner, ttl_ms, who, wait } = grant;
        let sql = if wait.may_be_queued() { &self.acquire } else { &self.acquire_first };
        let args = (Args { sql, name, owner, ms: ttl_ms, channel: "", who }, wait);
        let row = self
            .pool
            .with(Use::Take, &args, |c, (a, wait)| {
                Box::pin(async move {
                    sqlx::query_as::<_, (Option<i64>, Option<i64>, Option<i64>)>(AssertSqlSafe(Arc::clone(a.sql)))
                        .bind(a.name)
                        .bind(a.owner)
                        .bind(a.ms)
                        .bind(a.who.holder)
                        .bind(a.who.metadata)
                        .bind(wait.lifetime_ms())
                        .bind(wait.place())
                        .fetch_all(c)
                        .await
                })
            })
            .await?;
        Ok(match row.into_iter().next() {
            Some((Some(fence), _, _)) => Upsert::Granted(fence),
            Some((None, remaining, seq)) => Upsert::Held { remaining, seq },
            None => Upsert::Held { remaining: None, seq: None },
        })
    }

    async fn leave_queue(&self, name: &str, owner: &str) -> Result<(), sqlx::Error> {
        let args = (Arc::clone(&self.leave_queue), name, owner, None);
        self.pool.with(Use::Take, &args, |c, a| Box::pin(observers::run(c, a))).await
    }

    async fn observe(&self, name: &str, owner: &str, lifetime_ms: i64) -> Result<(), sqlx::Error> {
        let args = (Arc::clone(&self.observe), name, owner, Some(lifetime_ms));
        self.pool.with(Use::Take, &args, |c, a| Box::pin(observers::run(c, a))).await
    }

    fn add_column(&self, table: &str, column: &str) -> String {
        format!("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {column} TEXT", quote_table(table, '"'))
    }

    async fn collect_idle(&self, idle_ms: i64) -> Result<u64, sqlx::Error> {
        let args = (Arc::clone(&self.collect), idle_ms);
        let done = self
            .pool
            .with(Use::Take, &args, |c, (sql, ms)| {
                Box::pin(sqlx::query(AssertSqlSafe(Arc::clone(sql))).bind(*ms).execute(c))
            })
            .await?;
        Ok(done.rows_affected())
    }

    async fn inspect(&self, name: &str) -> Result<Option<Seen>, sqlx::Error> {
        let args = (Arc::clone(&self.inspect), name);
        let row = self
            .pool
            .with(Use::Take, &args, |c, (sql, name)| {
                Box::pin(sqlx::query_as::<_, SeenRow>(AssertSqlSafe(Arc::clone(sql))).bind(*name).fetch_optional(c))
            })
            .await?;
        Ok(row.map(Seen::from))
    }

    async fn list(&self, prefix: &str, limit: i64) -> Result<Vec<Seen>, sqlx::Error> {
        let args = (Arc::clone(&self.list), super::like_prefix(prefix), limit);
        let rows = self
            .pool
            .with(Use::Take, &args, |c, (sql, pattern, limit)| {
                Box::pin(
                    sqlx::query_as::<_, SeenRow>(AssertSqlSafe(Arc::clone(sql)))
                        .bind(pattern.as_str())
                        .bind(*limit)
                        .fetch_all(c),
                )
            })
            .await?;
        Ok(rows.into_iter().map(Seen::from).collect())
    }

    async fn renew(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        let args = Args { sql: &self.renew, name, owner, ms: ttl_ms, channel: "", who: Who::default() };
        let done = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(sqlx::query(AssertSqlSafe(Arc::clone(a.sql))).bind(a.name).bind(a.owner).bind(a.ms).execute(c))
            })
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// One UPDATE joined with the lease list as two arrays: one statement, always the same text
    /// (prepared once per connection), whatever the number of leases.
    async fn renew_many(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let names: Vec<&str> = leases.iter().map(|(n, _)| *n).collect();
        let owners: Vec<&str> = leases.iter().map(|(_, o)| *o).collect();
        let args = (Arc::clone(&self.renew_many), names, owners, ttl_ms);
        let back = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(
                    sqlx::query_as::<_, (String, String)>(AssertSqlSafe(Arc::clone(&a.0)))
                        .bind(a.3)
                        .bind(&a.1)
                        .bind(&a.2)
                        .fetch_all(c),
                )
            })
            .await?;
        Ok(renewed_of(leases, &back))
    }

    async fn release(&self, name: &str, owner: &str) -> Result<bool, sqlx::Error> {
        let args = Args { sql: &self.release, name, owner, ms: 0, channel: &self.channel, who: Who::default() };
        let rows = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(
                    sqlx::query(AssertSqlSafe(Arc::clone(a.sql)))
                        .bind(a.name)
                        .bind(a.owner)
                        .bind(a.channel)
                        .bind(wake::WAITER)
                        .fetch_all(c),
                )
            })
            .await?;
        Ok(!rows.is_empty())
    }

    async fn force_release(&self, name: &str, fence: i64) -> Result<bool, sqlx::Error> {
        let args = (Arc::clone(&self.force_release), name, fence, self.channel.as_str());
        let rows = self
            .pool
            .with(Use::Keep, &args, |c, (sql, name, fence, channel)| {
                Box::pin(
                    sqlx::query(AssertSqlSafe(Arc::clone(sql)))
                        .bind(*name)
                        .bind(*fence)
                        .bind(*channel)
                        .bind(wake::WAITER)
                        .fetch_all(c),
                )
            })
            .await?;
        Ok(!rows.is_empty())
    }

    fn kind_sql(&self, table: &str) -> KindSql {
        KindSql::build(table, &FLAVOR)
    }

    async fn kind_acquire(&self, sql: &KindSql, attempt: &Attempt<'_>) -> Result<Plan, sqlx::Error> {
        self.pool
            .with(Use::Take, &(sql, attempt), |c, (sql, a)| Box::pin(acquire_tx::<Pg, &str>(c, sql, a, a.name)))
            .await
    }

    async fn kind_owner(&self, stmt: &OwnerStmt<'_>) -> Result<u64, sqlx::Error> {
        let done = self.pool.with(Use::Keep, stmt, |c, s| Box::pin(owner_stmt::<Pg, _, &str>(c, s, s.name))).await?;
        Ok(done.rows_affected())
    }

    async fn notify(&self, payload: &str) -> Result<(), sqlx::Error> {
        let args = (self.channel.as_str(), payload);
        self.pool
            .with(Use::Take, &args, |c, (channel, payload)| {
                Box::pin(async move {
                    sqlx::query("SELECT pg_notify($1, $2)::text")
                        .bind(*channel)
                        .bind(*payload)
                        .fetch_all(c)
                        .await
                        .map(drop)
                })
            })
            .await
    }
}
