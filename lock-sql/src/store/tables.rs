//! The lock tables, found or created, then judged.
//!
//! `CREATE TABLE IF NOT EXISTS` alone would need `CREATE` on every connect and would adopt a
//! table of that name someone else made first; so each table is looked for first (a user with
//! only the documented privileges works once someone made the tables), created only when
//! missing, and judged against what dlock would create ([`crate::adopt`]): a table of another
//! shape, an older one without a column this version writes included, is refused, not altered.
//! Concurrent creators are expected: two clients starting together both see the table missing.

use std::time::Duration;

use lock_core::LockError;

use super::run::Runner;
use crate::dialect::{queue_table, Dialect, QUEUE_SUFFIX};

/// The lock tables, over one dialect.
pub(crate) struct Tables<'a> {
    pub(crate) runner: &'a Runner,
    pub(crate) dialect: &'a dyn Dialect,
}

impl Tables<'_> {
    /// Creates `table` with `ddl` (a `CREATE TABLE IF NOT EXISTS`) unless it exists: a user
    /// with only the documented privileges then works once someone else made the tables.
    /// Then, whoever made it, the table must be what `ddl` creates ([`crate::adopt`]).
    pub(crate) async fn create(&self, what: &str, table: &str, ddl: &str) -> Result<(), LockError> {
        let (run, dialect) = (self.runner, self.dialect);
        if !run.run("look for the lock tables", || dialect.table_exists(table)).await? {
            self.create_missing(what, ddl).await?;
        }
        let facts = run.run("inspect the lock tables", || dialect.table_facts(table)).await?;
        crate::adopt::judge(dialect.codes().label, ddl, &facts)
    }

    async fn create_missing(&self, what: &str, ddl: &str) -> Result<(), LockError> {
        let mut tries = 0;
        loop {
            match self.runner.run(what, || self.dialect.execute(ddl)).await {
                Ok(()) => return Ok(()),
                // Concurrent `CREATE TABLE IF NOT EXISTS` can still collide in PostgreSQL's
                // catalog (unique violation on pg_type); the second try sees the table.
                Err(LockError::Backend { .. }) if tries < 3 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// PostgreSQL silently truncates identifiers past 63 bytes (the queue table could then collide
/// with the lease table) and MySQL refuses names past 64: refuse them here, clearly.
pub(crate) fn check_table_len(table: &str) -> Result<(), LockError> {
    if table.len() + QUEUE_SUFFIX.len() > 63 {
        return Err(LockError::config(format!(
            "lease table name {table:?} is too long: the waiter queue adds the table {}; use a table name of at \
             most {} characters",
            queue_table(table),
            63 - QUEUE_SUFFIX.len()
        )));
    }
    Ok(())
}
