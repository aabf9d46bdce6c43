//! MySQL's batched renewal: MySQL has no `RETURNING` on UPDATE and no array parameters, so one
//! statement renews the batch and the matched-row count says whether every lease was still ours.

use std::sync::Arc;

use sqlx::mysql::{MySql, MySqlArguments, MySqlDatabaseError};
use sqlx::query::QueryAs;
use sqlx::{AssertSqlSafe, Executor};

use super::sql::NOW;
use super::Mysql;
use crate::dialect::rw::end_tx;
use crate::dialect::{lease_params, renewed_of};
use crate::pool::Use;

impl Mysql {
    /// One UPDATE for every lease (`name IN (…)` finds and locks only their rows by primary key).
    /// MySQL returns no rows from an UPDATE, only how many it matched (CLIENT_FOUND_ROWS): all of
    /// them is the usual answer; otherwise one read of the same rows says which are still ours
    /// and unexpired — exactly the ones the UPDATE renewed: a row ours and live now was ours at
    /// the UPDATE (only its owner's own acquire makes a row ours again), and was live then too,
    /// or the UPDATE found it expired and it still is. One more round trip, not one per lease in
    /// sequence, which on a slow link let one lost lease (force-released) expire every other
    /// lease of its round.
    pub(super) async fn renew_batch(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let n = leases.len();
        let done = match self.update_batch(&self.renew_many_nowait, leases, ttl_ms).await {
            Ok(done) => done,
            // A row of the batch is locked by another transaction: renew the others, skipping
            // it, instead of waiting (one locked row stalled every lease of the round); the
            // store renews the skipped ones apart.
            Err(e) if lock_wait(&e) => return self.renew_skipping_locked(leases, ttl_ms).await,
            Err(e) => return Err(e),
        };
        if done.rows_affected() == n as u64 {
            return Ok(vec![true; n]);
        }
        let args = (batch(&self.renew_read, n, ""), leases);
        let back = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(bind_leases(sqlx::query_as(AssertSqlSafe(Arc::clone(&a.0))), a.1).fetch_all(c))
            })
            .await?;
        Ok(renewed_of(leases, &text(back)))
    }

    /// One transaction: lock the rows of `leases` still ours, skipping rows another transaction
    /// holds locked (`SKIP LOCKED`: MySQL 8.0, MariaDB 10.6), and renew what it locked; which
    /// were renewed. A server without `SKIP LOCKED` gets the batch that waits, as before.
    async fn renew_skipping_locked(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let n = leases.len();
        let lock = batch(&self.renew_read, n, " FOR UPDATE SKIP LOCKED");
        let args = (lock, leases, ttl_ms, Arc::clone(&self.quoted));
        let back = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(async move {
                    // Opened and ended here, like the kinds' transactions (rw.rs `acquire_tx`):
                    // the connection never goes back to the pool inside a transaction.
                    (&mut *c).execute("START TRANSACTION").await?;
                    let result = async {
                        let query = sqlx::query_as(AssertSqlSafe(Arc::clone(&a.0)));
                        let locked = bind_leases(query, a.1).fetch_all(&mut *c).await?;
                        if !locked.is_empty() {
                            // The rows this transaction locked, still ours: by name.
                            let renew = format!(
                                "UPDATE {} SET expires_at = GREATEST(expires_at, {NOW} + ?) WHERE name IN ({})",
                                a.3,
                                lease_params(locked.len(), 0, "?", ", ")
                            );
                            let mut query = sqlx::query(AssertSqlSafe(renew)).bind(a.2);
                            for (name, _) in &locked {
                                query = query.bind(name.as_slice());
                            }
                            query.execute(&mut *c).await?;
                        }
                        Ok::<_, sqlx::Error>(locked)
                    }
                    .await;
                    end_tx::<MySql, _>(c, result).await
                })
            })
            .await;
        match back {
            Ok(back) => Ok(renewed_of(leases, &text(back))),
            Err(e) if syntax(&e) => self.renew_waiting(leases, ttl_ms).await,
            Err(e) => Err(e),
        }
    }

    /// Runs one batched renewal UPDATE (`prefix` is the statement up to its `WHERE` tail) for
    /// every lease, each row found by primary key and checked against its owner.
    async fn update_batch(
        &self,
        prefix: &str,
        leases: &[(&str, &str)],
        ttl_ms: i64,
    ) -> Result<sqlx::mysql::MySqlQueryResult, sqlx::Error> {
        let args = (batch(prefix, leases.len(), ""), leases, ttl_ms);
        self.pool
            .with(Use::Keep, &args, |c, a| {
                let mut query = sqlx::query(AssertSqlSafe(Arc::clone(&a.0))).bind(a.2);
                for (name, _) in a.1 {
                    query = query.bind(name.as_bytes());
                }
                for (name, owner) in a.1 {
                    query = query.bind(name.as_bytes()).bind(owner.as_bytes());
                }
                Box::pin(query.execute(c))
            })
            .await
    }

    /// The batch that waits for locked rows (servers without `SKIP LOCKED`).
    async fn renew_waiting(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let n = leases.len();
        let done = self.update_batch(&self.renew_many, leases, ttl_ms).await?;
        // All matched, or the store asks the others apart.
        Ok(vec![done.rows_affected() == n as u64; n])
    }
}

/// The statement `prefix` (up to its `WHERE` tail) over `n` leases, each row found by primary
/// key and checked against its owner, then `tail`: binds the names, then each name and owner
/// ([`bind_leases`]).
fn batch(prefix: &str, n: usize, tail: &str) -> Arc<str> {
    let (names, pairs) = (lease_params(n, 0, "?", ", "), lease_params(n, 0, "(?, ?)", ", "));
    format!("{prefix}name IN ({names}) AND (name, owner) IN ({pairs}){tail}").into()
}

/// Binds the leases of a [`batch`] read: every name, then every name and owner, as bytes.
fn bind_leases<'q>(mut query: Leases<'q>, leases: &'q [(&str, &str)]) -> Leases<'q> {
    for (name, _) in leases {
        query = query.bind(name.as_bytes());
    }
    for (name, owner) in leases {
        query = query.bind(name.as_bytes()).bind(owner.as_bytes());
    }
    query
}

/// A [`batch`] read of `(name, owner)` rows.
type Leases<'q> = QueryAs<'q, MySql, (Vec<u8>, Vec<u8>), MySqlArguments>;

/// Names and owners as the tables store them (bytes), as text.
fn text(rows: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(String, String)> {
    rows.into_iter()
        .map(|(n, o)| (String::from_utf8_lossy(&n).into_owned(), String::from_utf8_lossy(&o).into_owned()))
        .collect()
}

/// The server's number of a statement error, if any.
fn number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()?.try_downcast_ref::<MySqlDatabaseError>().map(MySqlDatabaseError::number)
}

/// ER_LOCK_WAIT_TIMEOUT: a row the statement needed was locked.
fn lock_wait(e: &sqlx::Error) -> bool {
    number(e) == Some(1205)
}

/// ER_PARSE_ERROR: the server does not know `SKIP LOCKED`.
fn syntax(e: &sqlx::Error) -> bool {
    number(e) == Some(1064)
}
