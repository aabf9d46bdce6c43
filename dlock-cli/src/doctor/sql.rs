//! SQL checks: durability of commits (PostgreSQL `synchronous_commit` and `fsync`, MySQL
//! `innodb_flush_log_at_trx_commit`), privileges on the lease tables, the connection budget and
//! the clock. Settings are read as this session sees them, so a per-role or per-URL override
//! (`?options=-c synchronous_commit=off`) is what gets checked.

use std::time::SystemTime;

use dlock::{Config, LockError};

use super::{clock_skew, Finding};
use crate::raw::Sql;

/// PostgreSQL statements name every function, operator and catalog with `pg_catalog` (and
/// casts use keyword type names): this session runs under the lock role's own `search_path`,
/// where a planted `numeric * integer` or `clock_timestamp()` would otherwise run, and lie.
pub(super) async fn checks(config: &Config) -> Result<Vec<Finding>, LockError> {
    let mut db = Sql::connect(&config.url, config.sql.tls).await?;
    let mut findings = Vec::new();
    match db {
        Sql::Postgres(_) => {
            findings.push(postgres_durability(&mut db).await);
            findings.push(privileges(&mut db, config).await);
            findings.push(connections(&mut db, config, 3).await);
            findings.push(
                clock(
                    &mut db,
                    "SELECT (extract(epoch from pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000)::bigint",
                )
                .await,
            );
        }
        Sql::Mysql(_) => {
            findings.push(mysql_durability(&mut db).await);
            findings.push(privileges(&mut db, config).await);
            findings.push(connections(&mut db, config, 2).await);
            findings.push(clock(&mut db, "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)").await);
        }
        Sql::Sqlite(_) => findings.push(Finding::ok(
            "sqlite",
            "a local file: locks exclude only processes on this machine that open the same file",
        )),
    }
    Ok(findings)
}

async fn postgres_durability(db: &mut Sql) -> Finding {
    const CHECK: &str = "synchronous_commit";
    let fsync = db.text("SHOW fsync").await;
    if let Ok(Some(off)) = &fsync {
        if off == "off" {
            return Finding::fail(
                "fsync",
                "fsync = off: a crash of the server can lose committed grants, so a fencing token is handed out twice",
                "set fsync = on in postgresql.conf",
            );
        }
    }
    match db.text("SHOW synchronous_commit").await {
        Ok(Some(v)) if v == "off" => Finding::fail(
            CHECK,
            "synchronous_commit = off in this session: a grant is acknowledged before it is on disk, so a crash \
             can forget it and grant the lock (and its fencing token) again",
            "remove the override (the URL's options=-c synchronous_commit=off, ALTER ROLE … RESET synchronous_commit, \
             ALTER DATABASE … RESET synchronous_commit) or set it to on",
        ),
        Ok(Some(v)) => Finding::ok(CHECK, format!("synchronous_commit = {v}: grants are durable when acknowledged")),
        Ok(None) => Finding::unknown(CHECK, "SHOW returned nothing", "run SHOW synchronous_commit as the lock user"),
        Err(e) => Finding::unknown(CHECK, e, "run SHOW synchronous_commit as the lock user"),
    }
}

async fn mysql_durability(db: &mut Sql) -> Finding {
    const CHECK: &str = "innodb_flush_log_at_trx_commit";
    match db.int("SELECT CAST(@@innodb_flush_log_at_trx_commit AS SIGNED)").await {
        Ok(Some(1)) => Finding::ok(CHECK, "1: every commit is flushed to disk before it is acknowledged"),
        Ok(Some(n)) => Finding::fail(
            CHECK,
            format!("{n}: the last second of commits can be lost in a crash, so a grant and its fencing token may be handed out twice"),
            "SET GLOBAL innodb_flush_log_at_trx_commit = 1 (and in my.cnf)",
        ),
        Ok(None) => Finding::unknown(CHECK, "no value", "run SELECT @@innodb_flush_log_at_trx_commit"),
        Err(e) => Finding::unknown(CHECK, e, "run SELECT @@innodb_flush_log_at_trx_commit"),
    }
}

/// SELECT, INSERT, UPDATE on the lease table (and DELETE too on the tables of read-write locks
/// and semaphores); CREATE where a table is missing.
async fn privileges(db: &mut Sql, config: &Config) -> Finding {
    const CHECK: &str = "table privileges";
    let table = &config.sql.table;
    let tables = [
        (table.clone(), &["SELECT", "INSERT", "UPDATE"][..]),
        (format!("{table}_counters"), &["SELECT", "INSERT", "UPDATE", "DELETE"][..]),
        (format!("{table}_holders"), &["SELECT", "INSERT", "UPDATE", "DELETE"][..]),
    ];
    let mut missing = Vec::new();
    for (t, needed) in &tables {
        match db.table_exists(t).await {
            Ok(true) => {}
            Ok(false) => {
                missing.push(format!("{t} does not exist (created on first use: needs CREATE)"));
                continue;
            }
            Err(e) => return Finding::unknown(CHECK, e, "check the lock user's grants by hand"),
        }
        for p in *needed {
            match has_privilege(db, t, p).await {
                Ok(true) => {}
                Ok(false) => missing.push(format!("{p} on {t}")),
                Err(e) => return Finding::unknown(CHECK, e, "check the lock user's grants by hand"),
            }
        }
    }
    let lacking: Vec<&String> = missing.iter().filter(|m| !m.contains("does not exist")).collect();
    if lacking.is_empty() {
        let note = if missing.is_empty() { String::new() } else { format!("; {}", missing.join("; ")) };
        Finding::ok(CHECK, format!("the lock user may read and write the lease tables{note}"))
    } else {
        Finding::fail(
            CHECK,
            format!("the lock user lacks {}", lacking.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")),
            "GRANT the missing privileges to the lock user",
        )
    }
}

async fn has_privilege(db: &mut Sql, table: &str, privilege: &str) -> Result<bool, LockError> {
    let sql = match db {
        Sql::Postgres(_) => {
            format!("SELECT CASE WHEN pg_catalog.has_table_privilege('\"{table}\"', '{privilege}') THEN 1 ELSE 0 END::bigint")
        }
        // The user's grants at any level (global, database, table) that cover this table.
        _ => format!(
            "SELECT CAST(COUNT(*) AS SIGNED) FROM (\
             SELECT privilege_type FROM information_schema.user_privileges \
               WHERE grantee = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') \
             UNION ALL SELECT privilege_type FROM information_schema.schema_privileges \
               WHERE grantee = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') \
                 AND table_schema = DATABASE() \
             UNION ALL SELECT privilege_type FROM information_schema.table_privileges \
               WHERE grantee = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') \
                 AND table_schema = DATABASE() AND table_name = '{table}') p \
             WHERE privilege_type = '{privilege}'"
        ),
    };
    Ok(db.int(&sql).await?.unwrap_or(0) > 0)
}

/// The server's connection limit against what one lock client opens: `max_connections` of the
/// pool, two kept for renew and release, and (PostgreSQL) one for LISTEN.
async fn connections(db: &mut Sql, config: &Config, extra: u32) -> Finding {
    const CHECK: &str = "connection budget";
    let per_client = u64::from(config.sql.max_connections + extra);
    let (max, used) = match db {
        Sql::Postgres(_) => (
            db.int(
                "SELECT pg_catalog.current_setting('max_connections')::bigint OPERATOR(pg_catalog.-) \
                 pg_catalog.current_setting('superuser_reserved_connections')::bigint",
            )
            .await,
            db.int(
                "SELECT pg_catalog.count(*)::bigint FROM pg_catalog.pg_stat_activity \
                 WHERE backend_type OPERATOR(pg_catalog.=) 'client backend'",
            )
            .await,
        ),
        _ => (
            db.int("SELECT CAST(@@max_connections AS SIGNED)").await,
            db.int("SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.processlist").await,
        ),
    };
    let (max, used) = match (max, used) {
        (Ok(Some(m)), Ok(Some(u))) => (m.max(0) as u64, u.max(0) as u64),
        (Err(e), _) | (_, Err(e)) => {
            return Finding::unknown(CHECK, e, "compare max_connections with your clients by hand")
        }
        _ => return Finding::unknown(CHECK, "no value", "compare max_connections with your clients by hand"),
    };
    let room = max.saturating_sub(used);
    let detail = format!(
        "one lock client opens up to {per_client} connections ([sql] max_connections = {} + {extra}); the server \
         allows {max}, {used} in use now: room for {} more clients",
        config.sql.max_connections,
        room / per_client.max(1)
    );
    if room < per_client {
        Finding::fail(CHECK, detail, "raise the server's max_connections or lower [sql] max_connections")
    } else if room < per_client * 4 {
        Finding::warn(CHECK, detail, "raise the server's max_connections or lower [sql] max_connections")
    } else {
        Finding::ok(CHECK, detail)
    }
}

async fn clock(db: &mut Sql, sql: &str) -> Finding {
    let before = SystemTime::now();
    let now = db.int(sql).await;
    let after = SystemTime::now();
    match now {
        Ok(Some(ms)) => clock_skew(db.label(), ms, before, after),
        Ok(None) => Finding::unknown("clock skew", "no value", "compare the clocks by hand"),
        Err(e) => Finding::unknown("clock skew", e, "compare the clocks by hand"),
    }
}
