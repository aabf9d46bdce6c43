//! The lock tables, found or created, brought up to this version's columns, then judged.
//!
//! `CREATE TABLE IF NOT EXISTS` alone would need `CREATE` on every connect and would adopt a
//! table of that name someone else made first; so each table is looked for first (a user with
//! only the documented privileges works once someone made the tables), created only when
//! missing, given the columns later versions added (`ALTER TABLE … ADD COLUMN`, which needs
//! `ALTER` only then), and only then judged against what dlock would create ([`crate::adopt`]).
//! Concurrent creators are expected: two clients starting together both see the table missing.

use std::time::Duration;

use lock_core::LockError;

use super::run::Runner;
use crate::adopt::TableFacts;
use crate::dialect::{queue_table, Dialect, ADDED_COLUMNS, LEASE_COLUMNS, QUEUE_SUFFIX};

/// The tables next to lease table `lease`, over one dialect.
pub(crate) struct Tables<'a> {
    pub(crate) runner: &'a Runner,
    pub(crate) dialect: &'a dyn Dialect,
    pub(crate) lease: &'a str,
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
        let mut facts = run.run("inspect the lock tables", || dialect.table_facts(table)).await?;
        let added = if table == self.lease {
            self.add_missing_columns(&facts).await?
        } else if table == queue_table(self.lease) {
            self.add_missing_queue_columns(table, &facts).await?
        } else {
            false
        };
        if added {
            facts = run.run("inspect the lock tables", || dialect.table_facts(table)).await?;
        }
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

    /// Adds the columns of [`ADDED_COLUMNS`] that a lease table made by an older version lacks
    /// (`ALTER TABLE … ADD COLUMN`; needs `ALTER` only then); true when it added any. Runs
    /// before the table is judged ([`crate::adopt`]), which then sees exactly dlock's columns.
    /// Idempotent: a column another client added meanwhile counts as added.
    async fn add_missing_columns(&self, facts: &TableFacts) -> Result<bool, LockError> {
        let (run, dialect, lease) = (self.runner, self.dialect, self.lease);
        let has = |c: &str| facts.columns.iter().any(|(name, _)| name.eq_ignore_ascii_case(c));
        let missing: Vec<&str> = LEASE_COLUMNS.iter().copied().filter(|c| !has(c)).collect();
        if missing.is_empty() || missing.iter().any(|c| !ADDED_COLUMNS.contains(c)) {
            // Complete, or not a dlock table at all: the judge says which.
            return Ok(false);
        }
        for column in &missing {
            let alter = dialect.add_column(lease, column);
            if let Err(e) = run.run("add a column to the lease table", || dialect.execute(&alter)).await {
                let now = run.run("inspect the lock tables", || dialect.table_facts(lease)).await?;
                if !now.columns.iter().any(|(name, _)| name.eq_ignore_ascii_case(column)) {
                    return Err(LockError::config(format!(
                        "the lease table {lease} lacks the column {column} (added in this version) and adding it \
                         failed: {e}; run `{alter}` as the table's owner"
                    )));
                }
            }
        }
        Ok(true)
    }

    /// Adds the waiter queue's columns that a queue made by an older version lacks and the
    /// dialect adds ([`Dialect::added_queue_columns`]); true when it added any. Any other
    /// difference is left to the judge.
    async fn add_missing_queue_columns(&self, table: &str, facts: &TableFacts) -> Result<bool, LockError> {
        let has = |c: &str| facts.columns.iter().any(|(name, _)| name.eq_ignore_ascii_case(c));
        let mut added = false;
        for (column, alter) in self.dialect.added_queue_columns(table) {
            if has(column) {
                continue;
            }
            self.runner.run("add a column to the waiter queue", || self.dialect.execute(&alter)).await.map_err(
                |e| {
                    LockError::config(format!(
                        "the waiter queue {table} lacks the column {column} (added in this version) and adding it \
                     failed: {e}; run `{alter}` as the table's owner"
                    ))
                },
            )?;
            added = true;
        }
        Ok(added)
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
