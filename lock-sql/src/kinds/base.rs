//! [`SqlKinds`]: the acquire, renew and release of one grant of a read-write lock or semaphore
//! (docs/contract.md §5.2, §5.3) over the store and the kinds' statements.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    backend::{KindAttempt, KindGrant, KindStore, ReleaseOutcome, RenewOutcome, TryLock, WakeSubscription},
    Capabilities, LockError, LockKind, LockName, OwnerId,
};

use crate::decide::{family, Plan};
use crate::dialect::rw::{Attempt, KindSql, OwnerStmt};
use crate::dialect::Wakeup;
use crate::millis::{remaining, ttl_ms};
use crate::options::SqlOptions;
use crate::store::SqlStore;

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

/// The read, write and permit grants in the database as a [`KindStore`]: the kinds' statements
/// over the pools and listener of a [`SqlStore`].
pub struct SqlKinds {
    store: Arc<SqlStore>,
    sql: KindSql,
}

impl std::fmt::Debug for SqlKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlKinds").field("store", &self.store).finish()
    }
}

impl SqlKinds {
    pub(crate) async fn connect(url: &str, options: SqlOptions) -> Result<Arc<SqlKinds>, LockError> {
        check_table_len(&options.table)?;
        SqlKinds::over(Arc::new(SqlStore::connect(url, options).await?)).await
    }

    /// The kinds over a store the exclusive lock may share: creates their tables if missing.
    pub(crate) async fn over(store: Arc<SqlStore>) -> Result<Arc<SqlKinds>, LockError> {
        check_table_len(store.table())?;
        let sql = store.dialect.kind_sql(store.table());
        for (suffix, ddl) in ["_counters", "_holders"].into_iter().zip(&sql.create) {
            let table = format!("{}{suffix}", store.table());
            store.create("create the tables of the read-write locks and semaphores", &table, ddl).await?;
        }
        Ok(Arc::new(SqlKinds { store, sql }))
    }

    /// Runs an owner-checked statement of the `kind` column `kind`; the rows it changed.
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

    /// Wakes waiters of other clients, where the dialect can (best effort: they also poll).
    async fn notify(&self, kind: LockKind, name: &LockName) {
        if !self.store.dialect.listens() {
            return;
        }
        let n = name.as_str();
        let sides = match kind {
            // The last reader out lets a writer in; a writer out lets readers and writers in.
            LockKind::Read => vec![Wakeup::Side(LockKind::Write, n)],
            LockKind::Write => vec![Wakeup::Side(LockKind::Write, n), Wakeup::Side(LockKind::Read, n)],
            _ => vec![Wakeup::Side(kind, n)],
        };
        for side in sides {
            if let Err(e) = self.store.run("notify waiters", || self.store.dialect.notify(side)).await {
                tracing::debug!(error = %e, "could not notify waiters; they poll");
            }
        }
    }
}

#[async_trait]
impl KindStore for SqlKinds {
    fn backend(&self) -> &str {
        self.store.label()
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = lock_core::backend::LeaseStore::capabilities(&*self.store);
        // The waiter queue is the exclusive lock's; readers, writers and permits are not
        // served in arrival order.
        caps.fifo = false;
        caps
    }

    async fn try_lock(&self, a: KindAttempt<'_>) -> Result<TryLock, LockError> {
        let o = a.owner.to_hex();
        let attempt = Attempt {
            kind: a.kind,
            permits: a.permits,
            name: a.name.as_str(),
            owner: &o,
            ttl_ms: ttl_ms(a.ttl),
            claim_ms: a.claim.map_or(0, ttl_ms),
            claiming: a.claim.is_some(),
        };
        let dialect = &self.store.dialect;
        let inflight = self.store.attempt(a.owner);
        let plan =
            self.store.run_bounded("acquire", CONFLICT_RETRIES, || dialect.kind_acquire(&self.sql, &attempt)).await?;
        inflight.finished();
        match plan {
            Plan::Again(fence) | Plan::Grant(fence) => self.store.token(fence),
            Plan::Refuse { remaining: rem, .. } => Ok(TryLock::Held { remaining: remaining(rem) }),
            Plan::BadPermits(other) => Err(lock_core::backend::permits_mismatch(a.name, other, a.permits)),
        }
    }

    async fn renew(&self, g: KindGrant<'_>, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let (kind, name, owner) = (g.kind, g.name, g.owner);
        let _serial = self.store.one_at_a_time(owner).await;
        let rows = self.owner_stmt("renew", &self.sql.renew, Some(ttl_ms(ttl)), family(kind), name, owner).await?;
        Ok(if rows > 0 { RenewOutcome::Renewed } else { RenewOutcome::NotOwner })
    }

    /// Its own statement: a renewal never shortens a grant (lock-sql's crate docs).
    async fn release_after(&self, g: KindGrant<'_>, d: Duration) -> Result<ReleaseOutcome, LockError> {
        let (kind, name, owner) = (g.kind, g.name, g.owner);
        let _serial = self.store.one_at_a_time(owner).await;
        let end = Some(ttl_ms(d));
        let rows = self.owner_stmt("release after", &self.sql.end_after, end, family(kind), name, owner).await?;
        Ok(if rows > 0 { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    async fn release(&self, g: KindGrant<'_>) -> Result<ReleaseOutcome, LockError> {
        let (kind, name, owner) = (g.kind, g.name, g.owner);
        let _serial = self.store.one_at_a_time(owner).await;
        let o = owner.to_hex();
        let stmt =
            OwnerStmt { sql: &self.sql.release, ttl_ms: None, kind: family(kind), name: name.as_str(), owner: &o };
        let dialect = &self.store.dialect;
        let freed = self.store.run_release("release", || async { Ok(dialect.kind_owner(&stmt).await? > 0) }).await;
        let (d, sql, fam, n) = (Arc::clone(dialect), self.sql.release.clone(), family(kind), name.as_str().to_owned());
        let again = o.clone();
        self.store.release_again_later(owner, move || {
            let (d, sql, n, again) = (Arc::clone(&d), sql.clone(), n.clone(), again.clone());
            async move {
                let stmt = OwnerStmt { sql: &sql, ttl_ms: None, kind: fam, name: &n, owner: &again };
                Ok(d.kind_owner(&stmt).await? > 0)
            }
        });
        let freed = freed?;
        if kind == LockKind::Write {
            // A writer's claim (if it left one) goes with it.
            self.owner_stmt("withdraw the writer's claim", &self.sql.clear_claim, None, "rw", name, owner).await?;
        }
        if freed || kind == LockKind::Write {
            self.notify(kind, name).await;
        }
        Ok(if freed { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    async fn subscribe(&self, kind: LockKind, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.store.subscribe(Wakeup::Side(kind, name.as_str())))
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
