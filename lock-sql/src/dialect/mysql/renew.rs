//! MySQL's batched renewal: MySQL has no `RETURNING` on UPDATE and no array parameters, so one
//! statement renews the batch and the matched-row count says whether every lease was still ours.

use std::sync::Arc;

use sqlx::mysql::MySqlDatabaseError;
use sqlx::{AssertSqlSafe, Executor};

use super::sql::NOW;
use super::Mysql;
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
    /// lease of its round (issue 27 item 8).
    pub(super) async fn renew_batch(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let n = leases.len();
        let done = match self.update_batch(&self.renew_many_nowait, leases, ttl_ms).await {
            Ok(done) => done,
            // A row of the batch is locked by another transaction: renew the others, skipping
            // it, instead of waiting (one locked row stalled every lease of the round, issue 27
            // item 8); the store renews the skipped ones apart.
            Err(e) if lock_wait(&e) => return self.renew_skipping_locked(leases, ttl_ms).await,
            Err(e) => return Err(e),
        };
        if done.rows_affected() == n as u64 {
            return Ok(vec![true; n]);
        }
        let read: Arc<str> = format!(
            "{}name IN ({}) AND (name, owner) IN ({})",
            self.renew_read,
            lease_params(n, 0, "?", ", "),
            lease_params(n, 0, "(?, ?)", ", ")
        )
        .into();
        let args = (read, leases);
        let back = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                let mut query = sqlx::query_as::<_, (Vec<u8>, Vec<u8>)>(AssertSqlSafe(Arc::clone(&a.0)));
                for (name, _) in a.1 {
                    query = query.bind(name.as_bytes());
                }
                for (name, owner) in a.1 {
                    query = query.bind(name.as_bytes()).bind(owner.as_bytes());
                }
                Box::pin(query.fetch_all(c))
            })
            .await?;
        Ok(renewed_of(leases, &text(back)))
    }

    /// One transaction: lock the rows of `leases` still ours, skipping rows another transaction
    /// holds locked (`SKIP LOCKED`: MySQL 8.0, MariaDB 10.6), and renew what it locked; which
    /// were renewed. A server without `SKIP LOCKED` gets the batch that waits, as before.
    async fn renew_skipping_locked(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let n = leases.len();
        let lock: Arc<str> = format!(
            "{}name IN ({}) AND (name, owner) IN ({}) FOR UPDATE SKIP LOCKED",
            self.renew_read,
            lease_params(n, 0, "?", ", "),
            lease_params(n, 0, "(?, ?)", ", ")
        )
        .into();
        let args = (lock, leases, ttl_ms, Arc::clone(&self.quoted));
        let back = self
            .pool
            .with(Use::Keep, &args, |c, a| {
                Box::pin(async move {
                    // Opened and ended here, like the kinds' transactions (rw.rs `acquire_tx`):
                    // the connection never goes back to the pool inside a transaction.
                    (&mut *c).execute("START TRANSACTION").await?;
                    let result = async {
                        let mut query = sqlx::query_as::<_, (Vec<u8>, Vec<u8>)>(AssertSqlSafe(Arc::clone(&a.0)));
                        for (name, _) in a.1 {
                            query = query.bind(name.as_bytes());
                        }
                        for (name, owner) in a.1 {
                            query = query.bind(name.as_bytes()).bind(owner.as_bytes());
                        }
                        let locked = query.fetch_all(&mut *c).await?;
                        if !locked.is_empty() {
                            // The rows this transaction locked, still ours: by name.
                            let renew = format!(
                                "UPDATE {} SET expires_at = {NOW} + ? WHERE name IN ({})",
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
                    let result = match result {
                        Ok(locked) => (&mut *c).execute("COMMIT").await.map(|_| locked),
                        Err(e) => Err(e),
                    };
                    let Err(e) = result else { return result };
                    match (&mut *c).execute("ROLLBACK").await {
                        Ok(_) => Err(e),
                        Err(rollback) => {
                            Err(sqlx::Error::Protocol(format!("{e}; the rollback failed too: {rollback}")))
                        }
                    }
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
        let n = leases.len();
        let sql: Arc<str> = format!(
            "{}name IN ({}) AND (name, owner) IN ({})",
            prefix,
            lease_params(n, 0, "?", ", "),
            lease_params(n, 0, "(?, ?)", ", ")
        )
        .into();
        let args = (sql, leases, ttl_ms);
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
