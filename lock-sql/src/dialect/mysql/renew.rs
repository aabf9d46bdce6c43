//! MySQL's batched renewal: MySQL has no `RETURNING` on UPDATE and no array parameters, so one
//! statement renews the batch and the matched-row count says whether every lease was still ours.

use std::sync::Arc;

use sqlx::AssertSqlSafe;

use super::Mysql;
use crate::dialect::{lease_params, Dialect};
use crate::pool::Use;

impl Mysql {
    /// One UPDATE for every lease (`name IN (…)` finds and locks only their rows by primary key).
    /// MySQL returns no rows from an UPDATE, only how many it matched (CLIENT_FOUND_ROWS): all of
    /// them is the usual answer; otherwise each lease is asked on its own, which renews the ones
    /// still ours once more (owner-checked, so harmless).
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
        let mut ours = Vec::with_capacity(n);
        for (name, owner) in leases {
            ours.push(self.renew(name, owner, ttl_ms).await?);
        }
        Ok(ours)
    }
}
