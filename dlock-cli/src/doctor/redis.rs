//! Redis and Redlock checks, on every server of the URL: the eviction policy, persistence,
//! script support, the connection limit and the clock. (ACL permissions are checked by the lock
//! client's own start-up, see [`super::client_connects`].) On a Sentinel deployment the checks
//! run on the current primary; on a Sentinel or Cluster deployment every node's clock offset is
//! measured too, because after a failover the promoted replica judges every lease by its own
//! clock (docs/contract.md §3, `RedisOptions::max_clock_offset`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlock::redis::RedisOptions;
use dlock::{Config, LockError};
use redis::aio::MultiplexedConnection;

use super::{clock_skew, Finding};
use crate::raw;

pub(super) async fn checks(config: &Config) -> Result<Vec<Finding>, LockError> {
    let deployment = Deployment::of(&config.url);
    let urls = match deployment {
        Deployment::Sentinel => vec![raw::sentinel_primary(config).await?],
        _ => raw::redis_urls(&config.url)?,
    };
    let mut findings = server_checks(&urls, &config.redis_options()).await;
    if deployment != Deployment::Servers {
        findings.extend(node_clocks(config, deployment, &urls).await);
    }
    Ok(findings)
}

/// What the URL names, as far as clocks go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deployment {
    /// Servers that each judge their own keys (one Redis, Redlock's masters).
    Servers,
    /// A primary and its replicas behind Sentinels.
    Sentinel,
    /// A Redis Cluster's masters and replicas.
    Cluster,
}

impl Deployment {
    fn of(url: &str) -> Deployment {
        let scheme = url.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase();
        match scheme.as_str() {
            "redis+sentinel" | "rediss+sentinel" => Deployment::Sentinel,
            "redis+cluster" | "rediss+cluster" => Deployment::Cluster,
            _ => Deployment::Servers,
        }
    }
}

async fn server_checks(urls: &[String], options: &RedisOptions) -> Vec<Finding> {
    let several = urls.len() > 1;
    let mut findings = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        // Each master of a Redlock URL is its own server; name it in every finding.
        let server = if several { format!("master {}", i + 1) } else { "redis".to_owned() };
        let mut conn = match raw::redis(url, options).await {
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
    findings
}

/// One reading of a node's clock against this machine's: the node's time minus the middle of
/// the round trip, and half the round trip (how far off the reading may be), in µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reading {
    pub(super) offset_us: i64,
    pub(super) half_rtt_us: i64,
}

/// `TIME` three times; the reading with the shortest round trip (the least uncertain).
async fn read_clock(conn: &mut MultiplexedConnection) -> Result<Reading, LockError> {
    let us = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(0));
    let mut best: Option<Reading> = None;
    for _ in 0..3 {
        let before = SystemTime::now();
        let (s, micros): (i64, i64) = raw::redis_query(conn, &redis::cmd("TIME")).await?;
        let after = SystemTime::now();
        let (b, a) = (us(before), us(after));
        let half = (a - b).max(0) / 2;
        let reading =
            Reading { offset_us: s.saturating_mul(1_000_000).saturating_add(micros) - (b + half), half_rtt_us: half };
        if best.is_none_or(|r| reading.half_rtt_us < r.half_rtt_us) {
            best = Some(reading);
        }
    }
    best.ok_or_else(|| LockError::backend("dlock", "no TIME reading"))
}

fn ms(us: i64) -> String {
    format!("{:+.1} ms", us as f64 / 1000.0)
}

const CLOCK_FIX: &str = "run NTP (chrony, systemd-timesyncd) on every node: after a failover the new primary judges \
     every lease by its own clock, so the nodes' clocks must agree within [redis] max_clock_offset (or raise it)";

/// One node's clock offset against this machine's: a warning when it exceeds the allowance
/// (`RedisOptions::max_clock_offset`), since then the nodes cannot all be within it of each other
/// unless this machine's clock is the one that is off (see [`clock_spread`]).
pub(super) fn node_offset(node: &str, r: Reading, allowance: Duration) -> Finding {
    let check = format!("clock offset: {node}");
    let detail = format!(
        "{} from this machine's clock (±{:.1} ms round trip), allowance {} ms",
        ms(r.offset_us),
        r.half_rtt_us as f64 / 1000.0,
        allowance.as_millis()
    );
    if exceeds(r.offset_us.unsigned_abs(), allowance) {
        Finding::warn(&check, detail, CLOCK_FIX)
    } else {
        Finding::ok(&check, detail)
    }
}

/// How far apart the nodes' clocks are (the largest offset minus the smallest): what the lease
/// safety after a failover depends on, whatever this machine's clock says.
pub(super) fn clock_spread(readings: &[(String, Reading)], allowance: Duration) -> Option<Finding> {
    const CHECK: &str = "clock spread";
    let lo = readings.iter().min_by_key(|(_, r)| r.offset_us)?;
    let hi = readings.iter().max_by_key(|(_, r)| r.offset_us)?;
    let spread = hi.1.offset_us - lo.1.offset_us;
    let detail = format!(
        "the {} nodes' clocks span {:.1} ms ({} to {}), allowance {} ms",
        readings.len(),
        spread as f64 / 1000.0,
        lo.0,
        hi.0,
        allowance.as_millis()
    );
    Some(if exceeds(spread.unsigned_abs(), allowance) {
        Finding::warn(CHECK, detail, CLOCK_FIX)
    } else {
        Finding::ok(CHECK, detail)
    })
}

/// The threshold decision: more than the allowance (in µs) is a warning.
pub(super) fn exceeds(us: u64, allowance: Duration) -> bool {
    u128::from(us) > allowance.as_micros()
}

/// Every node of a Sentinel or Cluster deployment with its clock offset, then their spread.
async fn node_clocks(config: &Config, deployment: Deployment, urls: &[String]) -> Vec<Finding> {
    let options = config.redis_options();
    let allowance = options.max_clock_offset;
    let nodes = match deployment {
        Deployment::Sentinel => sentinel_nodes(&urls[..1], &options).await,
        _ => cluster_nodes(urls, &options).await,
    };
    let nodes = match nodes {
        Ok(n) => n,
        Err(e) => {
            return vec![Finding::unknown(
                "clock offsets",
                format!("cannot list the deployment's nodes: {e}"),
                "allow INFO (Sentinel) or CLUSTER NODES (Cluster) for this check",
            )]
        }
    };
    let mut findings = Vec::new();
    let mut readings = Vec::new();
    for (role, addr) in nodes {
        let node = format!("{role} {addr}");
        let reachable = options.cluster_node_map.get(&addr).cloned().unwrap_or_else(|| addr.clone());
        let reading = async {
            let mut conn = raw::redis(&node_url(&urls[0], &reachable), &options).await?;
            read_clock(&mut conn).await
        };
        match reading.await {
            Ok(r) => {
                findings.push(node_offset(&node, r, allowance));
                readings.push((node, r));
            }
            Err(e) => findings.push(Finding::unknown(
                &format!("clock offset: {node}"),
                e,
                "make the node reachable from here (or map its address with [redis] cluster_node_map)",
            )),
        }
    }
    findings.extend(clock_spread(&readings, allowance));
    findings
}

/// `template` (a `redis://[auth@]host:port[/db]` URL) pointed at `addr`.
fn node_url(template: &str, addr: &str) -> String {
    let (scheme, rest) = template.split_once("://").unwrap_or(("redis", template));
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let db = hosts.find('/').map_or("", |i| &hosts[i..]);
    format!("{scheme}://{auth}{addr}{db}")
}

/// The URL's `host:port`.
fn url_addr(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    hosts.split('/').next().unwrap_or_default().to_owned()
}

/// The primary and the replicas it reports (`INFO replication`, as they announce themselves).
async fn sentinel_nodes(primary: &[String], options: &RedisOptions) -> Result<Vec<(String, String)>, LockError> {
    let url = primary.first().ok_or_else(|| LockError::config("no primary"))?;
    let mut conn = raw::redis(url, options).await?;
    let info: String = raw::redis_query(&mut conn, redis::cmd("INFO").arg("replication")).await?;
    let mut nodes = vec![("primary".to_owned(), url_addr(url))];
    nodes.extend(replicas_of(&info).into_iter().map(|a| ("replica".to_owned(), a)));
    Ok(nodes)
}

/// `slaveN:ip=…,port=…,…` lines of `INFO replication`.
fn replicas_of(info: &str) -> Vec<String> {
    info.lines()
        .filter(|l| l.strip_prefix("slave").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit())))
        .filter_map(|l| {
            let fields = l.split_once(':')?.1;
            let get = |k: &str| fields.split(',').find_map(|f| f.strip_prefix(k)?.strip_prefix('='));
            let (ip, port) = (get("ip")?, get("port")?);
            Some(if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") })
        })
        .collect()
}

/// Every master and replica that the first answering seed lists (`CLUSTER NODES`).
async fn cluster_nodes(seeds: &[String], options: &RedisOptions) -> Result<Vec<(String, String)>, LockError> {
    let mut last = LockError::config("the redis+cluster URL names no nodes");
    for seed in seeds {
        let listed = async {
            let mut conn = raw::redis(seed, options).await?;
            raw::redis_query::<String>(&mut conn, redis::cmd("CLUSTER").arg("NODES")).await
        };
        match listed.await {
            Ok(text) => return Ok(parse_cluster_nodes(&text, &url_addr(seed))),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// `<id> <ip:port@bus[,hostname]> <flags> …` lines; a node without an address yet is skipped,
/// one that does not know its own IP (`:port`) is the seed that answered.
fn parse_cluster_nodes(text: &str, seed: &str) -> Vec<(String, String)> {
    let mut nodes: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (addr, flags) = (f.nth(1)?, f.next()?);
            let flags: Vec<&str> = flags.split(',').collect();
            if flags.iter().any(|f| matches!(*f, "noaddr" | "handshake")) {
                return None;
            }
            let role = if flags.contains(&"master") { "master" } else { "replica" };
            let addr = addr.split(['@', ',']).next()?;
            let addr = if addr.starts_with(':') { seed.to_owned() } else { addr.to_owned() };
            Some((role.to_owned(), addr))
        })
        .collect();
    nodes.sort();
    nodes
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

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    const ALLOWANCE: Duration = Duration::from_millis(50);

    fn reading(offset_ms: i64) -> Reading {
        Reading { offset_us: offset_ms * 1000, half_rtt_us: 300 }
    }

    #[test]
    fn an_offset_over_the_allowance_is_a_warning() {
        assert!(!exceeds(50_000, ALLOWANCE), "exactly the allowance is within it");
        assert!(exceeds(50_001, ALLOWANCE));
        let ok = node_offset("replica 10.0.0.2:6379", reading(-49), ALLOWANCE);
        assert_eq!((ok.status, ok.check.as_str()), (Status::Ok, "clock offset: replica 10.0.0.2:6379"), "{ok:?}");
        assert!(ok.detail.starts_with("-49.0 ms"), "{ok:?}");
        for off in [51, -51, 2000] {
            let f = node_offset("primary 10.0.0.1:6379", reading(off), ALLOWANCE);
            assert_eq!(f.status, Status::Warn, "{f:?}");
            assert!(f.fix.contains("max_clock_offset"), "{f:?}");
        }
    }

    #[test]
    fn the_spread_between_nodes_counts_not_this_machines_clock() {
        // This machine is 1 s off, the nodes agree within 20 ms: each line warns, the spread is ok.
        let agree = [("a".to_owned(), reading(1000)), ("b".to_owned(), reading(1020))];
        assert_eq!(clock_spread(&agree, ALLOWANCE).expect("a finding").status, Status::Ok);
        let apart = [("a".to_owned(), reading(-30)), ("b".to_owned(), reading(30))];
        let f = clock_spread(&apart, ALLOWANCE).expect("a finding");
        assert_eq!(f.status, Status::Warn, "{f:?}");
        assert!(f.detail.contains("60.0 ms") && f.detail.contains("a to b"), "{f:?}");
        assert!(clock_spread(&[], ALLOWANCE).is_none());
    }

    #[test]
    fn nodes_are_read_from_info_replication_and_cluster_nodes() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=7001,state=online,offset=1,lag=0\r\n\
                    slave1:ip=::1,port=7002,state=online,offset=1,lag=0\r\nmaster_replid:x\r\n";
        assert_eq!(replicas_of(info), ["127.0.0.1:7001", "[::1]:7002"]);
        let nodes = "a1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                     b2 10.0.0.2:7001@17001,host-b slave a1 0 0 1 connected\n\
                     c3 :7002@17002 myself,master - 0 0 2 connected\n\
                     d4 10.0.0.4:7003@17003 handshake - 0 0 0 connected\n";
        assert_eq!(
            parse_cluster_nodes(nodes, "127.0.0.1:7002"),
            [
                ("master".to_owned(), "10.0.0.1:7000".to_owned()),
                ("master".to_owned(), "127.0.0.1:7002".to_owned()),
                ("replica".to_owned(), "10.0.0.2:7001".to_owned())
            ]
        );
        assert_eq!(node_url("redis://u:p@10.0.0.1:7000/2", "10.0.0.9:1"), "redis://u:p@10.0.0.9:1/2");
        assert_eq!(url_addr("rediss://u:p@h:1/0"), "h:1");
    }
}
