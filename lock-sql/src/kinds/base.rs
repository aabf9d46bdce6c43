//! What the read, write and permit sides share: the store, the kinds' statements, and the
//! acquire, renew and release of one side (docs/contract.md §5.2, §5.3).

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Capabilities, LockError, LockName, OwnerId, ReleaseOutcome, RenewOutcome, TryLock, WakeSubscription};

use crate::decide::{writer_claim, Plan, Side};
use crate::dialect::rw::{Attempt, KindSql, OwnerStmt};
use crate::store::{remaining, ttl_ms, SqlStore};
use crate::wake;
use crate::SqlOptions;

/// How often an acquire transaction is re-run after a deadlock or lock-wait time-out (MySQL
/// 1213/1205, PostgreSQL 40001/40P01, SQLite busy) before the caller gets `Unavailable`.
const CONFLICT_RETRIES: usize = 8;

/// The longest suffix added to the lease table's name (`_counters`).
const SUFFIX_LEN: usize = "_counters".len();

/// PostgreSQL silently truncates identifiers past 63 bytes (the two tables could then collide
/// with each other or the lease table) and MySQL refuses names past 64: refuse them here, clearly.
fn check_table_len(table: &str) -> Result<(), LockError> {
    if table.len() + SUFFIX_LEN > 63 {
        return Err(LockError::config(format!(
            "lease table name {table:?} is too long for read-write locks and semaphores, which add the tables \
             {table}_counters and {table}_holders; use a table name of at most {} characters",
            63 - SUFFIX_LEN
        )));
    }
    Ok(())
}

/// The shared part of the three sides: the store and the statements.
pub(crate) struct Base {
    pub(crate) store: Arc<SqlStore>,
    sql: KindSql,
}

impl Base {
    pub(crate) async fn connect(url: &str, options: SqlOptions) -> Result<Arc<Base>, LockError> {
        check_table_len(&options.table)?;
        Base::over(Arc::new(SqlStore::connect(url, options).await?)).await
    }

    /// The kinds over a store the exclusive lock may share: creates their tables if missing.
    pub(crate) async fn over(store: Arc<SqlStore>) -> Result<Arc<Base>, LockError> {
        check_table_len(store.table())?;
        let sql = store.dialect.kind_sql(store.table());
        for (suffix, ddl) in ["_counters", "_holders"].into_iter().zip(&sql.create) {
            let table = format!("{}{suffix}", store.table());
            store.create("create the tables of the read-write locks and semaphores", &table, ddl).await?;
        }
        Ok(Arc::new(Base { store, sql }))
    }

    pub(crate) fn capabilities(&self) -> Capabilities {
        lock_core::LeaseStore::capabilities(&*self.store)
    }

    pub(crate) async fn try_lock(
        &self,
        side: Side,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
        claiming: bool,
    ) -> Result<TryLock, LockError> {
        let o = owner.to_hex();
        let claim = writer_claim(ttl);
        let attempt =
            Attempt { side, name: name.as_str(), owner: &o, ttl_ms: ttl_ms(ttl), claim_ms: ttl_ms(claim), claiming };
        let dialect = &self.store.dialect;
        let inflight = self.store.attempt(owner);
        let plan =
            self.store.run_bounded("acquire", CONFLICT_RETRIES, || dialect.kind_acquire(&self.sql, &attempt)).await?;
        inflight.finished();
        match plan {
            Plan::Again(fence) | Plan::Grant(fence) => self.store.token(fence),
            Plan::Refuse { remaining: rem, .. } => {
                let rem = remaining(rem);
                Ok(TryLock::Held {
                    remaining: match side {
                        // Re-try before the claim lapses, so waiting readers stay held back.
                        Side::Write => Some(rem.map_or(claim / 3, |r| r.min(claim / 3))),
                        _ => rem,
                    },
                })
            }
            Plan::BadPermits(other) => Err(LockError::invalid_options(format!(
                "semaphore {name} is in use with {other} permits, not {}; every user of a semaphore must ask for \
                 the same number of permits",
                match side {
                    Side::Permit(n) => n,
                    _ => 0,
                }
            ))),
        }
    }

    /// Runs an owner-checked statement of `side`; the rows it changed.
    async fn owner_stmt(
        &self,
        what: &str,
        sql: &str,
        ttl_ms: Option<i64>,
        kind: &str,
        name: &LockName,
        owner: OwnerId,
    ) -> Result<u64, LockError> {
        let o = owner.to_hex();
        let stmt = OwnerStmt { sql, ttl_ms, kind, name: name.as_str(), owner: &o };
        self.store.run(what, || self.store.dialect.kind_owner(&stmt)).await
    }

    pub(crate) async fn renew(
        &self,
        side: Side,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<RenewOutcome, LockError> {
        let _serial = self.store.one_at_a_time(owner).await;
        let rows = self.owner_stmt("renew", &self.sql.renew, Some(ttl_ms(ttl)), side.kind(), name, owner).await?;
        Ok(if rows > 0 { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    pub(crate) async fn release(
        &self,
        side: Side,
        name: &LockName,
        owner: OwnerId,
    ) -> Result<ReleaseOutcome, LockError> {
        let _serial = self.store.one_at_a_time(owner).await;
        let o = owner.to_hex();
        let stmt =
            OwnerStmt { sql: &self.sql.release, ttl_ms: None, kind: side.kind(), name: name.as_str(), owner: &o };
        let dialect = &self.store.dialect;
        let freed = self.store.run_release("release", || async { Ok(dialect.kind_owner(&stmt).await? > 0) }).await;
        let (d, sql, kind, n) = (Arc::clone(dialect), self.sql.release.clone(), side.kind(), name.as_str().to_owned());
        let again = o.clone();
        self.store.release_again_later(owner, async move {
            let stmt = OwnerStmt { sql: &sql, ttl_ms: None, kind, name: &n, owner: &again };
            Ok(d.kind_owner(&stmt).await? > 0)
        });
        let freed = freed?;
        if matches!(side, Side::Write) {
            // A writer's claim (if it left one) goes with it.
            self.owner_stmt("withdraw the writer's claim", &self.sql.clear_claim, None, "rw", name, owner).await?;
        }
        if freed || matches!(side, Side::Write) {
            self.notify(side, name).await;
        }
        Ok(if freed { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    /// Wakes waiters of other clients, where the dialect can (best effort: they also poll).
    async fn notify(&self, side: Side, name: &LockName) {
        if !self.store.dialect.listens() {
            return;
        }
        let keys = match side {
            // The last reader out lets a writer in; a writer out lets readers and writers in.
            Side::Read => vec![wake::side(Side::Write, name.as_str())],
            Side::Write => vec![wake::side(Side::Write, name.as_str()), wake::side(Side::Read, name.as_str())],
            Side::Permit(_) => vec![wake::side(side, name.as_str())],
        };
        for key in keys {
            if let Err(e) = self.store.run("notify waiters", || self.store.dialect.notify(&key)).await {
                tracing::debug!(error = %e, "could not notify waiters; they poll");
            }
        }
    }

    pub(crate) fn subscribe(&self, side: Side, name: &LockName) -> Option<WakeSubscription> {
        self.store.subscribe_key(&wake::side(side, name.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_leave_room_for_the_suffixes() {
        assert!(check_table_len("dlock_leases").is_ok());
        assert!(check_table_len(&"a".repeat(54)).is_ok());
        assert!(matches!(check_table_len(&"a".repeat(55)), Err(LockError::Config { .. })));
    }
}
