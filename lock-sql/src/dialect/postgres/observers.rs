//! Election observers on PostgreSQL (docs/contract.md §5.8, `watch_changes`): the SQL side.
//!
//! A NOTIFY takes a database-wide lock at commit, so a grant or release that nobody observes
//! must not send one. An observer therefore marks itself in the waiter table: a row with the
//! place [`OBSERVER_SEQ`] (behind every waiter, and excluded wherever waiters are counted, so
//! it holds nobody back and is never the head) and an owner id `observer-<hex>`. Grants and
//! releases of a name send `dlock:<name>` on the table's channel only while such a row lives
//! (one more index probe in the statement; no NOTIFY otherwise), and the listener wakes every
//! local observer of that key. The row's lifetime, its refreshes and its deletion when the feed
//! is dropped are the store's (`store/observer.rs`); a crashed observer's row costs a
//! notification per change until it lapses. A grant or release whose statement began before
//! the row was committed does not see it: the observer's poll catches that one.

use std::sync::Arc;

use super::wake::EXCLUSIVE;

/// The queue place of an observer's row: after every waiter's (theirs are clock readings).
pub(crate) const OBSERVER_SEQ: i64 = i64::MAX;

/// A grant's or release's SQL expression (`name_expr`: the row's name column) that notifies
/// `dlock:<name>` on `channel` while a live observer row of waiter table `qq` exists.
pub(crate) fn notify(channel: &str, qq: &str, name_expr: &str, now: &str) -> String {
    format!(
        "(CASE WHEN EXISTS (SELECT 1 FROM {qq} o WHERE o.name = {name_expr} AND o.seq = {OBSERVER_SEQ} \
         AND o.expires_at > {now}) THEN pg_notify({}, {} || {name_expr}) END)::text",
        literal(channel),
        literal(EXCLUSIVE)
    )
}

/// The statement that writes or refreshes an observer's row ($1 name, $2 owner, $3 lifetime ms).
pub(crate) fn mark(qq: &str, now: &str) -> String {
    format!(
        "INSERT INTO {qq} (name, owner, seq, expires_at) VALUES ($1, $2, {OBSERVER_SEQ}, {now} + $3::bigint) \
         ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at"
    )
}

/// Runs a `(name, owner)` statement, with the lifetime in ms as `$3` when given.
pub(crate) async fn run(
    c: &mut sqlx::PgConnection,
    (sql, name, owner, ms): &(Arc<str>, &str, &str, Option<i64>),
) -> Result<(), sqlx::Error> {
    let q = sqlx::query(sqlx::AssertSqlSafe(Arc::clone(sql))).bind(*name).bind(*owner);
    let q = match ms {
        Some(ms) => q.bind(*ms),
        None => q,
    };
    q.execute(c).await.map(drop)
}

/// `s` as an SQL string literal (the table name is a checked identifier; quotes doubled anyway).
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}
