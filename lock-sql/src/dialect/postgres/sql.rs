//! The SQL text of the PostgreSQL dialect: every statement built once per table, at connect.

use std::sync::Arc;

use super::handoff::{CLAIM_WINDOW, GRANT};
use super::observers::{self, OBSERVER_SEQ};
use crate::dialect::queue_table;
use crate::dialect::rw::Flavor;
use crate::options::quote_table;

/// Milliseconds since the Unix epoch, on the database's clock.
pub(super) const NOW: &str = "(extract(epoch from now()) * 1000)::bigint";

/// Microseconds since the Unix epoch, on the database's clock: the floor of new fences.
pub(super) const NOW_US: &str = "(extract(epoch from now()) * 1000000)::bigint";

/// Milliseconds since the Unix epoch on the database's clock **when evaluated** (`now()` is the
/// statement's start): a hand-off's lease starts when its statement holds the lease row's lock,
/// after the head's last "still queued" statement (handoff.rs).
const CLOCK: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// Evaluated by a refused acquire only (non-null): its transaction wrote nothing but the
/// waiter's queue place and the lease row's lock, soft state a crash may lose (the waiter
/// queues again), so its commit need not wait for the WAL flush, about 0.2 ms a commit on this
/// machine's disk and, under contention, the flush a hand-off's commit queued behind. Grants and
/// claims keep the session's `synchronous_commit = on` (releases do not: [`RELEASE_COMMITS_ASYNC`]);
/// WAL is flushed in order, so a grant's flush also covers every place it read.
const REFUSAL_COMMITS_ASYNC: &str = "set_config('synchronous_commit', 'off', true)";

/// Evaluated by every release and hand-on that wrote (a grant to the queue's head, or our row
/// freed): its commit does not wait for the WAL flush, about 0.2 ms a commit on this machine's
/// disk, so a hand-off's notification leaves one flush sooner and a free lock's acquire +
/// release waits for one flush, the grant's. A crash that loses such a release (before any later
/// flush: at most about three `wal_writer_delay`s, 0.6 s by default) loses no lease anyone was
/// told of and gives no lease to anyone: the row is back as it was before the release, the
/// releaser's (who no longer acts on it) until its lease ends, which keeps the others waiting
/// at most that long, as a release that never arrived would. A grant to the head is confirmed by
/// the head's claim, whose commit does wait for the flush and comes after the grant's in the WAL;
/// every other grant waits for the flush too, and WAL is flushed in order (on a synchronous
/// standby too), so a grant acknowledged is every release before it kept. `lock-model`'s
/// `pg` database-crash exploration checks this (its `grant_not_durable` switch shows why the
/// grant must wait). The hold of `hold_at_least` (`end_after`), a promise that the lock stays
/// taken, and the operator's release keep the durable commit.
const RELEASE_COMMITS_ASYNC: &str = "set_config('synchronous_commit', 'off', true)";

pub(super) const FLAVOR: Flavor = Flavor {
    quote: '"',
    now: NOW,
    create: |c, h| {
        [
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
        ]
    },
    insert: "INSERT",
    on_conflict: " ON CONFLICT DO NOTHING",
    for_update: " FOR UPDATE",
    numbered: true,
    begin: Some("BEGIN"),
    greatest: "GREATEST",
};

/// The statements of one lease table (and its waiter queue), prepared per connection.
pub(super) struct Statements {
    pub(super) lease_ddl: String,
    pub(super) queue_ddl: String,
    pub(super) acquire: Arc<str>,
    /// `acquire` without the grant's queue clean-up, for a wait's first attempt (no entry yet).
    pub(super) acquire_first: Arc<str>,
    /// `acquire` for `try_acquire`, which is never queued: without the queue's INSERT either.
    pub(super) acquire_try: Arc<str>,
    pub(super) leave_queue: Arc<str>,
    /// The head's claim of a provisional grant (handoff.rs).
    pub(super) claim: Arc<str>,
    pub(super) observe: Arc<str>,
    pub(super) renew: Arc<str>,
    /// `renew` that sets the end where it says, sooner or not (`Dialect::end_after`).
    pub(super) end_after: Arc<str>,
    /// Every given lease's renewal in one statement (see `renew_many`).
    pub(super) renew_many: Arc<str>,
    pub(super) release: Arc<str>,
    /// `release` of a row nobody is queued for, without the queue-head work (see `Statements::new`).
    pub(super) release_unqueued: Arc<str>,
    /// `release` that also hands a free or expired row to the queue's head (see `handing`).
    pub(super) hand_on: Arc<str>,
    pub(super) force_release: Arc<str>,
    pub(super) inspect: Arc<str>,
    pub(super) list: Arc<str>,
    pub(super) collect: Arc<str>,
}

impl Statements {
    /// The statements over lease table `t` (with its schema) and its waiter queue; `channel`:
    /// the table's NOTIFY channel, named after the table as configured.
    pub(super) fn new(t: &str, channel: &str) -> Statements {
        let qt = quote_table(t, '"');
        let qq = quote_table(&queue_table(t), '"');
        let lease_ddl = format!(
            "CREATE TABLE IF NOT EXISTS {qt} (name TEXT COLLATE \"C\" NOT NULL PRIMARY KEY, owner TEXT, \
             fence BIGINT NOT NULL, expires_at BIGINT NOT NULL, holder TEXT, metadata TEXT)"
        );
        let queue_ddl = format!(
            "CREATE TABLE IF NOT EXISTS {qq} (name TEXT COLLATE \"C\" NOT NULL, owner TEXT NOT NULL, \
             seq BIGINT NOT NULL, expires_at BIGINT NOT NULL, ttl_ms BIGINT NOT NULL DEFAULT 0, holder TEXT, \
             metadata TEXT, wake TEXT, PRIMARY KEY (name, owner))"
        );
        // `dlock:<name>` for election observers, only while one observes (observers.rs).
        let notify_observers = |name: &str| observers::notify(channel, &qq, name, NOW);
        Statements {
            lease_ddl,
            queue_ddl,
            // One statement: insert or take over a free/expired/own row unless a live waiter
            // queued before us ($7: our place, i64::MAX when not queued); when that did not
            // happen, report the holder's remaining lease (none when the row is free but owed
            // to a waiter) and, for a waiting attempt ($6: the entry's lifetime, 0 for
            // try_acquire), queue us or refresh our entry. A grant of an attempt that may be
            // queued deletes our entry and the name's expired ones; the first attempt of a wait
            // (and try_acquire) has no entry and runs the statement without that clean-up. (The
            // CTEs' snapshot may miss a row committed meanwhile: then no row comes back, and the
            // waiter just re-tries.)
            acquire: acquire_sql(&qt, &qq, &notify_observers("l.name"), Attempt::Queued).into(),
            acquire_first: acquire_sql(&qt, &qq, &notify_observers("l.name"), Attempt::First).into(),
            acquire_try: acquire_sql(&qt, &qq, &notify_observers("l.name"), Attempt::Try).into(),
            observe: observers::mark(&qq, NOW).into(),
            // By primary key, owner-checked, expired or not: an own row lapsed is still nobody
            // else's (contract §3's re-grant, same fence). The acquire statement does the same
            // for an own row; this skips its queue and refusal work.
            claim: format!(
                "UPDATE {qt} SET expires_at = GREATEST(expires_at, {NOW} + $3::bigint) WHERE name = $1 AND owner = $2 \
                 RETURNING fence"
            )
            .into(),
            leave_queue: format!("DELETE FROM {qq} WHERE name = $1 AND (owner = $2 OR expires_at <= {NOW})").into(),
            renew: format!(
                "UPDATE {qt} SET expires_at = GREATEST(expires_at, {NOW} + $3::bigint) \
                 WHERE name = $1 AND owner = $2 AND expires_at > {NOW}"
            )
            .into(),
            end_after: format!(
                "UPDATE {qt} SET expires_at = {NOW} + $3::bigint WHERE name = $1 AND owner = $2 AND expires_at > {NOW}"
            )
            .into(),
            // Rows another transaction holds locked are skipped, not waited for: the store
            // renews those apart, so that one locked row stalls no other lease of the round.
            renew_many: format!(
                "WITH mine AS (SELECT l.name FROM {qt} l \
                   JOIN unnest($2::text[], $3::text[]) AS r(name, owner) ON l.name = r.name AND l.owner = r.owner \
                   WHERE l.expires_at > {NOW} FOR NO KEY UPDATE OF l SKIP LOCKED) \
                 UPDATE {qt} AS l SET expires_at = GREATEST(l.expires_at, {NOW} + $1::bigint) FROM mine \
                 WHERE l.name = mine.name RETURNING l.name, l.owner"
            )
            .into(),
            release: handing(&qt, &qq, &notify_observers("g.name"), false).into(),
            release_unqueued: release_unqueued_sql(&qt, &qq, &notify_observers("l.name")).into(),
            hand_on: handing(&qt, &qq, &notify_observers("g.name"), true).into(),
            force_release: force_release_sql(&qt, &qq, &notify_observers("f.name")).into(),
            inspect: format!(
                "SELECT name, fence, expires_at - {NOW}, holder, metadata FROM {qt} \
                 WHERE name = $1 AND owner IS NOT NULL AND expires_at > {NOW}"
            )
            .into(),
            list: format!(
                "SELECT name, fence, expires_at - {NOW}, holder, metadata FROM {qt} \
                 WHERE name LIKE $1 ESCAPE '!' AND owner IS NOT NULL AND expires_at > {NOW} \
                 ORDER BY name LIMIT $2"
            )
            .into(),
            // Waiter entries that lapsed as long ago go with them (a crashed waiter's; queue.rs).
            collect: format!(
                "WITH lapsed AS (DELETE FROM {qq} WHERE expires_at <= {NOW} - $1::bigint) \
                 DELETE FROM {qt} WHERE expires_at <= {NOW} - $1::bigint"
            )
            .into(),
        }
    }
}

/// What `release` does when the queue holds no live waiter for the name (the row freed, fence,
/// holder and metadata kept, observers notified; its commit does not wait for the flush:
/// [`RELEASE_COMMITS_ASYNC`]), as one UPDATE: `release`'s lease-row lock, head
/// lookup `FOR UPDATE`, join and queue DELETE cost the server about 50 µs a statement even with
/// the queue empty (BENCHMARKS.md, 2026-12-02 07:00). With a live waiter it changes nothing (no
/// write, no commit to flush) and `release` runs. The waiter check reads the statement's
/// snapshot, like `release`'s head lookup: a waiter queued since is found by its own re-try
/// (handoff.rs).
fn release_unqueued_sql(qt: &str, qq: &str, notify_observers: &str) -> String {
    format!(
        "UPDATE {qt} l SET owner = NULL, expires_at = {NOW} \
         WHERE l.name = $1 AND l.owner = $2 AND l.expires_at > {NOW} \
         AND NOT EXISTS (SELECT 1 FROM {qq} w WHERE w.name = $1 AND w.expires_at > {NOW} \
         AND w.seq < {OBSERVER_SEQ}) \
         RETURNING {notify_observers}, {RELEASE_COMMITS_ASYNC}"
    )
}

/// An operator's release (`$1` name, `$2` the fence of the grant it frees, `$3` the table's
/// channel, `$4` the wake-up prefix): frees that grant only, and wakes the head of the queue
/// (the live waiter with the lowest `(seq, owner)`) on its client's channel.
fn force_release_sql(qt: &str, qq: &str, notify_observers: &str) -> String {
    let head = format!(
        "SELECT w.owner, w.wake FROM {qq} w WHERE w.name = f.name AND w.expires_at > {NOW} \
         AND w.seq < {OBSERVER_SEQ} ORDER BY w.seq, w.owner LIMIT 1"
    );
    format!(
        "WITH freed AS ( \
           UPDATE {qt} SET owner = NULL, expires_at = {NOW} \
           WHERE name = $1 AND fence = $2 AND owner IS NOT NULL AND expires_at > {NOW} RETURNING name) \
         SELECT (SELECT pg_notify(COALESCE(h.wake, $3), $4 || h.owner) FROM ({head}) h)::text, {notify_observers} \
         FROM freed f"
    )
}

/// Which attempt an acquire statement serves: each leaves out the clauses it cannot need, since
/// a data-modifying clause costs the server its executor set-up on every run even when its
/// condition is false (BENCHMARKS.md "SQL acquire statements"; docs/benchmarks-log.md
/// 2026-12-05 16:30).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// `try_acquire`: never queued (`$6` is 0), so no queue INSERT and no clean-up.
    Try,
    /// A wait's first attempt: queued when refused; no entry of its own to delete yet.
    First,
    /// A later attempt of a wait, which may hold an entry: a grant deletes it.
    Queued,
}

/// The exclusive acquire statement (see `Statements::new`): `$1` name, `$2` owner, `$3` ttl ms,
/// `$4` holder, `$5` metadata, `$6` the queue entry's lifetime in ms (0: never queue), `$7` the
/// caller's place, `$8` the channel its client listens on alone (a hand-off to it notifies
/// only there; [`Attempt::Try`] has neither, and its caller's place is `$6`). A refusal reads the lease row
/// again under a row lock (`cur`): the fence it reports is the latest committed grant's, which
/// is what a queued waiter compares a hand-off's fence with (handoff.rs). [`Attempt::Queued`]:
/// a grant deletes the caller's queue entry and the name's expired ones.
fn acquire_sql(qt: &str, qq: &str, notify_observers: &str, attempt: Attempt) -> String {
    let queued = if attempt == Attempt::Try {
        String::new()
    } else {
        format!(
            "queued AS ( \
               INSERT INTO {qq} AS w (name, owner, seq, expires_at, ttl_ms, holder, metadata, wake) \
               SELECT $1, $2, {NOW_US}, {NOW} + $6::bigint, $3::bigint, $4, $5, $8::text \
               WHERE $6::bigint > 0 AND NOT EXISTS (SELECT 1 FROM granted) \
               ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at, \
                 ttl_ms = EXCLUDED.ttl_ms, holder = EXCLUDED.holder, metadata = EXCLUDED.metadata, \
                 wake = EXCLUDED.wake \
               RETURNING seq), "
        )
    };
    let seq = if attempt == Attempt::Try { "NULL::bigint" } else { "(SELECT seq FROM queued)" };
    let dequeued = if attempt == Attempt::Queued {
        format!(
            ", dequeued AS ( \
               DELETE FROM {qq} WHERE $6::bigint > 0 AND name = $1 AND (owner = $2 OR expires_at <= {NOW}) \
               AND EXISTS (SELECT 1 FROM granted))"
        )
    } else {
        String::new()
    };
    let sql = format!(
        "WITH ahead AS ( \
           SELECT 1 FROM {qq} w WHERE w.name = $1 AND w.owner <> $2 AND w.expires_at > {NOW} \
           AND w.seq < {OBSERVER_SEQ} \
           AND (w.seq, w.owner) < ($7::bigint, $2::text) LIMIT 1), \
         granted AS ( \
           INSERT INTO {qt} AS l (name, owner, fence, expires_at, holder, metadata) \
           VALUES ($1, $2, {NOW_US}, {NOW} + $3::bigint, $4, $5) \
           ON CONFLICT (name) DO UPDATE SET \
             fence = CASE WHEN l.owner = EXCLUDED.owner THEN l.fence \
                     ELSE GREATEST(l.fence + 1, EXCLUDED.fence) END, \
             owner = EXCLUDED.owner, \
             expires_at = GREATEST(l.expires_at, EXCLUDED.expires_at), \
             holder = EXCLUDED.holder, \
             metadata = EXCLUDED.metadata \
           WHERE l.owner = EXCLUDED.owner \
              OR ((l.owner IS NULL OR l.expires_at <= {NOW}) AND NOT EXISTS (SELECT 1 FROM ahead)) \
           RETURNING fence, {notify_observers}), \
         {queued}cur AS (SELECT owner, fence, expires_at FROM {qt} WHERE name = $1 FOR NO KEY UPDATE){dequeued} \
         SELECT fence, NULL::bigint AS remaining, NULL::bigint AS seq, NULL::bigint AS seen FROM granted \
         UNION ALL \
         SELECT NULL::bigint, \
           CASE WHEN h.owner IS NOT NULL AND h.expires_at > {NOW} THEN h.expires_at - {NOW} END, \
           {seq}, CASE WHEN {REFUSAL_COMMITS_ASYNC} IS NOT NULL THEN h.fence END \
         FROM cur h WHERE NOT EXISTS (SELECT 1 FROM granted)"
    );
    if attempt == Attempt::Try {
        sql.replace("$7", "$6")
    } else {
        sql
    }
}

/// The release (`pass_on` false: `$1` name, `$2` owner) and the hand-on of a waiter's leave or a refused attempt (`pass_on` true: also a free or
/// expired row, whoever `$2` is), one statement that answers a row when it freed or passed on:
/// lock the lease row (`cur`), then the head of the queue (`head`, `FOR UPDATE`: a leave's delete
/// of that entry in progress is waited for and the entry skipped, the next one taken; a leave
/// after this lock finds its grant, handoff.rs); a head that carries a ttl gets the lease
/// provisionally — new fence, `expires_at` read from the clock now that the row is locked + the
/// claim window (at most its ttl; its claim extends it), its holder and metadata — and loses
/// its entry, and is notified `dlock-grant:<owner>:<fence>` on its client's
/// own channel (`wake`, which its acquire wrote with the entry); without a head our row is
/// freed (a free row passed on stays as it is). The name's observers are notified either way. Notifications are delivered on commit, which for
/// a grant to a head does not wait for the WAL flush ([`RELEASE_COMMITS_ASYNC`]), nor does a freed row's.
fn handing(qt: &str, qq: &str, notify_observers: &str, pass_on: bool) -> String {
    let claim_ms = CLAIM_WINDOW.as_millis();
    let ours = format!("owner = $2 AND expires_at > {NOW}");
    let which = if pass_on { format!("(({ours}) OR owner IS NULL OR expires_at <= {NOW})") } else { ours };
    format!(
        "WITH cur AS (SELECT name FROM {qt} WHERE name = $1 AND {which} FOR NO KEY UPDATE), \
         head AS ( \
           SELECT w.owner, w.ttl_ms, w.holder, w.metadata, w.wake FROM {qq} w \
           WHERE w.name = $1 AND EXISTS (SELECT 1 FROM cur) AND w.expires_at > {NOW} AND w.seq < {OBSERVER_SEQ} \
           AND w.wake IS NOT NULL \
           ORDER BY w.seq, w.owner LIMIT 1 FOR UPDATE), \
         granted AS ( \
           UPDATE {qt} l SET \
             owner = h.owner, \
             fence = CASE WHEN h.owner IS NULL THEN l.fence ELSE GREATEST(l.fence + 1, {NOW_US}) END, \
             expires_at = CASE WHEN h.owner IS NULL THEN {NOW} ELSE {CLOCK} + LEAST(h.ttl_ms, {claim_ms}) END, \
             holder = CASE WHEN h.owner IS NULL THEN l.holder ELSE h.holder END, \
             metadata = CASE WHEN h.owner IS NULL THEN l.metadata ELSE h.metadata END \
           FROM cur LEFT JOIN head h ON true \
           WHERE l.name = cur.name AND (h.owner IS NOT NULL OR (l.owner = $2 AND l.expires_at > {NOW})) \
           RETURNING l.name, l.owner, l.fence, h.wake), \
         dequeued AS (DELETE FROM {qq} w USING granted g WHERE w.name = $1 AND w.owner = g.owner) \
         SELECT (CASE WHEN g.owner IS NOT NULL \
                   THEN pg_notify(g.wake, '{GRANT}' || g.owner || ':' || g.fence) END)::text, \
                {notify_observers}, {RELEASE_COMMITS_ASYNC} \
         FROM granted g"
    )
}

#[cfg(test)]
mod tests {
    use sqlx::{AssertSqlSafe, Connection, Executor};

    use super::*;

    /// A connection to the test server, a lease table and queue of a new name starting with
    /// `prefix`, and their statements.
    async fn fresh_tables(prefix: &str) -> (sqlx::PgConnection, String, Statements) {
        let url = std::env::var("DLOCK_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        let t = format!("{prefix}_{}", &lock_core::OwnerId::random().to_hex()[..12]);
        let s = Statements::new(&t, &t);
        c.execute(AssertSqlSafe(s.lease_ddl.clone())).await.unwrap();
        c.execute(AssertSqlSafe(s.queue_ddl.clone())).await.unwrap();
        (c, t, s)
    }

    /// The acquire statement's row (`Row4` in mod.rs).
    type Row = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

    /// A waiting attempt of `owner` on name "n" with statement `sql`: ttl 10 s, an entry that
    /// lives 60 s, not queued yet (its place `i64::MAX`).
    fn waiting(
        sql: &Arc<str>,
        owner: &'static str,
    ) -> sqlx::query::QueryAs<'static, sqlx::Postgres, Row, sqlx::postgres::PgArguments> {
        sqlx::query_as(AssertSqlSafe(Arc::clone(sql)))
            .bind("n")
            .bind(owner)
            .bind(10_000i64)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(60_000i64)
            .bind(i64::MAX)
            .bind("dlock_w_test")
    }

    async fn drop_tables(c: &mut sqlx::PgConnection, t: &str) {
        let drop_both = format!("DROP TABLE {}, {}", quote_table(t, '"'), quote_table(&queue_table(t), '"'));
        c.execute(AssertSqlSafe(drop_both)).await.unwrap();
    }

    /// Our sessions plan index scans (pin.rs `settings`): over a waiter queue whose entries
    /// for the name were inserted and deleted thousands of times (a busy lock between two
    /// autovacuum rounds), a bitmap or sequential scan would visit every dead entry in every
    /// release, where an index scan skips them once they are marked dead.
    #[tokio::test]
    async fn the_release_plans_no_bitmap_scan_over_a_churned_queue() {
        let (mut c, t, _) = fresh_tables("dlock_plan").await;
        let schema: String = sqlx::query_scalar("SELECT current_schema()::text").fetch_one(&mut c).await.unwrap();
        super::super::pin::session(&crate::options::SqlOptions::default())(&mut c).await.unwrap();
        let s = Statements::new(&format!("{schema}.{t}"), &t);
        let qq = quote_table(&queue_table(&format!("{schema}.{t}")), '"');
        let churn = format!(
            "DO $$ BEGIN FOR i IN 1..20000 LOOP \
               INSERT INTO {qq} (name, owner, seq, expires_at, ttl_ms, wake) VALUES ('n', i::text, i, 0, 1, 'w'); \
               DELETE FROM {qq} WHERE name = 'n' AND owner = i::text; \
             END LOOP; END $$"
        );
        let live = format!(
            "INSERT INTO {qq} (name, owner, seq, expires_at, ttl_ms, wake) \
             SELECT 'n', 'live' || i, 10000 + i, 0, 1, 'w' FROM generate_series(1, 8) i"
        );
        c.execute(AssertSqlSafe(live)).await.unwrap();
        c.execute(AssertSqlSafe(churn)).await.unwrap();
        c.execute(AssertSqlSafe(format!("ANALYZE {qq}"))).await.unwrap();
        // The plan a prepared statement runs with after its first executions: the generic one.
        let prepare = format!("SET plan_cache_mode = force_generic_plan; PREPARE r(text, text) AS {}", s.release);
        c.execute(AssertSqlSafe(prepare)).await.unwrap();
        let plan: Vec<String> =
            sqlx::query_scalar(AssertSqlSafe("EXPLAIN EXECUTE r('n', 'a')")).fetch_all(&mut c).await.unwrap();
        drop_tables(&mut c, &format!("{schema}.{t}")).await;
        let plan = plan.join("\n");
        assert!(!plan.contains("Bitmap") && !plan.contains("Seq Scan"), "a scan of every entry in:\n{plan}");
        assert!(plan.contains("Index Scan"), "the queue looked up by its index:\n{plan}");
    }

    /// `try_acquire`'s statement (no queue clauses, its place as `$6`): granted on a free row,
    /// refused with the holder's remaining lease and fence, never queued, and never granted a
    /// free row owed to a live waiter.
    #[tokio::test]
    async fn try_acquire_statement_neither_queues_nor_overtakes() {
        let (mut c, t, s) = fresh_tables("dlock_try").await;
        let try_acquire = |owner: &'static str| {
            sqlx::query_as::<_, Row>(AssertSqlSafe(Arc::clone(&s.acquire_try)))
                .bind("n")
                .bind(owner)
                .bind(10_000i64)
                .bind(None::<String>)
                .bind(None::<String>)
                .bind(i64::MAX)
        };
        let first = try_acquire("a").fetch_one(&mut c).await.unwrap();
        assert!(first.0.is_some(), "a free row is granted: {first:?}");
        let refused = try_acquire("b").fetch_one(&mut c).await.unwrap();
        assert!(refused.0.is_none() && refused.1.is_some_and(|ms| ms > 9_000), "held: {refused:?}");
        assert_eq!((refused.2, refused.3), (None, first.0), "not queued; the holder's fence: {refused:?}");
        let queue = format!("SELECT count(*) FROM {}", quote_table(&queue_table(&t), '"'));
        let entries: i64 = sqlx::query_scalar(AssertSqlSafe(queue.clone())).fetch_one(&mut c).await.unwrap();
        assert_eq!(entries, 0, "a try never queues");
        // "w" waits (queued), then "a" frees the row without handing it on: owed to "w".
        let waits = waiting(&s.acquire_first, "w").fetch_one(&mut c).await.unwrap();
        assert!(waits.2.is_some(), "w is queued: {waits:?}");
        let free = format!("UPDATE {} SET owner = NULL", quote_table(&t, '"'));
        c.execute(AssertSqlSafe(free)).await.unwrap();
        let owed = try_acquire("b").fetch_one(&mut c).await.unwrap();
        assert!(owed.0.is_none(), "a free row owed to a live waiter is not granted to a try: {owed:?}");
        drop_tables(&mut c, &t).await;
    }

    /// Where the WAL's inserts have come to.
    async fn wal_inserted(c: &mut sqlx::PgConnection) -> String {
        sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text").fetch_one(c).await.unwrap()
    }

    /// Whether the WAL is flushed up to `lsn`.
    async fn flushed_past(c: &mut sqlx::PgConnection, lsn: &str) -> bool {
        sqlx::query_scalar("SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn").bind(lsn).fetch_one(c).await.unwrap()
    }

    /// A refused acquire and every release (a grant to the queue's head, a row freed, with or
    /// without a queue) commit without waiting for the WAL flush; a grant and a claim (and the
    /// session after any of them) keep `synchronous_commit = on`, and a grant's flush covers
    /// the release before it.
    #[tokio::test]
    async fn refusals_and_releases_commit_without_waiting_for_the_flush_grants_wait() {
        let (mut c, t, s) = fresh_tables("dlock_async").await;
        c.execute("SET synchronous_commit = on").await.unwrap();
        for (owner, granted, commit) in [("a", true, "on"), ("b", false, "off"), ("b", false, "off")] {
            let mut tx = c.begin().await.unwrap();
            let row = waiting(&s.acquire, owner).fetch_one(&mut *tx).await.unwrap();
            assert_eq!(row.0.is_some(), granted, "{owner}: {row:?}");
            if !granted {
                assert!(row.3.is_some(), "a refusal still reports the holder's fence: {row:?}");
            }
            let now: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut *tx).await.unwrap();
            assert_eq!(now, commit, "{owner}: granted {granted}");
            tx.commit().await.unwrap();
        }
        let after: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut c).await.unwrap();
        assert_eq!(after, "on", "the setting is the transaction's only");
        // "b" is queued now: "a"'s release grants it.
        let release = |owner: &'static str| sqlx::query(AssertSqlSafe(Arc::clone(&s.release))).bind("n").bind(owner);
        let mut tx = c.begin().await.unwrap();
        assert_eq!(release("a").fetch_all(&mut *tx).await.unwrap().len(), 1, "a's release grants b");
        let now: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(now, "off", "a release that grants the head commits without waiting for the flush");
        tx.commit().await.unwrap();
        let granted_at = wal_inserted(&mut c).await;
        let mut tx = c.begin().await.unwrap();
        let claimed: Option<i64> = sqlx::query_scalar(AssertSqlSafe(Arc::clone(&s.claim)))
            .bind("n")
            .bind("b")
            .bind(10_000i64)
            .fetch_optional(&mut *tx)
            .await
            .unwrap();
        assert!(claimed.is_some(), "b claims its grant");
        let now: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(now, "on", "the claim, which makes a holder, commits durably");
        tx.commit().await.unwrap();
        assert!(flushed_past(&mut c, &granted_at).await, "the claim's flush covers the grant it claimed");
        let mut tx = c.begin().await.unwrap();
        assert_eq!(release("b").fetch_all(&mut *tx).await.unwrap().len(), 1, "b's release frees the row");
        let now: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(now, "off", "a release that frees the row commits without waiting for the flush");
        tx.commit().await.unwrap();
        // The free path: a grant with nobody queued, its release without the queue's statement.
        let mut tx = c.begin().await.unwrap();
        assert!(waiting(&s.acquire, "c").fetch_one(&mut *tx).await.unwrap().0.is_some(), "c is granted");
        tx.commit().await.unwrap();
        let mut tx = c.begin().await.unwrap();
        let unqueued = sqlx::query(AssertSqlSafe(Arc::clone(&s.release_unqueued))).bind("n").bind("c");
        assert_eq!(unqueued.fetch_all(&mut *tx).await.unwrap().len(), 1, "c's release frees the row");
        let now: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(now, "off", "the free path's release commits without waiting for the flush");
        tx.commit().await.unwrap();
        let released_at = wal_inserted(&mut c).await;
        let mut tx = c.begin().await.unwrap();
        assert!(waiting(&s.acquire, "d").fetch_one(&mut *tx).await.unwrap().0.is_some(), "d is granted");
        let now: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(now, "on", "a grant commits durably");
        tx.commit().await.unwrap();
        assert!(flushed_past(&mut c, &released_at).await, "the next grant's flush covers the release before it");
        let after: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut c).await.unwrap();
        assert_eq!(after, "on", "the setting is the transaction's only");
        drop_tables(&mut c, &t).await;
    }
}
