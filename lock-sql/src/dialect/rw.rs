//! The read-write lock and semaphore statements, built from each dialect's pieces, and the
//! acquire transaction they run in, written once over any sqlx database.

use sqlx::{AssertSqlSafe, Database, Decode, Encode, Executor, Type};

use lock_core::LockKind;

use crate::decide::{decide, family, mode, Holder, Plan, Write};
use crate::options::quote_table;

/// What a dialect brings to the kinds' statements.
pub(crate) struct Flavor {
    /// Identifier quote.
    pub(crate) quote: char,
    /// Milliseconds since 1970 on the database clock.
    pub(crate) now: &'static str,
    /// `CREATE TABLE IF NOT EXISTS` of the counters and the holders table, given their quoted names.
    pub(crate) create: fn(&str, &str) -> [String; 2],
    /// The counter row's insert-if-missing: the verb and the conflict clause.
    pub(crate) insert: &'static str,
    pub(crate) on_conflict: &'static str,
    /// How the counter row is locked for the transaction (empty: the whole file is).
    pub(crate) for_update: &'static str,
    /// Placeholders `$1, $2, …` instead of `?`.
    pub(crate) numbered: bool,
    /// The statement that opens the acquire transaction (`None`: the caller opens it).
    pub(crate) begin: Option<&'static str>,
    /// The larger of two values (`GREATEST`; SQLite's two-argument `MAX`).
    pub(crate) greatest: &'static str,
}

/// The statements of the two kinds, for one dialect, with the table names spliced in once.
pub(crate) struct KindSql {
    pub(crate) create: [String; 2],
    begin: Option<&'static str>,
    ensure: String,
    lock: String,
    purge: String,
    holders: String,
    grant_counter: String,
    grant_holder: String,
    extend_holder: String,
    set_claim: String,
    pub(crate) clear_claim: String,
    pub(crate) renew: String,
    /// `renew` that sets the end where it says, sooner or not (`hold_at_least`).
    pub(crate) end_after: String,
    pub(crate) release: String,
}

/// Turns `?` placeholders into PostgreSQL's `$1, $2, …`.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for ch in sql.chars() {
        if ch == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(ch);
        }
    }
    out
}

impl KindSql {
    pub(crate) fn build(table: &str, f: &Flavor) -> KindSql {
        let (q, now, greatest) = (f.quote, f.now, f.greatest);
        let c = quote_table(&format!("{table}_counters"), q);
        let h = quote_table(&format!("{table}_holders"), q);
        let fix = |s: String| if f.numbered { numbered(&s) } else { s };
        let (insert, on_conflict, for_update) = (f.insert, f.on_conflict, f.for_update);
        KindSql {
            create: (f.create)(&c, &h),
            begin: f.begin,
            ensure: fix(format!(
                "{insert} INTO {c} (kind, name, fence, permits, claim_owner, claim_until) \
                 VALUES (?, ?, 0, 0, NULL, 0){on_conflict}"
            )),
            lock: fix(format!(
                "SELECT fence, permits, CASE WHEN claim_owner IS NOT NULL AND claim_owner <> ? \
                 AND claim_until > {now} THEN claim_until - {now} ELSE -1 END \
                 FROM {c} WHERE kind = ? AND name = ?{for_update}"
            )),
            purge: fix(format!("DELETE FROM {h} WHERE kind = ? AND name = ? AND expires_at <= {now}")),
            holders: fix(format!("SELECT owner, mode, fence, expires_at - {now} FROM {h} WHERE kind = ? AND name = ?")),
            grant_counter: fix(format!(
                "UPDATE {c} SET fence = ?, permits = ?, \
                 claim_owner = CASE WHEN claim_owner = ? THEN NULL ELSE claim_owner END \
                 WHERE kind = ? AND name = ?"
            )),
            grant_holder: fix(format!(
                "INSERT INTO {h} (kind, name, owner, mode, fence, expires_at) VALUES (?, ?, ?, ?, ?, {now} + ?)"
            )),
            extend_holder: fix(format!(
                "UPDATE {h} SET expires_at = {greatest}(expires_at, {now} + ?) WHERE kind = ? AND name = ? AND owner = ?"
            )),
            set_claim: fix(format!(
                "UPDATE {c} SET claim_owner = ?, claim_until = {now} + ? WHERE kind = ? AND name = ?"
            )),
            clear_claim: fix(format!(
                "UPDATE {c} SET claim_owner = NULL WHERE kind = ? AND name = ? AND claim_owner = ?"
            )),
            renew: fix(format!(
                "UPDATE {h} SET expires_at = {greatest}(expires_at, {now} + ?) \
                 WHERE kind = ? AND name = ? AND owner = ? AND expires_at > {now}"
            )),
            end_after: fix(format!(
                "UPDATE {h} SET expires_at = {now} + ? WHERE kind = ? AND name = ? AND owner = ? AND expires_at > {now}"
            )),
            release: fix(format!("DELETE FROM {h} WHERE kind = ? AND name = ? AND owner = ? AND expires_at > {now}")),
        }
    }
}

/// One acquire attempt of a read-write lock or semaphore side.
pub(crate) struct Attempt<'a> {
    pub(crate) kind: LockKind,
    /// The semaphore's permits (0 for a read-write lock).
    pub(crate) permits: u32,
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) ttl_ms: i64,
    /// A refused waiting writer's claim, in ms.
    pub(crate) claim_ms: i64,
    /// Whether a refused writer leaves a claim.
    pub(crate) claiming: bool,
}

/// The acquire transaction on connection `c`, with the name bound as `name` (each dialect
/// encodes it its own way). When the dialect opens the transaction itself ([`Flavor::begin`]),
/// a failure rolls it back before returning, so the connection never goes back to the pool
/// inside an open or aborted transaction; when the rollback fails too, the error says so and
/// the connection is discarded.
pub(crate) async fn acquire_tx<DB, N>(
    c: &mut DB::Connection,
    sql: &KindSql,
    a: &Attempt<'_>,
    name: N,
) -> Result<Plan, sqlx::Error>
where
    DB: Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    N: for<'q> Encode<'q, DB> + Type<DB> + Copy + Send + Sync,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB> + Type<DB>,
    String: for<'r> Decode<'r, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    if let Some(begin) = sql.begin {
        (&mut *c).execute(begin).await?;
    }
    let result: Result<Plan, sqlx::Error> = async {
        let (o, kind) = (a.owner, family(a.kind));
        sqlx::query(AssertSqlSafe(sql.ensure.as_str())).bind(kind).bind(name).execute(&mut *c).await?;
        let counter = sqlx::query_as::<DB, (i64, i64, i64)>(AssertSqlSafe(sql.lock.as_str()))
            .bind(o)
            .bind(kind)
            .bind(name)
            .fetch_one(&mut *c)
            .await?;
        sqlx::query(AssertSqlSafe(sql.purge.as_str())).bind(kind).bind(name).execute(&mut *c).await?;
        let holders = sqlx::query_as::<DB, Holder>(AssertSqlSafe(sql.holders.as_str()))
            .bind(kind)
            .bind(name)
            .fetch_all(&mut *c)
            .await?;
        let plan = decide((a.kind, a.permits), o, counter, &holders, a.claiming);
        match plan.write() {
            Write::Grant(fence) => {
                let permits = match a.kind {
                    LockKind::Permit => i64::from(a.permits),
                    _ => counter.1,
                };
                sqlx::query(AssertSqlSafe(sql.grant_counter.as_str()))
                    .bind(fence)
                    .bind(permits)
                    .bind(o)
                    .bind(kind)
                    .bind(name)
                    .execute(&mut *c)
                    .await?;
                sqlx::query(AssertSqlSafe(sql.grant_holder.as_str()))
                    .bind(kind)
                    .bind(name)
                    .bind(o)
                    .bind(mode(a.kind))
                    .bind(fence)
                    .bind(a.ttl_ms)
                    .execute(&mut *c)
                    .await?;
            }
            Write::Extend => {
                sqlx::query(AssertSqlSafe(sql.extend_holder.as_str()))
                    .bind(a.ttl_ms)
                    .bind(kind)
                    .bind(name)
                    .bind(o)
                    .execute(&mut *c)
                    .await?;
            }
            Write::Claim => {
                sqlx::query(AssertSqlSafe(sql.set_claim.as_str()))
                    .bind(o)
                    .bind(a.claim_ms)
                    .bind(kind)
                    .bind(name)
                    .execute(&mut *c)
                    .await?;
            }
            Write::Nothing => {}
        }
        Ok(plan)
    }
    .await;
    if sql.begin.is_none() {
        return result;
    }
    end_tx::<DB, _>(c, result).await
}

/// Ends the transaction open on `c`: commits when `result` is Ok, else rolls back (a failed
/// rollback joins the error). Every transaction of this crate is opened and ended within one
/// pooled use of its connection, so a connection never goes back to the pool inside one (on
/// MySQL an open one would keep its rows locked for every other client).
pub(crate) async fn end_tx<DB, T>(c: &mut DB::Connection, result: Result<T, sqlx::Error>) -> Result<T, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let result = match result {
        Ok(v) => (&mut *c).execute("COMMIT").await.map(|_| v),
        Err(e) => Err(e),
    };
    let Err(e) = result else { return result };
    match (&mut *c).execute("ROLLBACK").await {
        Ok(_) => Err(e),
        Err(rollback) => Err(sqlx::Error::Protocol(format!("{e}; the rollback failed too: {rollback}"))),
    }
}

/// One owner-checked autocommit statement of a side: `kind, name, owner` bound, after `ttl_ms`
/// when given (renew).
pub(crate) struct OwnerStmt<'a> {
    pub(crate) sql: &'a str,
    pub(crate) ttl_ms: Option<i64>,
    pub(crate) kind: &'a str,
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
}

/// Runs `s` with the name bound as `name`; the dialect reads the rows changed from its own
/// result type.
pub(crate) async fn owner_stmt<'e, DB, E, N>(e: E, s: &OwnerStmt<'_>, name: N) -> Result<DB::QueryResult, sqlx::Error>
where
    DB: Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    E: Executor<'e, Database = DB>,
    N: for<'q> Encode<'q, DB> + Type<DB> + Send,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
{
    let q = sqlx::query::<DB>(AssertSqlSafe(s.sql));
    let q = match s.ttl_ms {
        Some(ms) => q.bind(ms),
        None => q,
    };
    q.bind(s.kind).bind(name).bind(s.owner).execute(e).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(numbered("a = ? AND b = ?"), "a = $1 AND b = $2");
    }
}
