//! Redis and Redlock checks, on every server of the URL: the eviction policy, persistence,
//! script support, the connection limit and the clock. (ACL permissions are checked by the lock
//! client's own start-up, see [`super::client_connects`].)

use std::time::SystemTime;

use dlock::{Config, LockError};
use redis::aio::MultiplexedConnection;

use super::{clock_skew, Finding};
use crate::cli::raw;

pub(super) async fn checks(config: &Config) -> Result<Vec<Finding>, LockError> {
    let urls = raw::redis_urls(&config.url)?;
    let several = urls.len() > 1;
    let mut findings = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        // Each master of a Redlock URL is its own server; name it in every finding.
        let server = if several { format!("master {}", i + 1) } else { "redis".to_owned() };
        let mut conn = match raw::redis(url).await {
            Ok(c) => c,
            Err(e) => {
                findings.push(Finding::fail(&format!("{server}: reachable"), e.to_string(), "start it or fix the URL"));
                continue;
            }
        };
        let mut server_findings = vec![
            eviction(&mut conn).await,
            persistence(&mut conn).await,
            scripts(&mut conn).await,
            connections(&mut conn).await,
            clock(&mut conn, &server).await,
        ];
        if several {
            for f in &mut server_findings {
                f.check = format!("{server}: {}", f.check);
            }
        }
        findings.extend(server_findings);
    }
    Ok(findings)
}

/// `CONFIG GET key` as text (`None`: no such key or no permission to read it).
async fn config_get(conn: &mut MultiplexedConnection, key: &str) -> Result<Option<String>, LockError> {
    let pairs: Vec<String> = raw::redis_query(conn, redis::cmd("CONFIG").arg("GET").arg(key)).await?;
    Ok(pairs.get(1).cloned())
}

const CANNOT_READ_CONFIG: &str =
    "allow CONFIG GET for this check (ACL +config|get), or check the setting in the server's redis.conf";

/// Anything but `noeviction` lets Redis delete a live lease (or a fencing counter) under memory
/// pressure: the lock is then granted twice, or a token handed out again.
async fn eviction(conn: &mut MultiplexedConnection) -> Finding {
    const CHECK: &str = "maxmemory-policy";
    match config_get(conn, CHECK).await {
        Ok(Some(p)) if p == "noeviction" => Finding::ok(CHECK, "noeviction: Redis never deletes a lease to free memory"),
        Ok(Some(p)) => Finding::fail(
            CHECK,
            format!("{p}: under memory pressure Redis may evict a live lease or a fencing counter, so a lock is granted twice"),
            "CONFIG SET maxmemory-policy noeviction (and put it in redis.conf); keep locks on a Redis of their own",
        ),
        Ok(None) => Finding::unknown(CHECK, "CONFIG GET returned nothing", CANNOT_READ_CONFIG),
        Err(e) => Finding::unknown(CHECK, e, CANNOT_READ_CONFIG),
    }
}

/// Without persistence a restart forgets every lease; dlock then waits `restart_quiet_period`
/// before granting, which is safe but stalls every lock for that long.
async fn persistence(conn: &mut MultiplexedConnection) -> Finding {
    const CHECK: &str = "persistence";
    let (aof, save, fsync) = match (
        config_get(conn, "appendonly").await,
        config_get(conn, "save").await,
        config_get(conn, "appendfsync").await,
    ) {
        (Ok(a), Ok(s), Ok(f)) => (a.unwrap_or_default(), s.unwrap_or_default(), f.unwrap_or_default()),
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => return Finding::unknown(CHECK, e, CANNOT_READ_CONFIG),
    };
    match (aof.as_str(), fsync.as_str()) {
        ("yes", "always") => {
            Finding::ok(CHECK, "AOF with appendfsync always: no acknowledged grant is lost in a crash")
        }
        ("yes", other) => Finding::warn(
            CHECK,
            format!("AOF with appendfsync {other}: a crash can lose the last second of grants and fencing counters"),
            "keep restart_quiet_period at its default (max_ttl) so dlock waits out forgotten leases after a restart, \
             or set appendfsync always",
        ),
        _ if !save.trim().is_empty() => Finding::warn(
            CHECK,
            format!("RDB snapshots only (save {save:?}): a restart forgets every grant since the last snapshot"),
            "CONFIG SET appendonly yes; until then dlock waits restart_quiet_period after each restart",
        ),
        _ => Finding::warn(
            CHECK,
            "no persistence (appendonly no, save \"\"): a restart forgets every lease and fencing counter",
            "CONFIG SET appendonly yes; until then dlock waits restart_quiet_period after each restart",
        ),
    }
}

/// dlock's grant, renewal and release are Lua scripts.
async fn scripts(conn: &mut MultiplexedConnection) -> Finding {
    const CHECK: &str = "scripts";
    match raw::redis_query::<i64>(conn, redis::cmd("EVAL").arg("return 1").arg(0)).await {
        Ok(1) => Finding::ok(CHECK, "EVAL runs Lua scripts"),
        Ok(n) => Finding::fail(CHECK, format!("EVAL \"return 1\" answered {n}"), "use a Redis that runs Lua scripts"),
        Err(e) => Finding::fail(
            CHECK,
            format!("EVAL failed: {e}"),
            "dlock needs Lua scripting: allow EVAL/EVALSHA/SCRIPT for its user (+@scripting) and do not rename \
             or disable them",
        ),
    }
}

/// `maxclients` against the clients connected now: each lock client holds one connection, plus
/// one for pub/sub while it waits.
async fn connections(conn: &mut MultiplexedConnection) -> Finding {
    const CHECK: &str = "connections";
    let max = match config_get(conn, "maxclients").await {
        Ok(Some(m)) => m.parse::<u64>().unwrap_or(0),
        Ok(None) => return Finding::unknown(CHECK, "maxclients unreadable", CANNOT_READ_CONFIG),
        Err(e) => return Finding::unknown(CHECK, e, CANNOT_READ_CONFIG),
    };
    let info: String = match raw::redis_query(conn, redis::cmd("INFO").arg("clients")).await {
        Ok(i) => i,
        Err(e) => return Finding::unknown(CHECK, e, "allow INFO for this check (ACL +info)"),
    };
    let connected = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let detail = format!(
        "{connected} of maxclients {max} connected; each lock client uses 1 connection, 2 while it waits for a lock"
    );
    if max > 0 && connected * 10 >= max * 8 {
        Finding::warn(CHECK, detail, "raise maxclients or share lock clients within each process")
    } else {
        Finding::ok(CHECK, detail)
    }
}

async fn clock(conn: &mut MultiplexedConnection, server: &str) -> Finding {
    let before = SystemTime::now();
    let time: Result<(i64, i64), _> = raw::redis_query(conn, &redis::cmd("TIME")).await;
    let after = SystemTime::now();
    match time {
        Ok((s, us)) => clock_skew(server, s * 1000 + us / 1000, before, after),
        Err(e) => Finding::unknown("clock skew", e, "allow TIME for this check (ACL +time)"),
    }
}
