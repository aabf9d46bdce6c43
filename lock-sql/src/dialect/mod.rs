//! The three databases behind one [`Dialect`] trait: each dialect owns its SQL text, the order
//! in which its statements bind their values, how it encodes a name, and its error codes. The
//! store and the lock kinds above never ask which database they talk to.
//!
//! This file holds the trait and the values that cross it; the dialects import them from here
//! and nothing here imports a dialect ([`scheme`] is where a URL picks one), so the store
//! depends on the trait and the dialects on these shared types, never the other way round.

#[cfg(feature = "mysql")]
pub(crate) mod mysql;
pub(crate) mod params;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod rw;
pub(crate) mod scheme;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{backend::WakeSubscription, ChangeFeed, LockError, LockKind};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::adopt::TableFacts;
use crate::decide::Plan;
use crate::error::{classify, to_lock_error, Class, Codes};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::pool::{ConnPool, Use};
use crate::queue::Wait;
use rw::{Attempt, KindSql, OwnerStmt};

/// The escape character of [`like_prefix`] patterns (`LIKE ? ESCAPE '!'`): not a backslash,
/// whose meaning in string literals differs between the databases.
pub(crate) const LIKE_ESCAPE: char = '!';

/// A `LIKE` pattern matching every string that starts with `prefix`: `%`, `_` and the escape
/// character in `prefix` match only themselves.
pub(crate) fn like_prefix(prefix: &str) -> String {
    let mut p = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '%' | '_') || c == LIKE_ESCAPE {
            p.push(LIKE_ESCAPE);
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// Who the acquirer says it is (docs/contract.md §5.6), stored with the grant.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Who<'a> {
    pub(crate) holder: Option<&'a str>,
    pub(crate) metadata: Option<&'a str>,
}

/// A live grant of the exclusive lock, as `inspect` and `list` read it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) name: String,
    pub(crate) fence: i64,
    /// Milliseconds left, on the database's clock.
    pub(crate) remaining_ms: i64,
    pub(crate) holder: Option<String>,
    pub(crate) metadata: Option<String>,
}

/// A row as `inspect` and `list` read it where names are text: name, fence, remaining ms,
/// holder, metadata.
pub(crate) type SeenRow = (String, i64, i64, Option<String>, Option<String>);

impl From<SeenRow> for Seen {
    fn from((name, fence, remaining_ms, holder, metadata): SeenRow) -> Seen {
        Seen { name, fence, remaining_ms, holder, metadata }
    }
}

/// The live grants `inspect` (`key` a name, no `limit`) or `list` (`key` a `LIKE` pattern, at
/// most `limit` rows) reads with `sql` from a network database's `pool`, read as the dialect's
/// row `R`; `key` is bound as the dialect stores names (text or bytes). A name is the lease
/// table's key, so `inspect` reads one row at most.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn seen_rows<C, R, K>(
    pool: &ConnPool<C>,
    sql: &Arc<str>,
    key: K,
    limit: Option<i64>,
) -> Result<Vec<Seen>, sqlx::Error>
where
    C: sqlx::Connection + 'static,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
    <C::Database as sqlx::Database>::Arguments: sqlx::IntoArguments<C::Database>,
    R: for<'r> sqlx::FromRow<'r, <C::Database as sqlx::Database>::Row> + Into<Seen> + Send + Unpin + 'static,
    K: for<'q> sqlx::Encode<'q, C::Database> + sqlx::Type<C::Database> + Copy + Send + Sync,
    i64: for<'q> sqlx::Encode<'q, C::Database> + sqlx::Type<C::Database>,
{
    let args = (Arc::clone(sql), key, limit);
    let rows = pool
        .with(Use::Take, &args, |c, (sql, key, limit)| {
            let query = sqlx::query_as::<_, R>(sqlx::AssertSqlSafe(Arc::clone(sql))).bind(*key);
            Box::pin(
                match limit {
                    Some(n) => query.bind(*n),
                    None => query,
                }
                .fetch_all(c),
            )
        })
        .await?;
    Ok(rows.into_iter().map(R::into).collect())
}

/// What the exclusive lock's acquire statement found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Upsert {
    /// Granted (or re-granted to the same owner) with this fence.
    Granted(i64),
    /// Held by another owner for about `remaining` more ms (`None`: unknown, or free but owed
    /// to a waiter queued before us); `seq`: our place in the queue, when the attempt queued;
    /// `seen`: the fence of the latest grant, read under the row's lock (PostgreSQL only: what
    /// a hand-off's fence is compared with, postgres/handoff.rs); `ahead`: how many live waiters
    /// are queued before us (the databases that cannot notify, whose waiters poll by it:
    /// crate::queue::queued_poll).
    Held { remaining: Option<i64>, seq: Option<i64>, seen: Option<i64>, ahead: Option<i64> },
}

/// What a dialect settles when it connects, and the store only reads.
pub(crate) struct Profile {
    pub(crate) codes: Codes,
    pub(crate) durable: bool,
    pub(crate) listens: bool,
    /// Set once the session settings are known (zero until then).
    pub(crate) statement_bound: Duration,
    pub(crate) lease_ddl: String,
    pub(crate) queue_ddl: String,
    /// What tells this database apart from others within the process, for the release hints of
    /// databases that cannot notify (`crate::local`); never a password. `None`: no hints (the
    /// database notifies, or only this backend sees it, as SQLite in memory).
    pub(crate) database: Option<String>,
}

impl Profile {
    /// A profile with the two tables' DDL; `statement_bound` is set by the caller.
    pub(crate) fn new(codes: Codes, durable: bool, listens: bool, lease_ddl: String, queue_ddl: String) -> Profile {
        Profile { codes, durable, listens, statement_bound: Duration::ZERO, lease_ddl, queue_ddl, database: None }
    }
}

/// One attempt of the exclusive lock's grant.
#[derive(Clone, Copy)]
pub(crate) struct Grant<'a> {
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) ttl_ms: i64,
    pub(crate) who: Who<'a>,
    pub(crate) wait: Wait,
}

/// The waiter queue's table next to lease table `table`.
pub(crate) fn queue_table(table: &str) -> String {
    format!("{table}{QUEUE_SUFFIX}")
}

/// The live waiters queued before a row of waiter table `qq` (quoted), for a `RETURNING` or
/// `SELECT` over that row; `now`: the dialect's clock in ms. Polling waiters poll by it
/// (crate::queue::queued_poll).
pub(crate) fn ahead_of(qq: &str, now: &str) -> String {
    format!(
        "(SELECT COUNT(*) FROM {qq} w WHERE w.name = {qq}.name AND w.expires_at > {now} \
         AND (w.seq, w.owner) < ({qq}.seq, {qq}.owner))"
    )
}

/// The suffix of the waiter queue's table name.
pub(crate) const QUEUE_SUFFIX: &str = "_waiters";

/// What a waiter waits for, or a release announces. Only a dialect that notifies
/// ([`Dialect::listens`]) turns it into a wake-up key; the store and the kinds never see one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wakeup<'a> {
    /// Grants and releases of the exclusive lock `name` (its election observers).
    Exclusive(&'a str),
    /// The queued waiter `owner` (32 hex digits) of an exclusive lock.
    Waiter(&'a str),
    /// One side (read, write or permit) of the read-write lock or semaphore `name`.
    Side(LockKind, &'a str),
}

/// The store's view of the grants a dialect's releases hand to queued waiters, as this client
/// heard of them (PostgreSQL's grant in the release: `postgres/handoff.rs`), by owner id.
pub(crate) trait Handoff: Send + Sync {
    /// A waiting attempt of `owner` starts: from now on its grant notifications are heard.
    fn expect(&self, owner: &str);
    /// `owner`'s attempt, sent at `sent`, answered "still queued", the holder's lease
    /// `remaining`.
    fn queued(&self, owner: &str, remaining: Option<Duration>, sent: Instant);
    /// The answer to give an attempt of `owner` without a statement, when its latest "still
    /// queued" answer is recent enough and no grant was heard since.
    fn recent(&self, owner: &str, now: Instant) -> Option<Option<Duration>>;
    /// Whether a grant notification named `owner` since its latest answer (cleared): its
    /// attempt then claims before it runs the acquire statement.
    fn claim_due(&self, owner: &str) -> bool;
    /// The wait of `owner` ended (granted by a statement, or left).
    fn forget(&self, owner: &str);
}

/// One database. Every method runs one operation (a statement, or one short transaction) and
/// leaves retries and time limits to the caller (the store's `run`).
#[async_trait]
pub(crate) trait Dialect: Send + Sync + 'static {
    /// What the dialect settled when it connected.
    fn profile(&self) -> &Profile;
    /// Error codes and the backend label.
    fn codes(&self) -> Codes {
        self.profile().codes
    }
    /// Whether a fence once handed out survives a crash of the database.
    fn durable(&self) -> bool {
        self.profile().durable
    }
    /// Whether releases notify waiters, so that they may wait on the [`WakeHub`].
    fn listens(&self) -> bool {
        self.profile().listens
    }
    /// How long the server lets one statement run (waits for row locks included): after that,
    /// a statement whose caller went away can no longer commit.
    fn statement_bound(&self) -> Duration {
        self.profile().statement_bound
    }
    /// The lease table's `CREATE TABLE IF NOT EXISTS`.
    fn lease_ddl(&self) -> &str {
        &self.profile().lease_ddl
    }
    /// Whether `table` exists (where the session would find it), so that a user without
    /// `CREATE` can use tables made by someone else.
    async fn table_exists(&self, table: &str) -> Result<bool, sqlx::Error>;
    /// What the existing `table` looks like (columns, owner, triggers), to judge whether it may
    /// be used ([`crate::adopt`]).
    async fn table_facts(&self, table: &str) -> Result<TableFacts, sqlx::Error>;
    /// Runs a statement that returns nothing (DDL).
    async fn execute(&self, sql: &str) -> Result<(), sqlx::Error>;
    /// Prepares the hot statements on a couple of connections (best effort).
    async fn warm_up(&self);

    /// The waiter queue's `CREATE TABLE IF NOT EXISTS` (see [`crate::queue`]).
    fn queue_ddl(&self) -> &str {
        &self.profile().queue_ddl
    }

    /// The exclusive lock's grant: insert, take over a free or expired row (when no live waiter
    /// is queued before the caller), or re-grant our own; a grant stores `who` with the row and
    /// takes the caller out of the queue, a refusal of a waiting attempt queues it
    /// ([`crate::queue`]).
    async fn acquire(&self, grant: Grant<'_>) -> Result<Upsert, sqlx::Error>;
    /// Deletes `owner`'s queue entry for `name` (a wait that ended without a grant), and the
    /// name's expired entries.
    async fn leave_queue(&self, name: &str, owner: &str) -> Result<(), sqlx::Error>;
    /// Where releases hand the lock to the queue's head (postgres/handoff.rs): the grants this
    /// client's waiters were notified of. `None` (the default): no hand-offs.
    fn handoffs(&self) -> Option<&dyn Handoff> {
        None
    }
    /// Where releases hand off: the claim of a grant a notification announced (postgres/handoff.rs):
    /// extends `owner`'s own row of `name` to `ttl_ms` from the database clock and returns its
    /// fence; `None` when the row is not `owner`'s (the notification was forged, stale, or the
    /// grant lapsed and went to another). By default `None`.
    async fn claim(&self, _name: &str, _owner: &str, _ttl_ms: i64) -> Result<Option<i64>, sqlx::Error> {
        Ok(None)
    }
    /// After [`Dialect::leave_queue`] of a waiter, where releases hand off: releases what
    /// `owner` may have been granted meanwhile and hands `name` on to the next head (or hands it
    /// a free or expired row). By default nothing.
    async fn hand_on(&self, _name: &str, _owner: &str) -> Result<(), sqlx::Error> {
        Ok(())
    }
    /// Marks `owner` as an election observer of `name` for `lifetime_ms` (postgres/observers.rs):
    /// grants and releases of `name` then notify. Only where the dialect [`Dialect::listens`];
    /// by default nothing.
    async fn observe(&self, _name: &str, _owner: &str, _lifetime_ms: i64) -> Result<(), sqlx::Error> {
        Ok(())
    }
    /// Deletes the rows of names not held for at least `idle_ms` (docs/contract.md §5.7); how
    /// many. Safe for tokens because every grant's fence is at least the database clock in µs.
    async fn collect_idle(&self, idle_ms: i64) -> Result<u64, sqlx::Error>;
    /// The live grant of `name`, if any (one read).
    async fn inspect(&self, name: &str) -> Result<Option<Seen>, sqlx::Error>;
    /// The live grants whose names start with `prefix`, in name order, at most `limit`.
    async fn list(&self, prefix: &str, limit: i64) -> Result<Vec<Seen>, sqlx::Error>;
    /// The exclusive lock's owner-checked renewal; whether the row is still ours. It never
    /// moves the row's end back (lock-sql's crate docs: "An own lease's end never moves back").
    async fn renew(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error>;
    /// The owner-checked early release of `hold_at_least`: the row's end set to `ttl_ms` from
    /// now, sooner than a renewal would leave it; whether the row was still ours.
    async fn end_after(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<bool, sqlx::Error>;
    /// Owner-checked renewals of many exclusive locks (distinct `(name, owner)` pairs), in one
    /// statement where the database can; whether each row is still ours, in the order of
    /// `leases`. By default one [`Dialect::renew`] after another.
    async fn renew_many(&self, leases: &[(&str, &str)], ttl_ms: i64) -> Result<Vec<bool>, sqlx::Error> {
        let mut ours = Vec::with_capacity(leases.len());
        for (name, owner) in leases {
            ours.push(self.renew(name, owner, ttl_ms).await?);
        }
        Ok(ours)
    }
    /// The exclusive lock's owner-checked release; whether it freed a live lease of ours.
    async fn release(&self, name: &str, owner: &str) -> Result<bool, sqlx::Error>;
    /// [`Dialect::release`] of a lease whose wait was never queued (so likely nobody queues
    /// behind it): where the release statement also serves the queue (PostgreSQL's grant in the
    /// release), first a cheaper one that frees the row only while no live waiter is queued,
    /// then `release` when that one freed nothing. By default `release`.
    async fn release_unqueued(&self, name: &str, owner: &str) -> Result<bool, sqlx::Error> {
        self.release(name, owner).await
    }
    /// An operator's release (docs/contract.md §5.6): one UPDATE that clears the owner and
    /// expires the live row of `name` whose fence is `fence` (the grant `inspect` saw), keeping
    /// the fence; whether it freed that grant.
    async fn force_release(&self, name: &str, fence: i64) -> Result<bool, sqlx::Error>;

    /// The statements of the read-write lock and the semaphore next to lease table `table`.
    fn kind_sql(&self, table: &str) -> KindSql;
    /// One acquire transaction of a read-write lock or semaphore side.
    async fn kind_acquire(&self, sql: &KindSql, attempt: &Attempt<'_>) -> Result<Plan, sqlx::Error>;
    /// One owner-checked autocommit statement of a side; the rows it changed.
    async fn kind_owner(&self, stmt: &OwnerStmt<'_>) -> Result<u64, sqlx::Error>;
    /// Sends `wakeup` to the listeners of every client (no-op unless [`Dialect::listens`]).
    async fn notify(&self, _wakeup: Wakeup<'_>) -> Result<(), sqlx::Error> {
        Ok(())
    }
    /// A subscription to `wakeup`, where the dialect [`Dialect::listens`]; `None` by default.
    fn subscribe(&self, _wakeup: Wakeup<'_>) -> Option<WakeSubscription> {
        None
    }
    /// The feed of an election observer of `name` (docs/contract.md §5.8), kept while `keep`'s
    /// receiver waits, where the dialect [`Dialect::listens`]; `None` by default.
    fn change_feed(&self, _name: &str, _keep: oneshot::Sender<()>) -> Option<ChangeFeed> {
        None
    }
}

/// A URL sqlx could not parse.
pub(crate) fn bad_url(codes: Codes, e: sqlx::Error) -> LockError {
    LockError::config(format!("invalid {} URL: {e}; see the lock-sql docs for the URL format", codes.label))
}

/// The first contact with a server failed: a wrong URL or account is `Config`, anything else
/// `Unavailable`.
pub(crate) fn unreachable(codes: Codes, e: sqlx::Error) -> LockError {
    match classify(codes, &e) {
        Class::Config => to_lock_error(codes, "connect", e),
        _ => LockError::unavailable_from(codes.label, format!("cannot connect: {e}"), e),
    }
}

/// The first contact did not finish within `connect_timeout`.
pub(crate) fn too_slow(codes: Codes, bound: Duration) -> LockError {
    LockError::unavailable(codes.label, format!("no connection within {bound:?} (connect_timeout)"))
}

/// `sep`-joined placeholders for `n` leases: `pattern` with `{n}` and `{o}` replaced by the
/// parameter numbers of each lease's name and owner (`first`, `first + 1`, then the next pair).
/// Where the database numbers no parameters the pattern has plain `?` and the numbers go unused.
pub(crate) fn lease_params(n: usize, first: usize, pattern: &str, sep: &str) -> String {
    (0..n)
        .map(|i| pattern.replace("{n}", &(first + 2 * i).to_string()).replace("{o}", &(first + 2 * i + 1).to_string()))
        .collect::<Vec<_>>()
        .join(sep)
}

/// Which of `leases` a multi-row renewal returned (as `(name, owner)` rows).
pub(crate) fn renewed_of(leases: &[(&str, &str)], back: &[(String, String)]) -> Vec<bool> {
    let back: std::collections::HashSet<(&str, &str)> = back.iter().map(|(n, o)| (n.as_str(), o.as_str())).collect();
    leases.iter().map(|pair| back.contains(pair)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_prefix(""), "%");
        assert_eq!(like_prefix("jobs/"), "jobs/%");
        assert_eq!(like_prefix("a%b_c!d\\e"), "a!%b!_c!!d\\e%");
    }
}
