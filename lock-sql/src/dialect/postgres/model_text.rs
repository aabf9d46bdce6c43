//! The exclusive lock's statements as text, for lock-model's differential test
//! (`lock-model/tests/pg_differential.rs`), which runs them beside the model's server steps on
//! the same inputs. Doc-hidden, not an API: the text changes with the crate.

use super::sql::Statements;
use crate::dialect::queue_table;

/// The statements of lease table `table` and its waiter queue `<table>_queue`, as the store
/// runs them (the table's name is also its channel). Parameters as in `sql.rs`.
#[derive(Clone, Debug)]
pub struct PgStatements {
    /// The waiter queue's table name.
    pub queue_table: String,
    /// `CREATE TABLE` of the lease table.
    pub lease_ddl: String,
    /// `CREATE TABLE` of the waiter queue.
    pub queue_ddl: String,
    /// A waiting acquire that may hold a queue entry (`Attempt::Queued`).
    pub acquire: String,
    /// The head's claim of a provisional grant.
    pub claim: String,
    /// The owner-checked renewal.
    pub renew: String,
    /// The owner-checked release, with the grant to the queue's head.
    pub release: String,
    /// The release of a leave or a refused attempt: also passes a free or expired row on.
    pub hand_on: String,
    /// A waiter's leave: deletes its entry.
    pub leave_queue: String,
}

/// The statements over `table` (module docs).
pub fn statements(table: &str) -> PgStatements {
    let s = Statements::new(table, table);
    PgStatements {
        queue_table: queue_table(table),
        lease_ddl: s.lease_ddl,
        queue_ddl: s.queue_ddl,
        acquire: s.acquire.to_string(),
        claim: s.claim.to_string(),
        renew: s.renew.to_string(),
        release: s.release.to_string(),
        hand_on: s.hand_on.to_string(),
        leave_queue: s.leave_queue.to_string(),
    }
}
