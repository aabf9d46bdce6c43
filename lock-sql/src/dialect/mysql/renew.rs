//! MySQL's batched renewal: MySQL has no `RETURNING` on UPDATE and no array parameters, so one
//! statement renews the batch and the matched-row count says whether every lease was still ours.

use std::sync::Arc;

use sqlx::AssertSqlSafe;

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
        let sql: Arc<str> = format!(
            "{}name IN ({}) AND (name, owner) IN ({})",
            self.renew_many,
            lease_params(n, 0, "?", ", "),
            lease_params(n, 0, "(?, ?)", ", ")
        )
        .into();
        let args = (sql, leases, ttl_ms);
        let done = self
            .pool
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
            .await?;
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
        let back: Vec<(String, String)> = back
            .into_iter()
            .map(|(n, o)| (String::from_utf8_lossy(&n).into_owned(), String::from_utf8_lossy(&o).into_owned()))
            .collect();
        Ok(renewed_of(leases, &back))
    }
}
