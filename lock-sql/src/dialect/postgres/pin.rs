//! Name resolution pinned: what every operator, function and table in our statements means.
//!
//! PostgreSQL resolves unqualified names through the session's `search_path`, and an operator
//! or function with an exact match on the argument types wins over `pg_catalog`'s, which needs
//! an implicit cast: `numeric * integer` planted in a schema on the lock role's path beats
//! `pg_catalog`'s `numeric * numeric`, and runs as the lock role inside every statement (it
//! can read the table, make the clock read 0, forge tokens). So every session of ours runs with
//! `search_path = pg_catalog, pg_temp` (`pg_temp` is never searched for functions or
//! operators, and listed last it is searched last for tables), and the statements name the
//! lock tables with their schema, which is resolved once, at connect, under the session's own
//! path: where an existing table of that name is found, else where `CREATE TABLE` would put it.
//!
//! Why a pinned path rather than `OPERATOR(pg_catalog.*)` and `pg_catalog.` in every
//! statement: every operator (`=`, `<=`, `||`, `*`), function and type name would need it,
//! and one forgotten is a hole no test notices; a pinned path covers them all, and each
//! statement stays readable. On the application's pool (`from_pg_pool`) the path is put on
//! before each use and the application's own put back after (two more round trips), so the
//! application's unqualified names keep working; a use cancelled half-way closes its
//! connection rather than return it with our path.

use std::sync::Arc;

use lock_core::LockError;
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Executor, Row};

use crate::options::{is_plain_identifier, SqlOptions};
use crate::pool::{Borrow, Setup};

/// The only schemas our statements resolve names in.
pub(super) const PATH: &str = "pg_catalog, pg_temp";

/// The settings every session of ours runs with, by name: the pinned path; durable commits (a
/// server configured with `synchronous_commit = off` acknowledges commits it may still lose,
/// and a lost fence lets a token repeat); a server-side bound on every statement, so that one
/// whose caller was cancelled cannot commit a grant long after its clean-up ran (see
/// inflight.rs); and plans that look rows up by index. Every statement of ours finds its rows
/// by a key, and the waiter queue of a busy name churns (an entry inserted and deleted per
/// contended acquisition), so between two autovacuum rounds the queue holds thousands of dead
/// entries per name. A bitmap or sequential scan visits each of them in the heap every time
/// (about 0.2 ms with 5,000, in every release, hand-off and queued acquire; the planner picks
/// them when its statistics say the queue is small); an index scan marks them dead once and
/// skips them afterwards (15 µs), and PostgreSQL then removes them from the index pages.
fn settings(options: &SqlOptions) -> [(&'static str, String); 5] {
    [
        ("search_path", PATH.to_owned()),
        ("synchronous_commit", "on".to_owned()),
        ("statement_timeout", options.request_timeout.as_millis().max(1).to_string()),
        ("enable_bitmapscan", "off".to_owned()),
        ("enable_seqscan", "off".to_owned()),
    ]
}

/// [`settings`] on every new connection of our own pool: one round trip per connection.
pub(super) fn session(options: &SqlOptions) -> Setup<PgConnection> {
    let session = settings(options).iter().map(|(name, value)| format!("SET {name} = {value}")).collect::<Vec<_>>();
    let session = session.join("; ");
    Arc::new(move |c| {
        let session = session.clone();
        Box::pin(async move { c.execute(AssertSqlSafe(session)).await.map(drop) })
    })
}

/// The same settings around each use of the application's connections, and the application's
/// values put back after. Every name in these two statements is qualified: they run under the
/// application's path.
pub(super) fn borrow(options: &SqlOptions) -> Borrow<PgConnection> {
    let ours = settings(options);
    let names = ours.each_ref().map(|(name, _)| *name);
    let set = |first: usize| -> Vec<String> {
        names.iter().enumerate().map(|(i, n)| format!("pg_catalog.set_config('{n}', ${}, false)", first + i)).collect()
    };
    let read = names.iter().map(|n| format!("pg_catalog.current_setting('{n}')"));
    let enter_sql: Arc<str> = format!("SELECT {}", read.chain(set(1)).collect::<Vec<_>>().join(", ")).into();
    let leave_sql: Arc<str> = format!("SELECT {}", set(1).join(", ")).into();
    let values: Arc<[String]> = ours.map(|(_, value)| value).into();
    Borrow {
        enter: Arc::new(move |c| {
            let (sql, values) = (Arc::clone(&enter_sql), Arc::clone(&values));
            Box::pin(async move {
                let q = values.iter().fold(sqlx::query(AssertSqlSafe(sql)), |q, v| q.bind(v.as_str()));
                let row = q.fetch_one(c).await?;
                (0..values.len()).map(|i| row.try_get::<String, _>(i)).collect()
            })
        }),
        leave: Arc::new(move |c, saved| {
            let sql = Arc::clone(&leave_sql);
            Box::pin(async move {
                let q = saved.iter().fold(sqlx::query(AssertSqlSafe(sql)), |q, v| q.bind(v.as_str()));
                q.execute(c).await.map(drop)
            })
        }),
    }
}

/// `table` with its schema: as given when qualified, else where the session's own path (not
/// yet pinned on `c`) finds it, or would create it.
pub(super) async fn qualify(c: &mut PgConnection, table: &str) -> Result<String, LockError> {
    if table.contains('.') {
        return Ok(table.to_owned());
    }
    let schema: Option<String> = sqlx::query_scalar(
        "SELECT COALESCE((SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_class c \
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
           WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)), \
         pg_catalog.current_schema()::pg_catalog.text)",
    )
    .bind(format!("\"{table}\""))
    .fetch_one(c)
    .await
    .map_err(|e| LockError::config(format!("could not find the schema of lease table {table:?}: {e}")))?;
    match schema {
        Some(s) if is_plain_identifier(&s) => Ok(format!("{s}.{table}")),
        Some(s) => Err(LockError::config(format!(
            "lease table {table:?} resolves to schema {s:?}, which is not a plain identifier; name the table \
             schema-qualified in a schema named with ASCII letters, digits and underscores (table = \"locks.{table}\")"
        ))),
        None => Err(LockError::config(format!(
            "no schema of the session's search_path exists to hold lease table {table:?}; name it schema-qualified \
             (table = \"locks.{table}\")"
        ))),
    }
}

/// Runs on each connection of the listener's pool: the pinned path.
pub(super) fn listener_session(c: &mut PgConnection) -> futures::future::BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(async move { c.execute(AssertSqlSafe(format!("SET search_path = {PATH}"))).await.map(drop) })
}

/// A connection of a tool beside the lock (`dlock bench`'s floor, the CLI's clean-up and
/// conformance fixture): `table` with its schema, found under the connection's own path as
/// [`qualify`] finds it, then the path pinned and commits made durable as in [`session`], so
/// that the tool's statements resolve names as the lock's own do.
pub(crate) async fn tool(c: &mut PgConnection, table: &str) -> Result<String, LockError> {
    let qualified = qualify(c, table).await?;
    c.execute(AssertSqlSafe(format!("SET search_path = {PATH}; SET synchronous_commit = on")))
        .await
        .map_err(|e| LockError::config(format!("could not pin the session's search_path: {e}")))?;
    Ok(qualified)
}
