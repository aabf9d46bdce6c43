//! The SQL text of the MySQL / MariaDB dialect that needs more than one line to say: the clock,
//! the acquire upsert with its condition evaluated once, the tables, the kinds' flavour.
//!
//! MySQL has neither data-modifying CTEs nor (before MariaDB 10.5) `RETURNING`, so where
//! PostgreSQL sends one statement this dialect sends an upsert and a read-back, and the upsert
//! carries the queue check in its condition. The condition is written once, in the first
//! assignment, into a session variable the others read: repeating it in each of the five
//! assignments cost the server about as much as the rest of the statement (BENCHMARKS.md,
//! "SQL acquire statements").
//!
//! ## The queue's summary on the lease row
//! A subquery on the waiter queue costs MariaDB 60–100 µs of planning in every execution
//! (measured in a stored procedure without the log flush: 0.26 ms per upsert + release without
//! it, 0.36 ms with it, the same with the subquery cut short at run time), which was most of
//! what a free lock cost over its floor. So the lease row carries `queued_until`: no live
//! waiter entry of the name ends later. A caller not queued (a `try_acquire`, a wait's first
//! attempt) runs the [`Shape::Light`] upsert, which reads that column instead of the queue; only
//! a free row refused because of it is asked again with the queue's own check (the waiters may
//! all have left while the summary still lies ahead). Why the summary holds:
//! - a refused attempt that will write its caller's entry raises `queued_until` to at least
//!   the entry's end, in the same statement, before the entry is written, and returns it;
//! - the entry is then written to end no later than that returned value ([`enqueue`]), so no
//!   clock tick between the two statements lets it outlive the summary;
//! - `queued_until` never decreases, and the row is collected only once it lies `idle` in the
//!   past too.
//!
//! `lock-model`'s `mysql` model explores these interleavings, with switches that break each.

use crate::dialect::rw::Flavor;

/// Milliseconds since the Unix epoch, on the database's clock.
pub(super) const NOW: &str = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

/// Microseconds since the Unix epoch, on the database's clock: the floor of new fences.
pub(super) const NOW_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// The session variable that carries the acquire upsert's condition from its first assignment
/// to the others (see [`upsert`]); named so that an application sharing the pool won't use it.
const GRANTED: &str = "@dlock_granted";

/// What an upsert or read-back returns in place of the count of the waiters ahead.
pub(super) const NO_COUNT: &str = "CAST(NULL AS SIGNED)";

pub(super) const FLAVOR: Flavor = Flavor {
    quote: '`',
    now: NOW,
    create: |c, h| {
        [
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
        ]
    },
    insert: "INSERT",
    // Not MySQL's INSERT IGNORE: it would turn real errors into warnings.
    on_conflict: " ON DUPLICATE KEY UPDATE fence = fence",
    for_update: " FOR UPDATE",
    numbered: false,
    begin: Some("START TRANSACTION"),
    greatest: "GREATEST",
};

/// The lease table's and the waiter queue's `CREATE TABLE IF NOT EXISTS` (`qt`, `qq` quoted).
/// `queued_until`: see the module docs.
pub(super) fn ddl(qt: &str, qq: &str) -> (String, String) {
    let lease = format!(
        "CREATE TABLE IF NOT EXISTS {qt} (name VARBINARY(255) NOT NULL PRIMARY KEY, \
         owner VARBINARY(32) NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL, \
         holder VARBINARY(255) NULL, metadata VARBINARY(1024) NULL, \
         queued_until BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB"
    );
    let queue = format!(
        "CREATE TABLE IF NOT EXISTS {qq} (name VARBINARY(255) NOT NULL, owner VARBINARY(32) NOT NULL, \
         seq BIGINT NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (name, owner)) ENGINE=InnoDB"
    );
    (lease, queue)
}

/// The live waiters queued before the caller (binds: name, owner, place, owner), for the
/// attempts of a queued waiter that skip the entry's refresh (queue.rs, `Wait::refresh`).
pub(super) fn ahead(qq: &str) -> String {
    format!(
        "(SELECT COUNT(*) FROM {qq} w WHERE w.name = ? AND w.owner <> ? AND w.expires_at > {NOW} \
         AND (w.seq, w.owner) < (?, ?))"
    )
}

/// The row after an upsert: owner, fence, remaining ms, then `count` (the waiters ahead, or
/// [`NO_COUNT`]), then `queued_until`.
fn row(count: &str) -> String {
    format!("owner, fence, CAST(expires_at - {NOW} AS SIGNED), {count}, queued_until")
}

/// Which queue check an acquire upsert makes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// For a caller not queued: the lease row's `queued_until`, no subquery. Binds: owner.
    Light,
    /// The live waiters queued before the caller, in the queue itself. Binds: owner, name,
    /// owner, place, owner.
    Queue,
}

/// The acquire upsert over lease table `qt` and queue `qq`, with the queue check of `shape`,
/// ending in `RETURNING` the [`row`] with `count` where the server has it (`returning`: MariaDB
/// 10.5+). A refusal raises `queued_until` to the bound "now + ms" (bound twice, after
/// metadata's value; 0: no entry will be written).
///
/// The condition is evaluated once, in the first assignment, into the session variable
/// [`GRANTED`]; the later assignments only read it. Both servers evaluate the assignments'
/// expressions left to right (MySQL: later ones see earlier new values; MariaDB with
/// SIMULTANEOUS_ASSIGNMENT: every one sees the old row), and the first one always runs, so the
/// variable never carries a value from an earlier statement; fence comes first and reads the
/// old owner in both modes. A free row is not taken while a live waiter queued before us waits
/// (queue.rs); the binds of the condition: see `Mysql::upsert`.
pub(super) fn upsert(qt: &str, qq: &str, shape: Shape, returning: bool, count: &str) -> String {
    let cond = match shape {
        Shape::Light => format!("(owner = ? OR ((owner IS NULL OR expires_at <= {NOW}) AND queued_until <= {NOW}))"),
        Shape::Queue => format!(
            "(owner = ? OR ((owner IS NULL OR expires_at <= {NOW}) AND NOT EXISTS ( \
               SELECT 1 FROM {qq} w WHERE w.name = ? AND w.owner <> ? AND w.expires_at > {NOW} \
               AND (w.seq, w.owner) < (?, ?))))"
        ),
    };
    let returning = if returning { format!(" RETURNING {}", row(count)) } else { String::new() };
    format!(
        "INSERT INTO {qt} (name, owner, fence, expires_at, holder, metadata) \
         VALUES (?, ?, {NOW_US}, {NOW} + ?, ?, ?) \
         ON DUPLICATE KEY UPDATE \
           fence = IF({GRANTED} := {cond}, IF(owner = ?, fence, GREATEST(fence + 1, {NOW_US})), fence), \
           owner = IF({GRANTED}, ?, owner), \
           expires_at = IF({GRANTED}, GREATEST(expires_at, {NOW} + ?), expires_at), \
           holder = IF({GRANTED}, ?, holder), \
           metadata = IF({GRANTED}, ?, metadata), \
           queued_until = IF({GRANTED} OR ? = 0, queued_until, GREATEST(queued_until, {NOW} + ?)){returning}"
    )
}

/// Queues a refused waiter or refreshes its entry (binds: name, owner, then twice the entry's
/// lifetime in ms and the `queued_until` its attempt returned): the entry ends no later than
/// the summary its attempt raised (module docs).
pub(super) fn enqueue(qq: &str, returning: bool) -> String {
    let ends = format!("LEAST({NOW} + ?, ?)");
    let returning =
        if returning { format!(" RETURNING seq, {}", crate::dialect::ahead_of(qq, NOW)) } else { String::new() };
    format!(
        "INSERT INTO {qq} (name, owner, seq, expires_at) VALUES (?, ?, {NOW_US}, {ends}) \
         ON DUPLICATE KEY UPDATE expires_at = {ends}{returning}"
    )
}

/// The [`row`] with `count` read back after an upsert without `RETURNING`.
pub(super) fn read_back(qt: &str, count: &str) -> String {
    format!("SELECT {} FROM {qt} WHERE name = ?", row(count))
}

/// The multi-row renewal up to its lease list that does not wait for a row another
/// transaction holds locked. MariaDB: a lock wait of 0 fails at once; MySQL's least is 1 s, set
/// by a hint.
pub(super) fn renew_many_nowait(qt: &str, mariadb: bool) -> String {
    if mariadb {
        format!(
            "SET STATEMENT innodb_lock_wait_timeout = 0 FOR UPDATE {qt} SET expires_at = GREATEST(expires_at, {NOW} + ?) \
             WHERE expires_at > {NOW} AND "
        )
    } else {
        format!(
            "UPDATE /*+ SET_VAR(innodb_lock_wait_timeout = 1) */ {qt} SET expires_at = GREATEST(expires_at, {NOW} + ?) \
             WHERE expires_at > {NOW} AND "
        )
    }
}
