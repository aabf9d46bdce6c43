//! PostgreSQL: one upsert with a CTE per acquire, releases that notify in the same statement,
//! and one LISTEN connection per client (see the crate docs).
//!
//! Everything only PostgreSQL does lives in this folder, beside the dialect that uses it: the
//! statements ([`sql`]), the listener ([`listen`]) and the keys it hears ([`wake`]), the grant in
//! the release ([`handoff`]) and the election observers' SQL ([`observers`]). The store sees
//! none of it: it names a [`Wakeup`] and asks [`Dialect::handoffs`], and this dialect answers.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{
    backend::{WakeHub, WakeSubscription},
    ChangeFeed, LockError,
};
use sqlx::error::DatabaseError;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, Postgres as Pg};
use sqlx::{AssertSqlSafe, Executor};
use tokio::sync::oneshot;
use tokio::time::timeout;

use super::params::Accepted;
use super::rw::{acquire_tx, owner_stmt, Attempt, KindSql, OwnerStmt};
use super::{
    bad_url, renewed_of, seen_rows, too_slow, unreachable, Dialect, Grant, Handoff, Profile, Seen, SeenRow, Upsert,
    Wakeup, Who,
};
use crate::adopt::{Owner, TableFacts};
use crate::decide::Plan;
use crate::error::{Class, Codes};
use crate::options::quote_table;
use crate::options::SqlOptions;
use crate::pool::{ConnPool, Use};
use crate::tls::Judged;
use handoff::Handoffs;
use listen::Listener;
use sql::{Statements, FLAVOR};

mod handoff;
mod listen;
// lock-model's differential test reads the statements' text (doc-hidden in lib.rs).
pub mod model_text;
mod observers;
pub(crate) mod pin;
mod sql;
mod wake;

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

/// A PostgreSQL database: its pool, its statements and its listener.
pub(crate) struct Postgres {
    pool: Arc<ConnPool<PgConnection>>,
    /// The table's channel: every client of the table listens on it (observers, the kinds'
    /// waiters, and the head a force release wakes).
    channel: String,
    /// This client's own channel, named in its waiters' queue entries: a hand-off to one of
    /// them notifies only this client's listener, not every client's (one delivery per
    /// hand-off; PostgreSQL before 19 still signals every listening backend, which then skips
    /// a channel it does not listen on).
    wake: String,
    /// The lock tables' schema ([`pin::qualify`]): the store names them without it.
    schema: String,
    /// Statements bounded by the `statement_timeout` of every session.
    profile: Profile,
    sql: Statements,
    /// The grants this client's waiters were notified of (the listener records them).
    handoffs: Arc<Handoffs>,
    /// The listener's wake-ups, fanned out to this client's waiters and observers.
    hub: WakeHub,
    /// Stops with the dialect (and so with the store).
    listener: Listener,
}

pub(crate) async fn connect(url: &str, options: &SqlOptions) -> Result<Arc<dyn Dialect>, LockError> {
    PARAMS.check_url(url)?;
    let mut opts = PgConnectOptions::from_str(url).map_err(|e| bad_url(CODES, e))?;
    Judged::postgres(&opts, Some(url)).enforce(options.tls, Some(url))?;
    // Name our sessions in pg_stat_activity, unless the URL already does.
    if opts.get_application_name().is_none() {
        opts = opts.application_name("dlock");
    }
    let pool =
        ConnPool::new(opts.clone(), options.max_connections, options.connect_timeout, Some(pin::session(options)));
    // The first connection, before its path is pinned, says where the table is.
    let bound = options.connect_timeout;
    let mut bare = pool.connect_bare().await.map_err(|e| reached(e, bound))?;
    let table = pin::qualify(&mut bare, &options.table).await?;
    pool.keep(bare).await;
    open(pool, opts, options, table).await
}

/// Over the application's own pool (see [`ConnPool::app`] for the cost); the listener opens one
/// connection of its own with the pool's connect options.
pub(crate) async fn from_pool(pool: PgPool, options: &SqlOptions) -> Result<Arc<dyn Dialect>, LockError> {
    let opts = (*pool.connect_options()).clone();
    Judged::postgres(&opts, None).enforce(options.tls, None)?;
    let bound = options.connect_timeout;
    let table = {
        let mut lent = match timeout(bound, pool.acquire()).await {
            Ok(r) => r.map_err(|e| reached(e, bound))?,
            Err(_) => return Err(too_slow(CODES, bound)),
        };
        pin::qualify(&mut lent, &options.table).await?
    };
    open(ConnPool::app_borrowing(pool, bound, pin::borrow(options)), opts, options, table).await
}

/// A failed first connection as the error `connect` returns.
fn reached(e: sqlx::Error, bound: std::time::Duration) -> LockError {
    match e {
        sqlx::Error::PoolTimedOut => too_slow(CODES, bound),
        e => unreachable(CODES, e),
    }
}

/// `table`: the lease table with its schema ([`pin::qualify`]).
async fn open(
    pool: Arc<ConnPool<PgConnection>>,
    opts: PgConnectOptions,
    options: &SqlOptions,
    table: String,
) -> Result<Arc<dyn Dialect>, LockError> {
    let bound = options.connect_timeout;
    // Connect once now, so that a wrong URL or a dead server fails here, clearly.
    let ping = pool.with(Use::Take, &(), |c: &mut PgConnection, _: &()| {
        Box::pin(async move { c.execute("SELECT 1").await.map(drop) })
    });
    timeout(bound, ping).await.map_err(|_| too_slow(CODES, bound))?.map_err(|e| unreachable(CODES, e))?;
    let bounds =
        listen::Bounds { connect: bound, query: options.request_timeout, codes: CODES, idle: listen::IDLE_UNLISTEN };
    let handoffs = Arc::new(Handoffs::default());
    let hub = WakeHub::new();
    // 40 bytes, within PostgreSQL's 63 for a channel name whatever the table's name.
    let wake = format!("dlock_w_{}", lock_core::OwnerId::random().to_hex());
    let channels = vec![options.table.clone(), wake.clone()];
    let listener = listen::start(opts, channels, hub.clone(), Arc::clone(&handoffs), bounds).await?;
    let sql = Statements::new(&table, &options.table);
    let profile = Profile::new(CODES, true, true, sql.lease_ddl.clone(), sql.queue_ddl.clone());
    let channel = options.table.clone();
    let schema = table.split_once('.').map(|(s, _)| s.to_owned()).unwrap_or_default();
    let mut dialect = Postgres { pool, channel, wake, schema, profile, sql, handoffs, hub, listener };
    dialect.profile.statement_bound = options.request_timeout;
    Ok(Arc::new(dialect))
}

impl Postgres {
    /// An owner-checked `UPDATE` of one lease row (`$1` name, `$2` owner, `$3` ms): whether it
    /// changed a row.
    async fn owner_update(&self, sql: &Arc<str>, name: &str, owner: &str, ms: i64) -> Result<bool, sqlx::Error> {
        let args = Args { sql, name, owner, ms, channel: "", who: Who::default() };
        let done = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(sqlx::query(AssertSqlSafe(Arc::clone(a.sql))).bind(a.name).bind(a.owner).bind(a.ms).execute(c))
            })
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// A table the store names (the lease table, or one named after it) with its schema.
    fn qualified(&self, table: &str) -> String {
        if table.contains('.') || self.schema.is_empty() {
            table.to_owned()
        } else {
            format!("{}.{table}", self.schema)
        }
    }

    fn quote(&self, table: &str) -> String {
        quote_table(&self.qualified(table), '"')
    }
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

/// The acquire statement's row: fence when granted; else remaining ms, queue place, seen fence.
type Row4 = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

/// Runs a release or hand-on statement (`sql::handing`); whether it freed or passed on a row.
async fn handing(c: &mut PgConnection, a: &Args<'_>) -> Result<bool, sqlx::Error> {
    let rows = sqlx::query(AssertSqlSafe(Arc::clone(a.sql))).bind(a.name).bind(a.owner).fetch_all(c).await?;
    Ok(!rows.is_empty())
}

/// The values the exclusive lock's statements bind.
struct Args<'a> {
    sql: &'a Arc<str>,
    name: &'a str,
    owner: &'a str,
    ms: i64,
    /// Acquire only: the NOTIFY channel its waiters are woken on (this client's own).
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
        let quoted = self.quote(table);
        self.pool
            .with(Use::Take, quoted.as_str(), |c, t| {
                Box::pin(sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL").bind(t).fetch_one(c))
            })
            .await
    }

    async fn table_facts(&self, table: &str) -> Result<TableFacts, sqlx::Error> {
        let quoted = self.quote(table);
        self.pool.with(Use::Take, quoted.as_str(), |c, t| Box::pin(pg_table_facts(c, t))).await
    }

    async fn execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        self.pool
            .with(Use::Take, sql, |c, sql| Box::pin(async move { c.execute(AssertSqlSafe(sql)).await.map(drop) }))
            .await
    }

    async fn warm_up(&self) {
        let hot = [
            Arc::clone(&self.sql.acquire),
            Arc::clone(&self.sql.acquire_first),
            Arc::clone(&self.sql.acquire_try),
            Arc::clone(&self.sql.claim),
            Arc::clone(&self.sql.renew),
            Arc::clone(&self.sql.renew_many),
            Arc::clone(&self.sql.release),
            Arc::clone(&self.sql.release_unqueued),
        ];
        self.pool.prepare_on_two(&hot).await;
    }

    async fn acquire(&self, grant: Grant<'_>) -> Result<Upsert, sqlx::Error> {
        let Grant { name, owner, ttl_ms, who, wait } = grant;
        let sql = if wait.may_be_queued() {
            &self.sql.acquire
        } else if wait.lifetime_ms() > 0 {
            &self.sql.acquire_first
        } else {
            &self.sql.acquire_try
        };
        let args = (Args { sql, name, owner, ms: ttl_ms, channel: &self.wake, who }, wait);
        let row = self
            .pool
            .with(Use::Take, &args, |c, (a, wait)| {
                Box::pin(async move {
                    let q = sqlx::query_as::<_, Row4>(AssertSqlSafe(Arc::clone(a.sql)))
                        .bind(a.name)
                        .bind(a.owner)
                        .bind(a.ms)
                        .bind(a.who.holder)
                        .bind(a.who.metadata);
                    // `try_acquire`'s statement has no queue to write (sql.rs `Attempt::Try`).
                    let q = if wait.lifetime_ms() > 0 {
                        q.bind(wait.lifetime_ms()).bind(wait.place()).bind(a.channel)
                    } else {
                        q.bind(wait.place())
                    };
                    q.fetch_all(c).await
                })
            })
            .await?;
        Ok(match row.into_iter().next() {
            Some((Some(fence), _, _, _)) => Upsert::Granted(fence),
            Some((None, remaining, seq, seen)) => Upsert::Held { remaining, seq, seen, ahead: None },
            None => Upsert::Held { remaining: None, seq: None, seen: None, ahead: None },
        })
    }

    async fn leave_queue(&self, name: &str, owner: &str) -> Result<(), sqlx::Error> {
        let args = (Arc::clone(&self.sql.leave_queue), name, owner, None);
        self.pool.with(Use::Take, &args, |c, a| Box::pin(observers::run(c, a))).await
    }

    fn handoffs(&self) -> Option<&dyn Handoff> {
        Some(&*self.handoffs)
    }

    async fn claim(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<Option<i64>, sqlx::Error> {
        let args = (Arc::clone(&self.sql.claim), name, owner, ttl_ms);
        self.pool
            .with(Use::Take, &args, |c, (sql, name, owner, ms)| {
                Box::pin(
                    sqlx::query_scalar::<_, i64>(AssertSqlSafe(Arc::clone(sql)))
                        .bind(*name)
                        .bind(*owner)
                        .bind(*ms)
                        .fetch_optional(c),
                )
            })
            .await
    }

    async fn hand_on(&self, name: &str, owner: &str) -> Result<(), sqlx::Error> {
        let args = Args { sql: &self.sql.hand_on, name, owner, ms: 0, channel: "", who: Who::default() };
        self.pool.with(Use::Keep, &args, |c, a| Box::pin(handing(c, a))).await.map(drop)
    }

    async fn observe(&self, name: &str, owner: &str, lifetime_ms: i64) -> Result<(), sqlx::Error> {
        let args = (Arc::clone(&self.sql.observe), name, owner, Some(lifetime_ms));
        self.pool.with(Use::Take, &args, |c, a| Box::pin(observers::run(c, a))).await
    }

    async fn collect_idle(&self, idle_ms: i64) -> Result<u64, sqlx::Error> {
        let args = (Arc::clone(&self.sql.collect), idle_ms);
        let done = self
            .pool
            .with(Use::Take, &args, |c, (sql, ms)| {
                Box::pin(sqlx::query(AssertSqlSafe(Arc::clone(sql))).bind(*ms).execute(c))
            })
            .await?;
        Ok(done.rows_affected())
    }

    async fn inspect(&self, name: &str) -> Result<Option<Seen>, sqlx::Error> {
        Ok(seen_rows::<_, SeenRow, _>(&self.pool, &self.sql.inspect, name, None).await?.into_iter().next())
    }

    async fn list(&self, prefix: &str, limit: i64) -> Result<Vec<Seen>, sqlx::Error> {
        seen_rows::<_, SeenRow, _>(&self.pool, &self.sql.list, super::like_prefix(prefix).as_str(), Some(limit)).await
    }

    async fn renew(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        self.owner_update(&self.sql.renew, name, owner, ttl_ms).await
    }

    async fn end_after(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        self.owner_update(&self.sql.end_after, name, owner, ttl_ms).await
    }

    /// One UPDATE joined with the lease list as two arrays: one statement, always the same text
    /// (prepared once per connection), whatever the number of leases.
    async fn renew_many(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let names: Vec<&str> = leases.iter().map(|(n, _)| *n).collect();
        let owners: Vec<&str> = leases.iter().map(|(_, o)| *o).collect();
        let args = (Arc::clone(&self.sql.renew_many), names, owners, ttl_ms);
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
        let args = Args { sql: &self.sql.release, name, owner, ms: 0, channel: "", who: Who::default() };
        let freed = self.pool.with(Use::Keep, &args, |c, a| Box::pin(handing(c, a))).await?;
        Ok(freed)
    }

    async fn release_unqueued(&self, name: &str, owner: &str) -> Result<bool, sqlx::Error> {
        let args = (Arc::clone(&self.sql.release_unqueued), name, owner);
        let rows = self
            .pool
            .with(Use::Keep, &args, |c, (sql, name, owner)| {
                Box::pin(sqlx::query(AssertSqlSafe(Arc::clone(sql))).bind(*name).bind(*owner).fetch_all(c))
            })
            .await?;
        if !rows.is_empty() {
            return Ok(true);
        }
        // A waiter is queued (or the row is not ours): the release that hands off decides.
        self.release(name, owner).await
    }

    async fn force_release(&self, name: &str, fence: i64) -> Result<bool, sqlx::Error> {
        let args = (Arc::clone(&self.sql.force_release), name, fence, self.channel.as_str());
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
        KindSql::build(&self.qualified(table), &FLAVOR)
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

    async fn notify(&self, wakeup: Wakeup<'_>) -> Result<(), sqlx::Error> {
        let payload = wake::key(wakeup);
        let args = (self.channel.as_str(), payload.as_str());
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

    fn subscribe(&self, wakeup: Wakeup<'_>) -> Option<WakeSubscription> {
        let subscription = self.hub.subscribe(&wake::key(wakeup));
        // After subscribing: a listener that stopped (idle) sees this subscription when it
        // wakes, and one about to stop sees it in its last look (listen.rs).
        self.listener.want();
        Some(subscription)
    }

    fn change_feed(&self, name: &str, keep: oneshot::Sender<()>) -> Option<ChangeFeed> {
        let feed = self.hub.observe(&wake::exclusive(name), keep);
        self.listener.want();
        Some(feed)
    }
}
