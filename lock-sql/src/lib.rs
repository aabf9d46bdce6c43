//! # lock-sql: fenced leases in PostgreSQL, MySQL/MariaDB and SQLite
//!
//! One lease table per database, one row per lock name, and three short statements. The
//! database you already run becomes a lock service with real fencing tokens.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, DistributedLock, LockName};
//!
//! // Also: "postgres://app@db/app?sslmode=verify-full", "mysql://app@db/app?ssl-mode=required",
//! // "mariadb://…" (same as mysql://), "sqlite::memory:" (one process only).
//! let lock = lock_sql::connect("sqlite://dlock.db", lock_sql::SqlOptions::default()).await?;
//! let lease = lock.acquire(&LockName::new("nightly-report")?, &AcquireOptions::new(Duration::from_secs(30))).await?;
//! println!("fencing token {}", lease.token());
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! `postgres`, `mysql` and `sqlite` (all on by default) each bring one database; a build
//! without one answers its URLs with [`LockError::Config`] naming the feature.
//!
//! ## The table
//!
//! `dlock_leases` by default ([`SqlOptions::table`], a plain identifier or a schema-qualified
//! `schema.table`), created if missing:
//!
//! | column       | meaning |
//! |--------------|---------|
//! | `name`       | the lock name, primary key (`TEXT COLLATE "C"` / `VARBINARY(255)` / `TEXT`: compared byte for byte, so distinct names never collide) |
//! | `owner`      | 32 hex digits of the holder's random owner id, `NULL` once released |
//! | `fence`      | the last fencing token issued for this name |
//! | `expires_at` | end of the lease, milliseconds since 1970 **on the database's clock** |
//! | `holder`     | the acquirer's holder id ([`lock_core::Holder`]), `NULL` if none given; set by the grant (docs/contract.md §5.6) |
//! | `metadata`   | the holder's metadata (≤ 1 KiB), `NULL` if none |
//!
//! A lease table made by an older version, without `holder` and `metadata`, gets them on
//! connect (`ALTER TABLE … ADD COLUMN`); a user without `ALTER` gets a `Config` error carrying
//! the statement to run as the table's owner.
//!
//! Rows are kept unless [`SqlOptions::idle_gc_after`] is set: then each client deletes the rows
//! of names nobody has held for that long (docs/contract.md §5.7). Tokens never go back for it:
//! a new row's fence is the database clock in µs, and every grant sets `fence = max(fence + 1,
//! clock in µs)`, so a row idle that long has a fence the clock has passed.
//!
//! ## The algorithm
//!
//! * **Acquire** is one atomic upsert in autocommit: insert the row (fence = the database clock
//!   in µs), or update it when it is free (`owner IS NULL`), expired (`expires_at <= now`) or
//!   already ours (a retry after a lost reply gets the same grant back, with the same token).
//!   The update sets `fence = max(fence + 1, clock in µs)` (unless the row was already ours),
//!   `owner`, `expires_at = now + ttl`, and the holder's `holder` and `metadata`. When the row is held by someone else the statement changes
//!   nothing, and we report the holder's remaining lease, so a waiter sleeps no longer than that.
//!   A free or expired row is taken only when no live waiter queued before the caller: see
//!   *The waiter queue* below.
//! * **Renew** is `UPDATE … SET expires_at = now + ttl WHERE name = ? AND owner = ? AND
//!   expires_at > now`; one row changed means still ours.
//! * **Release** is `UPDATE … SET owner = NULL, expires_at = now WHERE name = ? AND owner = ? AND
//!   expires_at > now`: the row and its fence stay.
//!
//! No statement holds a transaction (or a row lock) open while the application works, unlike the
//! classic `SELECT … FOR UPDATE` lock: a crashed or paused holder blocks nobody beyond its ttl,
//! and there is no deadlock between lock holders. Each statement is bounded by
//! [`SqlOptions::request_timeout`]; deadlock / busy conflicts between contenders are retried
//! within that bound; connection failures become [`LockError::Unavailable`]. Lock names are
//! always bound parameters, never spliced into SQL.
//!
//! ### PostgreSQL
//!
//! ```sql
//! WITH granted AS (
//!   INSERT INTO dlock_leases AS l (name, owner, fence, expires_at, holder, metadata)
//!   VALUES ($1, $2, NOW_US, NOW_MS + $3, $4, $5)
//!   ON CONFLICT (name) DO UPDATE SET
//!     fence = CASE WHEN l.owner = EXCLUDED.owner THEN l.fence
//!             ELSE GREATEST(l.fence + 1, EXCLUDED.fence) END,
//!     owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
//!     holder = EXCLUDED.holder, metadata = EXCLUDED.metadata
//!   WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at <= NOW_MS
//!   RETURNING fence)
//! SELECT fence, NULL FROM granted
//! UNION ALL SELECT NULL, expires_at - NOW_MS FROM dlock_leases
//!   WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM granted);
//! -- NOW_MS = (extract(epoch from now()) * 1000)::bigint, NOW_US the same in microseconds
//!
//! WITH cur AS (SELECT name FROM dlock_leases WHERE name = $1 AND owner = $2
//!               AND expires_at > NOW_MS FOR NO KEY UPDATE),
//!   head AS (SELECT owner, ttl_ms, holder, metadata, wake FROM dlock_leases_waiters
//!            WHERE name = $1 AND EXISTS (SELECT 1 FROM cur) AND expires_at > NOW_MS
//!            ORDER BY seq, owner LIMIT 1 FOR UPDATE),
//!   granted AS (UPDATE dlock_leases l SET owner = h.owner,              -- NULL: nobody waits
//!                 fence = GREATEST(l.fence + 1, NOW_US),                -- when handed over
//!                 expires_at = CLOCK_MS + LEAST(h.ttl_ms, 1000),  -- provisional: the claim window
//!                 holder = h.holder, metadata = h.metadata
//!               FROM cur LEFT JOIN head h ON h.ttl_ms > 0 WHERE l.name = cur.name
//!               RETURNING l.owner, l.fence, h.wake),
//!   dequeued AS (DELETE FROM dlock_leases_waiters w USING granted g
//!                WHERE w.name = $1 AND w.owner = g.owner)
//! SELECT pg_notify(COALESCE(g.wake, 'dlock_leases'), 'dlock-grant:' || g.owner || ':' || g.fence)
//!   FROM granted g;  -- wake: the head's client's own channel (its queue entry names it)
//! -- CLOCK_MS: clock_timestamp(), read once the row is locked (now() is the statement's start)
//! ```
//!
//! (The acquire shown is the statement's core; the real one also checks and updates the waiter
//! queue in the same statement, below.)
//!
//! **The grant in the release** (`dialect/postgres/handoff.rs`): a release that frees a name with a live queue
//! head grants the lease to that head — a new fence, the head's holder and metadata (its queue
//! entry carries them) — **provisionally**, for the claim window `min(head's ttl, 1 s)`, and
//! notifies it. A notification is only a hint (`NOTIFY` needs no privilege: anyone who can read
//! the queue could forge one): it wakes the head, whose **claim** — one owner-checked `UPDATE`
//! by primary key that extends its own row to its ttl and returns the row's fence — is the
//! lease, with validity from the claim's send instant (the row is already its own: a re-grant,
//! docs/contract.md §3). A claim that finds the row not its own (a forged, late or duplicated
//! notification; a grant that lapsed and went to another) falls back to the acquire statement.
//! A hand-off thus costs the release's commit and the claim, two statements in series.
//!
//! **An untaken grant lapses.** A head that never claims (its process died; its future was
//! dropped as the grant came) holds the lock for the claim window; then it is free (the head's
//! entry went with the grant), for the next waiter, which re-tries within `4 × max_poll` of its
//! last attempt and, finding the provisional grant, sleeps only until it lapses: the next waiter
//! holds within `max(claim window, 4 × max_poll)` + one statement of the release (≤ 2 s + a
//! statement), a newcomer once the window has passed. A waiter whose wait ends with a grant in
//! flight (time-out, drop) deletes its queue entry, then releases what it was given and hands
//! the lock on to the next head; its record is forgotten only once both statements ran, so a
//! clean-up cut short is finished by the background one, and both are repeated while a
//! cancelled attempt of it may still land (a late refused statement would re-queue it). A
//! refused attempt that finds the lock free or expired but owed to a queued waiter hands it to
//! that waiter. A lost notification costs only latency: every waiter re-tries on its own timer,
//! and its acquire finds the row its own. Only heads whose entry is live (refreshed within
//! `8 × max_poll + 250 ms`) are granted. Queue entries written by an older version (`ttl_ms =
//! 0`) are only woken, with `dlock-waiter:<owner>`, as before. The columns this adds to a
//! PostgreSQL waiter table (and `wake`, below) make an older client refuse that table at
//! connect (its squatting check names them, a `Config` error): upgrade every client of one
//! table together.
//!
//! Waiters are woken by `LISTEN`/`NOTIFY`: release notifies in the same statement (so only a
//! committed release notifies), and only when someone waits, with the payload
//! `dlock-grant:<owner>:<fence>` naming the head of the waiter queue, on the channel the head's
//! queue entry names: its client's own (`dlock_w_<32 hex>`, which that client's listener
//! `LISTEN`s on beside the table's channel), so one client hears it, not every client of the
//! table. An older version's entry names none and is notified on the channel named like the
//! table, which every client hears. The read-write lock and the semaphore notify per name on
//! the table's channel; every kind has its own payload
//! prefix, none the start of another, so no kind wakes another's waiters. Election observers
//! (`watch_changes`, contract §5.8) keep a row in the waiter queue that holds nobody back;
//! while one lives, grants and releases of that name also notify `dlock:<name>` (statements
//! simplified above; see `dialect/postgres/observers.rs`). Each client keeps **one**
//! listening connection. While that connection
//! is down notifications are lost, so after reconnecting it wakes every local waiter; and every
//! waiter also re-tries on its own timer, never later than the holder's lease ends. Use READ
//! COMMITTED (the default): the upsert never needs SERIALIZABLE. Behind PgBouncer, `LISTEN` needs
//! a session and the statements are prepared per connection: use a session-mode pool, or
//! transaction mode with `max_prepared_statements` (PgBouncer 1.21+) and accept that waiters
//! then fall back to polling.
//!
//! ### MySQL / MariaDB
//!
//! ```sql
//! INSERT INTO dlock_leases (name, owner, fence, expires_at, holder, metadata)
//! VALUES (?, ?, NOW_US, NOW_MS + ?, ?, ?)
//! ON DUPLICATE KEY UPDATE
//!   fence      = IF(@dlock_granted := COND, IF(owner = ?, fence, GREATEST(fence + 1, NOW_US)), fence),
//!   owner      = IF(@dlock_granted, ?, owner),
//!   expires_at = IF(@dlock_granted, NOW_MS + ?, expires_at),
//!   holder     = IF(@dlock_granted, ?, holder),
//!   metadata   = IF(@dlock_granted, ?, metadata);
//! -- MariaDB 10.5+: the upsert ends in RETURNING owner, fence, expires_at - NOW_MS (one round trip);
//! -- MySQL: the row is read back instead:
//! SELECT owner, fence, expires_at - NOW_MS FROM dlock_leases WHERE name = ?;
//! -- COND   = (owner = ? OR ((owner IS NULL OR expires_at <= NOW_MS) AND no live waiter queued before us))
//! -- NOW_US = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)), NOW_MS = NOW_US DIV 1000
//! ```
//!
//! Two traps, both handled: MySQL evaluates the assignments left to right (later ones see the
//! new values of earlier ones) while MariaDB's `SIMULTANEOUS_ASSIGNMENT` makes them all see the
//! old row, so the condition is evaluated once, in the first assignment (which both modes run
//! first, against the old row), into a session variable that the others read; and sqlx sets
//! `CLIENT_FOUND_ROWS`, so the affected-row count cannot tell a grant from a refusal: the row
//! comes back through MariaDB's `RETURNING`, or is read back right after on MySQL (only our own
//! statement can ever make our owner id the holder, so the read-back needs no transaction).
//! Sessions use READ COMMITTED (no gap locks) and `innodb_lock_wait_timeout` tied to the request
//! timeout; deadlocks (1213) and lock waits (1205) are retried. Names are stored as
//! `VARBINARY(255)`: case and trailing spaces matter, as they must. Waiters poll with
//! jittered, capped back-off that never sleeps past the holder's remaining lease.
//!
//! ### SQLite
//!
//! The same upsert as PostgreSQL (`ON CONFLICT … DO UPDATE … WHERE … RETURNING fence`; SQLite
//! evaluates every `SET` against the old row), with `NOW_MS = CAST((julianday('now') -
//! 2440587.5) * 86400000.0 AS INTEGER)`. The file is opened in WAL mode with
//! `synchronous = FULL` (a fence once handed out survives a power cut) and a busy timeout
//! equal to the request timeout, so several processes on **one host** can share it. Do not put it
//! on a network file system. `sqlite::memory:` works inside one process and is not durable.
//! Waiters poll, like MySQL's.
//!
//! ## The waiter queue (exclusive lock)
//!
//! `<table>_waiters` (`name`, `owner`, `seq`, `expires_at`, and on PostgreSQL the hand-off's
//! `ttl_ms`, `holder`, `metadata`; primary key `(name, owner)`), created
//! next to the lease table, makes waiters of the exclusive lock first come, first served
//! (`fifo`), on all three databases. The acquire upsert's condition for a free or expired row
//! gains `AND NOT EXISTS (SELECT 1 FROM <table>_waiters w WHERE w.name = ? AND w.owner <> ? AND
//! w.expires_at > NOW_MS AND (w.seq, w.owner) < (our place, ?))`, where a caller not queued has
//! the place `i64::MAX`: a newcomer, `try_acquire` and the releaser coming straight back never
//! overtake a queued waiter. A refused attempt of a waiting `acquire` inserts its entry (place =
//! the database clock in µs) or refreshes its expiry, keeping its place; the grant deletes it and
//! the name's lapsed entries; a wait that ends without a grant deletes it. On PostgreSQL all of
//! it is the one acquire statement (data-modifying CTEs), so a free lock is still one round
//! trip; MySQL and SQLite queue and dequeue with a statement of their own, only when contended.
//! An entry lapses `8 × max_poll + 250 ms` after its waiter's last attempt (`max_poll` = ttl/4
//! within 20–500 ms; a waiter attempts at least every `4 × max_poll`), so a waiter that vanished
//! holds a free lock back at most `12 × max_poll + 250 ms`: 6.25 s with long ttls, three ttls
//! with ttls under 2 s. The queue table needs the name of the lease table to have at most 55
//! characters.
//!
//! ## Read-write locks and semaphores
//!
//! [`SqlBackend`] hands out the exclusive lock ([`SqlBackend::lock`]), the read-write lock
//! ([`SqlBackend::rw`]) and the semaphore ([`SqlBackend::semaphore`]) over one pool and (on
//! PostgreSQL) one listening connection; [`connect_rw`] and [`connect_semaphore`] each open their
//! own. It is built from a URL or from the application's own sqlx pool
//! ([`SqlBackend::from_pg_pool`], `from_mysql_pool`, `from_sqlite_pool`; the type's docs say what
//! that costs). The kinds add two tables next to the lease table, which
//! is left untouched (`<table>_counters`, `<table>_holders`, created if missing; so the table
//! name may have at most 54 characters here, else [`LockError::Config`]):
//!
//! | `<table>_counters` | meaning |
//! |--------------------|---------|
//! | `kind`, `name`     | primary key; `kind` is `rw` or `sem`, so one name as exclusive lock, rw lock and semaphore is three locks |
//! | `fence`            | the last token issued for (kind, name), to any holder (readers included); never deleted |
//! | `permits`          | semaphores: the number of permits of the current holders |
//! | `claim_owner`, `claim_until` | a refused, waiting writer's short claim (ttl/2, 0.3–2 s) that holds new readers back |
//!
//! | `<table>_holders`  | meaning |
//! |--------------------|---------|
//! | `kind`, `name`, `owner` | primary key: one row per grant |
//! | `mode`             | 1 for a writer, 0 for a reader or a permit |
//! | `fence`, `expires_at` | the grant's token and the end of its lease (ms, database clock) |
//!
//! **Acquire** is one short transaction (PostgreSQL `BEGIN`, MySQL `START TRANSACTION`, SQLite
//! `BEGIN IMMEDIATE`), never held while the application works:
//!
//! ```sql
//! INSERT INTO t_counters (kind, name, fence, permits, claim_owner, claim_until)
//!   VALUES (?, ?, 0, 0, NULL, 0) ON CONFLICT DO NOTHING;
//!   -- MySQL: ON DUPLICATE KEY UPDATE fence = fence; SQLite: INSERT OR IGNORE
//! SELECT fence, permits, CASE WHEN claim_owner IS NOT NULL AND claim_owner <> ? AND claim_until > NOW_MS
//!                             THEN claim_until - NOW_MS ELSE -1 END
//!   FROM t_counters WHERE kind = ? AND name = ? FOR UPDATE;    -- SQLite: no FOR UPDATE (file lock)
//! DELETE FROM t_holders WHERE kind = ? AND name = ? AND expires_at <= NOW_MS;
//! SELECT owner, mode, fence, expires_at - NOW_MS FROM t_holders WHERE kind = ? AND name = ?;
//! -- granted: (a row of our own owner id is a retried grant: its token comes back unchanged)
//! UPDATE t_counters SET fence = ?, permits = ?,
//!        claim_owner = CASE WHEN claim_owner = ? THEN NULL ELSE claim_owner END WHERE kind = ? AND name = ?;
//! INSERT INTO t_holders (kind, name, owner, mode, fence, expires_at) VALUES (?, ?, ?, ?, ?, NOW_MS + ?);
//! -- a waiting writer refused by holders, when no other writer's claim is live:
//! UPDATE t_counters SET claim_owner = ?, claim_until = NOW_MS + ? WHERE kind = ? AND name = ?;
//! COMMIT;
//! ```
//!
//! A reader is granted when no writer holds and no other writer's claim is live; a writer when
//! nobody else holds; a permit when fewer than `permits` hold, and every holder agreed on
//! `permits` (otherwise `InvalidOptions`). The counter row's lock serialises the acquires of
//! one (kind, name) and the new token is its `fence + 1`. Deadlocks and lock waits (MySQL
//! 1213/1205, PostgreSQL 40001/40P01, SQLite busy) roll the transaction back and re-run it, at
//! most 8 times and all within [`SqlOptions::request_timeout`], then `Unavailable`. Any failed
//! acquire transaction is rolled back before its connection goes back to the pool: on MySQL an
//! open one would keep the counter row locked for every other client (InnoDB's lock-wait
//! timeout ends only the statement), on PostgreSQL an aborted one would fail every later
//! statement on that connection.
//!
//! **Renew** and **release** are one owner-checked autocommit statement each:
//!
//! ```sql
//! UPDATE t_holders SET expires_at = NOW_MS + ? WHERE kind = ? AND name = ? AND owner = ? AND expires_at > NOW_MS;
//! DELETE FROM t_holders WHERE kind = ? AND name = ? AND owner = ? AND expires_at > NOW_MS;
//! -- a writer's release (or a write wait that ended without a grant) also withdraws its claim:
//! UPDATE t_counters SET claim_owner = NULL WHERE kind = ? AND name = ? AND claim_owner = ?;
//! ```
//!
//! On PostgreSQL a release then `pg_notify`s the table's channel (payload `dlock-rw-read:<name>`,
//! `dlock-rw-write:<name>` or `dlock-sem:<name>`), which wakes one local waiter of that side in
//! each client; every waiter also polls, never sleeping past the holders' remaining lease.
//! MySQL and SQLite poll.
//!
//! ## Why the database clock
//!
//! Expiry is decided where the row lives, by one clock: every `now` above is the database
//! server's. Client clocks never enter the comparison, so a client whose wall clock is minutes
//! off can neither steal a live lease nor keep an expired one. The client keeps its own,
//! conservative view ([`Lease::valid_until`](lock_core::Lease::valid_until) = start of the
//! request + ttl − drift, on its monotonic clock), which ends before the server's lease does.
//! SQLite's "server" clock is the host's wall clock: a large step of that clock (manual change,
//! not NTP slewing) shortens or lengthens leases.
//!
//! ## Fencing: what the protected resource does with the token
//!
//! `fence` only ever grows for a name: every acquisition (including the takeover of an expired
//! lease) increments it in the same statement that grants the lease, and the row is never
//! deleted, so the token survives restarts of the database. A holder that was paused past its
//! ttl (GC pause, VM migration) still believes it holds the lock; the token is what stops its
//! late writes. Store the highest token seen next to the data, and make every write conditional
//! on it — the optimistic "version column" lock, done right, because the version now comes from
//! the lock service instead of each writer:
//!
//! ```sql
//! -- once: ALTER TABLE accounts ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;
//! UPDATE accounts
//!    SET balance = balance - 7, fence = $token
//!  WHERE id = $id AND fence < $token;     -- 0 rows: a newer holder already wrote; stop.
//! ```
//!
//! Use `fence <= $token` instead if one holder writes the same row several times. In Rust,
//! [`FencedRegister`](lock_core::FencedRegister) does the same for in-memory state.
//!
//! Tokens are as durable as the database: after a failover to an *asynchronous* replica the
//! last grants may be missing and tokens can repeat. Use synchronous replication if that matters.
//!
//! Durable commits are what durable fencing rests on:
//!
//! * **PostgreSQL**: every session of this crate runs `SET synchronous_commit = on`, so a server
//!   configured with `synchronous_commit = off` still writes each grant before acknowledging it
//!   (tested: such a server killed with SIGKILL right after several grants hands out a higher
//!   token after its restart). The server's `fsync` is the operator's: with `fsync = off` a
//!   crash of the host (not of PostgreSQL) can still lose grants. Two commits do not wait for
//!   the flush: a refused acquire's, whose transaction writes only a waiter's queue place and a
//!   row lock (a crash may lose the place; the waiter queues again), and a release's that grants
//!   the lock to the queue's head: nobody holds by that grant until the head's claim, whose
//!   durable commit comes after it in the WAL and so flushes it too. A contended hand-off thus
//!   waits for one flush, the claim's. A crash that loses such a release (within about three
//!   `wal_writer_delay`s of it) loses no lease anyone was told of: the row is back as it was
//!   before the release, the releaser's until its lease ends.
//! * **MySQL / MariaDB**: `innodb_flush_log_at_trx_commit` is global, so it is checked at
//!   connect, not set. Anything but `1` (`0` loses about a second of commits when mysqld
//!   crashes, `2` when the host does) makes [`Capabilities::durable_fencing`] and
//!   `durable_leases` false, and logs a warning that names the setting.
//! * **SQLite**: `synchronous = FULL` in WAL mode (see above); `sqlite::memory:` is not durable.
//!
//! ## Operations
//!
//! * TLS comes from the URL, through rustls (no OpenSSL): PostgreSQL `sslmode=require |
//!   verify-ca | verify-full` (`sslrootcert=…`), MySQL `ssl-mode=REQUIRED | VERIFY_CA |
//!   VERIFY_IDENTITY` (`ssl-ca=…`). Without a mode, sqlx *prefers* TLS when the server offers
//!   it but does not verify the certificate: name a verifying mode in production. Tested
//!   against an impostor with a certificate from an unknown CA: the verifying modes refuse it
//!   (and accept it once `sslrootcert=` / `ssl-ca=` names that CA), `require` / `prefer` hand
//!   it the session — on PostgreSQL the password in clear, which the impostor simply asks for.
//!   The mode is judged once, from the driver's own parse of the URL ([`weak_tls_warning`]):
//!   any spelling, case or percent-encoding (`sslmode=%72equire`), a `?host=` / `hostaddr=`
//!   that sends the connection elsewhere, and `PGSSLMODE` (which sqlx reads when the URL names
//!   no mode; an unparsable value it ignores, leaving `prefer`) all count the same. `connect`
//!   logs a warning (target `lock_sql::tls`) for a mode that does not verify the server, or a
//!   default one towards a host that is not loopback or a Unix socket; with
//!   [`SqlOptions::tls`] = [`SqlTls::Verify`] (`[sql] tls = "verify"`) it refuses every such
//!   mode, the default and `disable` included, with a `Config` error (the application's pool
//!   too, from its connect options). The switch is an option, not a URL parameter: the URL's
//!   parameters are the driver's, and one it does not know is refused (below).
//! * URL parameters: only those the driver reads are accepted (PostgreSQL `sslmode`,
//!   `sslrootcert`, `sslcert`, `sslkey`, `statement-cache-capacity`, `host`, `hostaddr`, `port`,
//!   `dbname`, `user`, `password`, `application_name`, `options`, `options[…]` and the dashed
//!   spellings sqlx also reads; MySQL `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key`, `charset`,
//!   `collation`, `statement-cache-capacity`, `socket`, `timezone`; SQLite `mode`, `cache`,
//!   `immutable`, `vfs`). Any other — `ssl_mode=`, `SSLMODE=`, libpq's `sslpassword` or
//!   `connect_timeout` — a parameter given twice, or a `#fragment` on a network URL, is
//!   [`LockError::Config`] naming it: the driver would silently ignore it (or use the last
//!   copy), and the connection would not be what the URL seems to ask for.
//! * Table squatting: `CREATE TABLE IF NOT EXISTS` would adopt a table of that name someone
//!   else created first — on PostgreSQL wherever the `search_path` finds it first (before
//!   PostgreSQL 15 every user may create tables in `public`), on MySQL in the URL's database.
//!   With other columns or a trigger its creator controls the tokens, and on PostgreSQL a trigger
//!   runs with the lock user's privileges. So every lock table, found or created, is checked
//!   before use: exactly dlock's columns and types, no trigger (PostgreSQL: no rule, a plain
//!   table, and owned by the connecting user, a role it belongs to, or a superuser; for a
//!   superuser only its own or superusers' tables). A table that fails is [`LockError::Config`]
//!   saying why. MySQL has no table owners, and shows a table's triggers only to users with
//!   the `TRIGGER` privilege on it, so there the check is the columns, plus the triggers when
//!   visible. Against squatting in the first place, name the table schema-qualified
//!   (`locks.dlock_leases`) in a schema only trusted roles may create in; an unqualified name
//!   follows the session's `search_path`.
//! * PostgreSQL name resolution is pinned (`dialect/postgres/pin.rs`): an operator or function
//!   with an exact match on its argument types, planted in a schema on the lock role's
//!   `search_path` (`numeric * integer`, `text || bigint`, `unnest(text[])`, or `now()` ahead of
//!   `pg_catalog`), would otherwise run as the lock role inside every statement — read the
//!   table, make the clock read 0, forge tokens. Every session of this crate, the listener's
//!   included, runs with `search_path = pg_catalog, pg_temp`, and the statements name the lock
//!   tables with their schema: an unqualified `table` is resolved once, at connect, under the
//!   session's own path (where a table of that name is found, else where `CREATE TABLE` would
//!   put it; the waiter queue and the kinds' tables go next to it). One pinned path covers
//!   every operator, function and type name; qualifying each by hand would leave the next one
//!   forgotten. Over the application's pool ([`SqlBackend::from_pg_pool`]) the path (with
//!   `synchronous_commit` and `statement_timeout`) is put on before each operation and the
//!   application's own values put back after, one more round trip per operation; a connection
//!   whose operation was cancelled half-way is closed, not returned with our path. Tested with
//!   a role whose path puts a hostile schema before `pg_catalog` (`tests/postgres_search_path.rs`).
//!   Behind a transaction-mode PgBouncer a session's `SET` need not reach the server connection
//!   of the next transaction: there give the lock role the path itself (`ALTER ROLE … SET
//!   search_path = pg_catalog, pg_temp`) and name the table schema-qualified.
//! * PostgreSQL sessions are named `dlock` in `pg_stat_activity` unless the URL sets
//!   `application_name`.
//! * Connections: at most [`SqlOptions::max_connections`] per client, plus two that only
//!   renew and release may use (so that waiters' acquires, each possibly blocked on a row lock,
//!   never delay a held lease's renewal), plus one listening connection on PostgreSQL. Renew
//!   and release of one lease run one at a time; different leases never wait for each other. PostgreSQL and MySQL use a small pool of this crate rather than
//!   sqlx's, whose ping on every return doubles the round trips of each operation and makes the
//!   next one open a new connection: here every acquire, renew and release is **one round
//!   trip** on a connection where the statements are already prepared (measured: 303 ms per
//!   operation behind 150 ms of one-way latency). A connection whose statement failed or was
//!   cancelled half-way is closed, never reused; one idle for 2 s is pinged before reuse; one
//!   idle for a minute is closed. A connection that breaks under a statement (server restart,
//!   killed session) is replaced and the statement re-run, which is safe because every
//!   statement is idempotent for its owner id. A release re-run that way and finding nothing of
//!   ours counts as released: the lost attempt may have committed.
//! * An acquire that was cancelled (or timed out) may still be running on the server, e.g.
//!   waiting for a row lock, and commit its grant after the clean-up release ran. The server
//!   bounds every statement (PostgreSQL sessions set `statement_timeout` to the request timeout;
//!   MySQL waits for row locks at most `innodb_lock_wait_timeout`; SQLite at most its busy
//!   timeout), and the release of such an owner is repeated once twice that bound has passed.
//! * Privileges: `CREATE` only while a table is missing (each is looked for first, then
//!   created if absent), `ALTER` only while the lease table lacks the `holder`/`metadata`
//!   columns (or a PostgreSQL waiter queue lacks `ttl_ms`/`holder`/`metadata`), `DELETE` on the
//!   lease table only with `idle_gc_after`. After that the lock user needs `SELECT, INSERT, UPDATE` on the lease
//!   table, `SELECT, INSERT, UPDATE, DELETE` on the waiter queue `<table>_waiters`, and for
//!   read-write locks and semaphores the same on `<table>_counters` and `<table>_holders` (tested on PostgreSQL and MariaDB with a user that
//!   has exactly these). A missing privilege is [`LockError::Config`], whose message carries the
//!   server's (MySQL names the command, PostgreSQL the table) and this list.
//! * `DLOCK_SQL_MYSQL_RETURNING=0` makes MariaDB use MySQL's two-statement acquire
//!   (diagnostics; the tests run both).
// A build with fewer than all three dialects leaves helpers that only the others use.
#![cfg_attr(not(all(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]

mod adopt;
mod backend;
mod decide;
mod dialect;
mod error;
mod inflight;
mod kinds;
mod millis;
mod options;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod pool;
mod queue;
mod serial;
mod store;
mod tls;

pub use backend::SqlBackend;
pub use kinds::{SqlKinds, SqlRwLock, SqlSemaphore};
pub use options::{SqlOptions, DEFAULT_TABLE};
pub use store::{SqlLock, SqlStore};
pub use tls::{check_tls, weak_tls_warning, SqlTls};

#[cfg(doc)]
use lock_core::Capabilities;
use lock_core::{backend::StoreLock, LockError};

/// Pins a PostgreSQL connection of your own the way this crate pins its sessions
/// (`search_path = pg_catalog, pg_temp`, durable commits), for tools that run statements beside
/// the lock on its tables: an operator or function planted in a schema on the role's path then
/// cannot run inside them. Returns `table` with its schema (`schema.table`, unquoted), found under
/// the connection's own path before it is pinned, or where `CREATE TABLE` would put it: name
/// every table you use with it, as the pinned path finds no table outside `pg_catalog`.
///
/// A table that resolves to no schema, or to one that is not a plain identifier, is
/// [`LockError::Config`].
#[cfg(feature = "postgres")]
pub async fn pin_postgres(conn: &mut sqlx::PgConnection, table: &str) -> Result<String, LockError> {
    dialect::postgres::pin::tool(conn, table).await
}

/// Connects to the database named by `url` and returns the lock.
///
/// The scheme selects the database: `sqlite:` (the file is created if missing), `postgres:` /
/// `postgresql:`, `mysql:` / `mariadb:`. A malformed URL, an unknown scheme or a bad table name
/// is [`LockError::Config`]; a server that cannot be reached within
/// [`SqlOptions::connect_timeout`] is [`LockError::Unavailable`].
pub async fn connect(url: &str, options: SqlOptions) -> Result<SqlLock, LockError> {
    SqlStore::connect(url, options).await.map(StoreLock::new)
}

/// Connects a read-write lock client (docs/contract.md §5.2): the same URL, options and lease table name as
/// [`connect`], plus the tables `<table>_counters` and `<table>_holders` (created if missing).
pub async fn connect_rw(url: &str, options: SqlOptions) -> Result<SqlRwLock, LockError> {
    kinds::connect_rw(url, options).await
}

/// Connects a semaphore client (docs/contract.md §5.3): the same URL, options and tables as [`connect_rw`].
pub async fn connect_semaphore(url: &str, options: SqlOptions) -> Result<SqlSemaphore, LockError> {
    kinds::connect_semaphore(url, options).await
}
