//! Read-write locks and semaphores in the database (docs/contract.md §5.2, §5.3).
//!
//! Each side (read, write, permit) is a small [`LeaseStore`] over the pools and listener of the
//! exclusive [`SqlStore`], so [`StoreLock`] gives waiting, back-off, time-outs, cancel-safety
//! and the lease watchdog. The tables and statements are in the crate docs.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, DistributedRwLock, DistributedSemaphore, Lease, LeaseStore,
    LockError, LockName, OwnerId, ReleaseOutcome, RenewOutcome, StoreLock, TryLock, WakeSubscription,
};
use sqlx::{AssertSqlSafe, Executor};

use crate::store::{remaining, token, ttl_ms, Db, Kind, SqlStore, LITE_NOW, MY_NOW, PG_NOW};
use crate::SqlOptions;

/// How long a refused writer's claim holds back new readers (as for Redis): long enough to
/// outlast the writer's re-try interval (a third of it), short enough that a vanished writer
/// delays readers only briefly.
fn writer_claim(ttl: Duration) -> Duration {
    (ttl / 2).clamp(Duration::from_millis(300), Duration::from_secs(2))
}

/// The statements of the two kinds, for one dialect, with the table names spliced in once.
pub(crate) struct KindStatements {
    create_counters: String,
    create_holders: String,
    begin: Option<&'static str>,
    ensure: String,
    lock: String,
    purge: String,
    holders: String,
    grant_counter: String,
    grant_holder: String,
    set_claim: String,
    clear_claim: String,
    renew: String,
    release: String,
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

impl KindStatements {
    fn new(kind: Kind, table: &str) -> Self {
        let (q, now) = match kind {
            Kind::Postgres => ('"', PG_NOW),
            Kind::Mysql => ('`', MY_NOW),
            Kind::Sqlite => ('"', LITE_NOW),
        };
        let c = format!("{q}{table}_counters{q}");
        let h = format!("{q}{table}_holders{q}");
        let (create_counters, create_holders) = match kind {
            Kind::Postgres => (
                format!(
                    "CREATE TABLE IF NOT EXISTS {c} (kind TEXT NOT NULL, name TEXT COLLATE \"C\" NOT NULL, \
                     fence BIGINT NOT NULL, permits BIGINT NOT NULL, claim_owner TEXT, claim_until BIGINT NOT NULL, \
                     PRIMARY KEY (kind, name))"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {h} (kind TEXT NOT NULL, name TEXT COLLATE \"C\" NOT NULL, \
                     owner TEXT NOT NULL, mode BIGINT NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL, \
                     PRIMARY KEY (kind, name, owner))"
                ),
            ),
            Kind::Mysql => (
                format!(
                    "CREATE TABLE IF NOT EXISTS {c} (kind VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
                     name VARBINARY(255) NOT NULL, fence BIGINT NOT NULL, permits BIGINT NOT NULL, \
                     claim_owner VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL, claim_until BIGINT NOT NULL, \
                     PRIMARY KEY (kind, name)) ENGINE=InnoDB"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {h} (kind VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
                     name VARBINARY(255) NOT NULL, owner VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
                     mode BIGINT NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL, \
                     PRIMARY KEY (kind, name, owner)) ENGINE=InnoDB"
                ),
            ),
            Kind::Sqlite => (
                format!(
                    "CREATE TABLE IF NOT EXISTS {c} (kind TEXT NOT NULL, name TEXT NOT NULL, fence INTEGER NOT NULL, \
                     permits INTEGER NOT NULL, claim_owner TEXT, claim_until INTEGER NOT NULL, \
                     PRIMARY KEY (kind, name))"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {h} (kind TEXT NOT NULL, name TEXT NOT NULL, owner TEXT NOT NULL, \
                     mode INTEGER NOT NULL, fence INTEGER NOT NULL, expires_at INTEGER NOT NULL, \
                     PRIMARY KEY (kind, name, owner))"
                ),
            ),
        };
        let insert = match kind {
            Kind::Postgres => "INSERT",
            Kind::Mysql => "INSERT",
            Kind::Sqlite => "INSERT OR IGNORE",
        };
        // Not MySQL's INSERT IGNORE: it would turn real errors into warnings.
        let conflict = match kind {
            Kind::Postgres => " ON CONFLICT DO NOTHING",
            Kind::Mysql => " ON DUPLICATE KEY UPDATE fence = fence",
            Kind::Sqlite => "",
        };
        let for_update = if kind == Kind::Sqlite { "" } else { " FOR UPDATE" };
        let fix = |s: String| if kind == Kind::Postgres { numbered(&s) } else { s };
        KindStatements {
            create_counters,
            create_holders,
            begin: match kind {
                Kind::Postgres => Some("BEGIN"),
                Kind::Mysql => Some("START TRANSACTION"),
                Kind::Sqlite => None,
            },
            ensure: fix(format!(
                "{insert} INTO {c} (kind, name, fence, permits, claim_owner, claim_until) \
                 VALUES (?, ?, 0, 0, NULL, 0){conflict}"
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
            set_claim: fix(format!(
                "UPDATE {c} SET claim_owner = ?, claim_until = {now} + ? WHERE kind = ? AND name = ?"
            )),
            clear_claim: fix(format!(
                "UPDATE {c} SET claim_owner = NULL WHERE kind = ? AND name = ? AND claim_owner = ?"
            )),
            renew: fix(format!(
                "UPDATE {h} SET expires_at = {now} + ? WHERE kind = ? AND name = ? AND owner = ? \
                 AND expires_at > {now}"
            )),
            release: fix(format!("DELETE FROM {h} WHERE kind = ? AND name = ? AND owner = ? AND expires_at > {now}")),
        }
    }
}

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

/// Which side of which kind an attempt is for.
#[derive(Clone, Copy, Debug)]
enum Side {
    Read,
    Write,
    Permit(u32),
}

impl Side {
    fn kind(self) -> &'static str {
        match self {
            Side::Read | Side::Write => "rw",
            Side::Permit(_) => "sem",
        }
    }

    fn mode(self) -> i64 {
        i64::from(matches!(self, Side::Write))
    }
}

/// What one acquire transaction decided.
enum Plan {
    /// Already ours (a retry after a lost reply): the same grant back.
    Again(i64),
    Grant(i64),
    Refuse {
        remaining: Option<i64>,
        claim: bool,
    },
    BadPermits(i64),
}

/// The decision, from the counter row `(fence, permits, others' live claim ms or -1)` and the
/// live holders `(owner, mode, fence, remaining ms)`.
fn decide(
    side: Side,
    owner: &str,
    counter: (i64, i64, i64),
    holders: &[(String, i64, i64, i64)],
    claiming: bool,
) -> Plan {
    let (fence, permits, claim) = counter;
    if let Some(h) = holders.iter().find(|h| h.0 == owner) {
        return Plan::Again(h.2);
    }
    match side {
        Side::Read => {
            if let Some(w) = holders.iter().find(|h| h.1 == 1) {
                Plan::Refuse { remaining: Some(w.3), claim: false }
            } else if claim >= 0 {
                Plan::Refuse { remaining: Some(claim), claim: false }
            } else {
                Plan::Grant(fence + 1)
            }
        }
        Side::Write => {
            if holders.is_empty() {
                Plan::Grant(fence + 1)
            } else {
                let longest = holders.iter().map(|h| h.3).max();
                Plan::Refuse { remaining: longest, claim: claiming && claim < 0 }
            }
        }
        Side::Permit(n) => {
            if !holders.is_empty() && permits != i64::from(n) {
                Plan::BadPermits(permits)
            } else if holders.len() >= n as usize {
                Plan::Refuse { remaining: holders.iter().map(|h| h.3).min(), claim: false }
            } else {
                Plan::Grant(fence + 1)
            }
        }
    }
}

/// One acquire transaction on a connection `$c` (an executor for `&mut *$c`); `$n` is the name
/// as the dialect binds it.
macro_rules! acquire_tx {
    ($c:expr, $st:expr, $side:expr, $n:expr, $o:expr, $ms:expr, $claim_ms:expr, $claiming:expr) => {{
        let (st, side, o, kind): (&KindStatements, Side, &str, &str) = ($st, $side, $o, $side.kind());
        let (n, ms, claim_ms, claiming) = ($n, $ms, $claim_ms, $claiming);
        let c = $c;
        async move {
            if let Some(begin) = st.begin {
                (&mut *c).execute(begin).await?;
            }
            sqlx::query(AssertSqlSafe(st.ensure.as_str())).bind(kind).bind(n).execute(&mut *c).await?;
            let counter = sqlx::query_as::<_, (i64, i64, i64)>(AssertSqlSafe(st.lock.as_str()))
                .bind(o)
                .bind(kind)
                .bind(n)
                .fetch_one(&mut *c)
                .await?;
            sqlx::query(AssertSqlSafe(st.purge.as_str())).bind(kind).bind(n).execute(&mut *c).await?;
            let holders = sqlx::query_as::<_, (String, i64, i64, i64)>(AssertSqlSafe(st.holders.as_str()))
                .bind(kind)
                .bind(n)
                .fetch_all(&mut *c)
                .await?;
            let plan = decide(side, o, counter, &holders, claiming);
            match &plan {
                Plan::Grant(fence) => {
                    let permits = match side {
                        Side::Permit(n) => i64::from(n),
                        _ => counter.1,
                    };
                    sqlx::query(AssertSqlSafe(st.grant_counter.as_str()))
                        .bind(*fence)
                        .bind(permits)
                        .bind(o)
                        .bind(kind)
                        .bind(n)
                        .execute(&mut *c)
                        .await?;
                    sqlx::query(AssertSqlSafe(st.grant_holder.as_str()))
                        .bind(kind)
                        .bind(n)
                        .bind(o)
                        .bind(side.mode())
                        .bind(*fence)
                        .bind(ms)
                        .execute(&mut *c)
                        .await?;
                }
                Plan::Refuse { claim: true, .. } => {
                    sqlx::query(AssertSqlSafe(st.set_claim.as_str()))
                        .bind(o)
                        .bind(claim_ms)
                        .bind(kind)
                        .bind(n)
                        .execute(&mut *c)
                        .await?;
                }
                _ => {}
            }
            if st.begin.is_some() {
                (&mut *c).execute("COMMIT").await?;
            }
            Ok::<Plan, sqlx::Error>(plan)
        }
    }};
}

/// One autocommit statement with `kind, name, owner` (and `ms` first, for renew) bound.
macro_rules! owner_stmt {
    ($c:expr, $sql:expr, $ms:expr, $kind:expr, $n:expr, $o:expr) => {{
        let q = sqlx::query(AssertSqlSafe($sql));
        let q = match $ms {
            Some(ms) => q.bind(ms),
            None => q,
        };
        q.bind($kind).bind($n).bind($o).execute($c).await.map(|r| r.rows_affected())
    }};
}

/// The shared part of the three sides: the store and the statements.
pub(crate) struct Base {
    store: Arc<SqlStore>,
    sql: KindStatements,
}

impl Base {
    async fn connect(url: &str, options: SqlOptions) -> Result<Arc<Base>, LockError> {
        check_table_len(&options.table)?;
        let store = SqlStore::connect(url, options).await?;
        let sql = KindStatements::new(store.kind, &store.table);
        let base = Base { store: Arc::new(store), sql };
        base.create_tables().await?;
        Ok(Arc::new(base))
    }

    async fn create_tables(&self) -> Result<(), LockError> {
        for sql in [&self.sql.create_counters, &self.sql.create_holders] {
            let mut tries = 0;
            loop {
                let r = self
                    .store
                    .run("create the tables of the read-write locks and semaphores", || async {
                        match &self.store.db {
                            Db::Postgres(p) => {
                                let mut g = p.get().await?;
                                let r = g.conn()?.execute(AssertSqlSafe(sql.as_str())).await.map(drop);
                                g.reusable(&r);
                                r
                            }
                            Db::Mysql(p) => {
                                let mut g = p.get().await?;
                                let r = g.conn()?.execute(AssertSqlSafe(sql.as_str())).await.map(drop);
                                g.reusable(&r);
                                r
                            }
                            Db::Sqlite(p) => p.execute(AssertSqlSafe(sql.as_str())).await.map(drop),
                        }
                    })
                    .await;
                match r {
                    Ok(()) => break,
                    // Concurrent CREATE TABLE IF NOT EXISTS can collide in PostgreSQL's catalog.
                    Err(LockError::Backend { .. }) if tries < 3 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }

    fn wake_key(side: Side, name: &LockName) -> String {
        match side {
            Side::Read => format!("dlock-rw-read:{}", name.as_str()),
            Side::Write => format!("dlock-rw-write:{}", name.as_str()),
            Side::Permit(_) => format!("dlock-sem:{}", name.as_str()),
        }
    }

    async fn try_lock(
        &self,
        side: Side,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
        claiming: bool,
    ) -> Result<TryLock, LockError> {
        let (n, o, ms) = (name.as_str(), owner.to_hex(), ttl_ms(ttl));
        let o = o.as_str();
        let claim = writer_claim(ttl);
        let claim_ms = ttl_ms(claim);
        let st = &self.sql;
        let kind = self.store.kind;
        let plan = match &self.store.db {
            Db::Postgres(p) => {
                self.store
                    .run_bounded("acquire", CONFLICT_RETRIES, || async {
                        let mut g = p.get().await?;
                        let r = match g.conn() {
                            Ok(c) => acquire_tx!(c, st, side, n, o, ms, claim_ms, claiming).await,
                            Err(e) => Err(e),
                        };
                        g.reusable(&r);
                        r
                    })
                    .await?
            }
            Db::Mysql(p) => {
                self.store
                    .run_bounded("acquire", CONFLICT_RETRIES, || async {
                        let nb = n.as_bytes();
                        let mut g = p.get().await?;
                        let r = match g.conn() {
                            Ok(c) => acquire_tx!(c, st, side, nb, o, ms, claim_ms, claiming).await,
                            Err(e) => Err(e),
                        };
                        g.reusable(&r);
                        r
                    })
                    .await?
            }
            Db::Sqlite(p) => {
                self.store
                    .run_bounded("acquire", CONFLICT_RETRIES, || async {
                        // IMMEDIATE: the write lock of the file first, so two acquires never
                        // both read and then both write. Dropped without commit = rolled back.
                        let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
                        let plan = {
                            let c = &mut *tx;
                            acquire_tx!(c, st, side, n, o, ms, claim_ms, claiming).await?
                        };
                        tx.commit().await?;
                        Ok(plan)
                    })
                    .await?
            }
        };
        match plan {
            Plan::Again(fence) | Plan::Grant(fence) => token(kind, fence),
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

    /// Runs an owner-checked statement (`kind, name, owner`, after `ms` if given); rows changed.
    async fn owner_stmt(
        &self,
        what: &str,
        sql: &str,
        ms: Option<i64>,
        kind: &str,
        name: &LockName,
        owner: OwnerId,
    ) -> Result<u64, LockError> {
        let (n, o) = (name.as_str(), owner.to_hex());
        let o = o.as_str();
        match &self.store.db {
            Db::Postgres(p) => {
                self.store
                    .run(what, || async {
                        let mut g = p.get().await?;
                        let r = match g.conn() {
                            Ok(c) => owner_stmt!(&mut *c, sql, ms, kind, n, o),
                            Err(e) => Err(e),
                        };
                        g.reusable(&r);
                        r
                    })
                    .await
            }
            Db::Mysql(p) => {
                self.store
                    .run(what, || async {
                        let mut g = p.get().await?;
                        let r = match g.conn() {
                            Ok(c) => owner_stmt!(&mut *c, sql, ms, kind, n.as_bytes(), o),
                            Err(e) => Err(e),
                        };
                        g.reusable(&r);
                        r
                    })
                    .await
            }
            Db::Sqlite(p) => self.store.run(what, || async { owner_stmt!(p, sql, ms, kind, n, o) }).await,
        }
    }

    async fn renew(
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

    async fn release(&self, side: Side, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let _serial = self.store.one_at_a_time(owner).await;
        let rows = self.owner_stmt("release", &self.sql.release, None, side.kind(), name, owner).await?;
        if matches!(side, Side::Write) {
            // A writer's claim (if it left one) goes with it.
            self.owner_stmt("withdraw the writer's claim", &self.sql.clear_claim, None, "rw", name, owner).await?;
        }
        if rows > 0 || matches!(side, Side::Write) {
            self.notify(side, name).await;
        }
        Ok(if rows > 0 { ReleaseOutcome::Released } else { ReleaseOutcome::NotOwner })
    }

    /// PostgreSQL: wakes waiters of other clients (best effort; they also poll).
    async fn notify(&self, side: Side, name: &LockName) {
        let Db::Postgres(p) = &self.store.db else { return };
        let keys = match side {
            // The last reader out lets a writer in; a writer out lets readers and writers in.
            Side::Read => vec![Base::wake_key(Side::Write, name)],
            Side::Write => vec![Base::wake_key(Side::Write, name), Base::wake_key(Side::Read, name)],
            Side::Permit(_) => vec![Base::wake_key(side, name)],
        };
        let channel = self.store.table.as_str();
        for key in keys {
            let key = key.as_str();
            let r = self
                .store
                .run("notify waiters", || async {
                    let mut g = p.get().await?;
                    let r = match g.conn() {
                        Ok(c) => {
                            sqlx::query("SELECT pg_notify($1, $2)::text").bind(channel).bind(key).fetch_all(c).await
                        }
                        Err(e) => Err(e),
                    };
                    g.reusable(&r);
                    r.map(drop)
                })
                .await;
            if let Err(e) = r {
                tracing::debug!(error = %e, "could not notify waiters; they poll");
            }
        }
    }

    fn subscribe(&self, side: Side, name: &LockName) -> Option<WakeSubscription> {
        self.store.listener.as_ref().map(|_| self.store.hub.subscribe(&Base::wake_key(side, name)))
    }
}

/// The read side of a read-write lock.
pub(crate) struct ReadSide(Arc<Base>);
/// The write side of a read-write lock.
pub(crate) struct WriteSide(Arc<Base>);
/// One semaphore size.
pub(crate) struct PermitSide(Arc<Base>, u32);

macro_rules! side_debug {
    ($t:ty) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t)).field("store", &self.0.store).finish()
            }
        }
    };
}
side_debug!(ReadSide);
side_debug!(WriteSide);
side_debug!(PermitSide);

#[async_trait]
impl LeaseStore for ReadSide {
    fn backend(&self) -> &str {
        self.0.store.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.0.try_lock(Side::Read, name, owner, ttl, false).await
    }
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.0.renew(Side::Read, name, owner, ttl).await
    }
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.0.release(Side::Read, name, owner).await
    }
    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.0.subscribe(Side::Read, name))
    }
}

#[async_trait]
impl LeaseStore for WriteSide {
    fn backend(&self) -> &str {
        self.0.store.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    /// A single try does not wait, so it leaves no claim that would hold readers back.
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.0.try_lock(Side::Write, name, owner, ttl, false).await
    }

    /// A waiting writer's refused attempt leaves a short claim that holds back new readers.
    async fn try_lock_waiting(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.0.try_lock(Side::Write, name, owner, ttl, true).await
    }

    /// A write wait that ended without a grant withdraws its claim at once (owner-checked: the
    /// grant too, if one raced in) instead of holding readers back until the claim lapses.
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.release(name, owner).await.map(|_| ())
    }
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.0.renew(Side::Write, name, owner, ttl).await
    }
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.0.release(Side::Write, name, owner).await
    }
    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.0.subscribe(Side::Write, name))
    }
}

#[async_trait]
impl LeaseStore for PermitSide {
    fn backend(&self) -> &str {
        self.0.store.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.0.try_lock(Side::Permit(self.1), name, owner, ttl, false).await
    }
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.0.renew(Side::Permit(self.1), name, owner, ttl).await
    }
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.0.release(Side::Permit(self.1), name, owner).await
    }
    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        Ok(self.0.subscribe(Side::Permit(self.1), name))
    }
}

/// A read-write lock in the database (docs/contract.md §5.2), made by [`connect_rw`](crate::connect_rw).
///
/// Many readers or one writer. A writer that is refused leaves a short claim that makes new
/// readers wait, so readers arriving after a waiting writer do not starve it; waiters are not
/// served in arrival order. Every grant, read or write, has its own lease and a fencing token
/// above every token issued before for this read-write lock.
#[derive(Clone)]
pub struct SqlRwLock {
    read: StoreLock<ReadSide>,
    write: StoreLock<WriteSide>,
}

impl std::fmt::Debug for SqlRwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlRwLock").field("store", &self.read.store().0.store).finish()
    }
}

#[async_trait]
impl DistributedRwLock for SqlRwLock {
    fn backend(&self) -> &str {
        self.read.store().backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.read.store().capabilities()
    }

    async fn try_acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.read.try_acquire(name, options).await
    }

    async fn acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.read.acquire(name, options).await
    }

    async fn try_acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.write.try_acquire(name, options).await
    }

    async fn acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.write.acquire(name, options).await
    }
}

/// A semaphore in the database (docs/contract.md §5.3), made by [`connect_semaphore`](crate::connect_semaphore).
///
/// Up to `permits` holders of one name at once, each with its own lease and a fencing token
/// above every token issued before for this semaphore. The number of permits is stored with the
/// semaphore while anyone holds it: a caller asking for a different number gets
/// `InvalidOptions`.
#[derive(Clone)]
pub struct SqlSemaphore {
    base: Arc<Base>,
}

impl std::fmt::Debug for SqlSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSemaphore").field("store", &self.base.store).finish()
    }
}

impl SqlSemaphore {
    fn side(&self, permits: u32) -> Result<StoreLock<PermitSide>, LockError> {
        if permits == 0 {
            return Err(LockError::invalid_options("a semaphore needs at least one permit; ask for permits >= 1"));
        }
        Ok(StoreLock::new(PermitSide(Arc::clone(&self.base), permits)))
    }
}

#[async_trait]
impl DistributedSemaphore for SqlSemaphore {
    fn backend(&self) -> &str {
        self.base.store.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.base.capabilities()
    }

    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        self.side(permits)?.try_acquire(name, options).await
    }

    async fn acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        self.side(permits)?.acquire(name, options).await
    }
}

/// See [`crate::connect_rw`].
pub(crate) async fn connect_rw(url: &str, options: SqlOptions) -> Result<SqlRwLock, LockError> {
    let base = Base::connect(url, options).await?;
    Ok(SqlRwLock { read: StoreLock::new(ReadSide(Arc::clone(&base))), write: StoreLock::new(WriteSide(base)) })
}

/// See [`crate::connect_semaphore`].
pub(crate) async fn connect_semaphore(url: &str, options: SqlOptions) -> Result<SqlSemaphore, LockError> {
    Ok(SqlSemaphore { base: Base::connect(url, options).await? })
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

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(numbered("a = ? AND b = ?"), "a = $1 AND b = $2");
    }

    #[test]
    fn writers_hold_back_readers_and_permits_must_agree() {
        let holder = |o: &str, mode, fence, rem| (o.to_string(), mode, fence, rem);
        // A live claim of another writer refuses a reader.
        assert!(matches!(decide(Side::Read, "r", (5, 0, 100), &[], false), Plan::Refuse { .. }));
        // Readers refuse a writer, which then claims when waiting.
        let readers = [holder("a", 0, 4, 50), holder("b", 0, 5, 70)];
        assert!(matches!(
            decide(Side::Write, "w", (5, 0, -1), &readers, true),
            Plan::Refuse { remaining: Some(70), claim: true }
        ));
        assert!(matches!(decide(Side::Write, "w", (5, 0, -1), &readers, false), Plan::Refuse { claim: false, .. }));
        // A retry of one's own grant returns the same token.
        assert!(matches!(decide(Side::Read, "a", (5, 0, -1), &readers, false), Plan::Again(4)));
        assert!(matches!(decide(Side::Read, "c", (5, 0, -1), &readers, false), Plan::Grant(6)));
        assert!(matches!(decide(Side::Permit(3), "c", (5, 2, -1), &readers, false), Plan::BadPermits(2)));
        assert!(matches!(
            decide(Side::Permit(2), "c", (5, 2, -1), &readers, false),
            Plan::Refuse { remaining: Some(50), .. }
        ));
        assert!(matches!(decide(Side::Permit(3), "c", (5, 3, -1), &readers, false), Plan::Grant(6)));
    }
}
