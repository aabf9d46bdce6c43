//! After `dlock conformance` against a real deployment: deletes every row, key and znode the
//! run created. Every name the suite uses starts with the run's prefix
//! (`dlock-conformance-<hex>/`, see `cli::fixture`), so the clean-up removes exactly what
//! belongs to that prefix and nothing of anyone else's:
//!
//! - SQL: the rows of the lease table and of `<table>_counters` / `<table>_holders` whose name
//!   starts with the prefix;
//! - Redis and Redlock: on every server, the keys `<key_prefix>:{<escaped prefix>…` (found with
//!   `SCAN`, removed with `DEL`);
//! - ZooKeeper: the lock nodes `<root>/[rw~|sem~]<escaped prefix>…` with their children.
//!
//! - a registered backend: its provider's [`dlock::LockProvider::purge`].
//!
//! The fencing counters go too: no client will ever use these names again.

use dlock::{Client, Config, LockError, LockName, Scheme};

/// Deletes what the run with names under `prefix` left behind; how many rows, keys or znodes.
pub(crate) async fn purge(config: &Config, prefix: &str) -> Result<u64, LockError> {
    // The escaped form is how Redis keys and znodes spell the names.
    let escaped = LockName::new(prefix)?.escaped();
    match Scheme::of(&config.url)? {
        Scheme::Memory => Ok(0),
        Scheme::Registered(_) => Client::from_config(config).await?.provider().purge(&LockName::new(prefix)?).await,
        #[cfg(feature = "sql")]
        Scheme::Postgres | Scheme::Mysql | Scheme::Sqlite => sql(config, prefix).await,
        #[cfg(feature = "redis")]
        Scheme::Redis | Scheme::Redlock => redis(config, &escaped).await,
        #[cfg(feature = "zk")]
        Scheme::ZooKeeper => zk(config, &escaped).await,
        #[allow(unreachable_patterns)]
        other => Err(LockError::config(format!("this build cannot clean up a {other:?} deployment"))),
    }
}

/// A prefix holds only `[A-Za-z0-9/-]` (checked), so it is a literal in SQL `LIKE` and in
/// Redis `SCAN MATCH` patterns alike.
fn literal(prefix: &str) -> Result<&str, LockError> {
    if prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'/' || b == b'%') {
        Ok(prefix)
    } else {
        Err(LockError::config(format!("the clean-up prefix {prefix:?} is not a plain literal")))
    }
}

#[cfg(feature = "sql")]
async fn sql(config: &Config, prefix: &str) -> Result<u64, LockError> {
    let prefix = literal(prefix)?;
    if prefix.contains('%') {
        return Err(LockError::config("a SQL clean-up prefix must not contain '%'"));
    }
    let mut db = super::raw::Sql::connect(&config.url, config.sql.tls).await?;
    let table = &config.sql.table;
    let mut removed = 0;
    if let Some((schema, table)) = pin_postgres(&mut db, table).await? {
        for t in [table.clone(), format!("{table}_counters"), format!("{table}_holders")] {
            let quoted = format!("\"{schema}\".\"{t}\"");
            if db.text(&format!("SELECT to_regclass('{quoted}')::text")).await?.is_some() {
                removed += db.execute(&format!("DELETE FROM {quoted} WHERE name LIKE '{prefix}%'")).await?;
            }
        }
        return Ok(removed);
    }
    for t in [table.clone(), format!("{table}_counters"), format!("{table}_holders")] {
        if db.table_exists(&t).await? {
            removed += db.execute(&format!("DELETE FROM {} WHERE name LIKE '{prefix}%'", db.ident(&t))).await?;
        }
    }
    Ok(removed)
}

/// PostgreSQL: the session pinned as the lock's own are (`dlock::sql::pin_postgres`), and the
/// schema and name of the lease table; `None` for the other databases.
#[cfg(feature = "sql")]
async fn pin_postgres(db: &mut super::raw::Sql, table: &str) -> Result<Option<(String, String)>, LockError> {
    #[cfg(feature = "postgres")]
    if let super::raw::Sql::Postgres(c) = db {
        let qualified = dlock::sql::pin_postgres(c, table).await?;
        return Ok(qualified.split_once('.').map(|(s, t)| (s.to_owned(), t.to_owned())));
    }
    let _ = (db, table);
    Ok(None)
}

#[cfg(feature = "redis")]
async fn redis(config: &Config, escaped: &str) -> Result<u64, LockError> {
    let pattern = format!("{}:{{{}*", literal(&config.redis.key_prefix)?, literal(escaped)?);
    let mut removed = 0;
    // Behind Sentinel the keys are on the current primary (the replicas follow it).
    let urls = if super::raw::is_sentinel(&config.url) {
        vec![super::raw::sentinel_primary(config).await?]
    } else {
        super::raw::redis_urls(&config.url)?
    };
    for url in urls {
        let mut conn = super::raw::redis(&url, &config.redis_options()).await?;
        // A Redis Cluster: each master deletes its own keys, one key per DEL (keys of several
        // slots in one DEL are refused with CROSSSLOT); replicas follow their masters.
        let cluster = config.url.to_ascii_lowercase().starts_with("redis+cluster://");
        if cluster {
            let role: Vec<redis::Value> = super::raw::redis_query(&mut conn, &redis::cmd("ROLE")).await?;
            if !matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
                continue;
            }
        }
        let mut cursor = 0u64;
        loop {
            let scan = redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000).clone();
            let (next, keys): (u64, Vec<String>) = super::raw::redis_query(&mut conn, &scan).await?;
            if cluster {
                for key in &keys {
                    removed += super::raw::redis_query::<u64>(&mut conn, redis::cmd("DEL").arg(key)).await?;
                }
            } else if !keys.is_empty() {
                removed += super::raw::redis_query::<u64>(&mut conn, redis::cmd("DEL").arg(&keys)).await?;
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    Ok(removed)
}

#[cfg(feature = "zk")]
async fn zk(config: &Config, escaped: &str) -> Result<u64, LockError> {
    let (client, target) = super::raw::zk(&config.url).await?;
    let Some(children) = zk_step(&target.root, client.list_children(&target.root)).await? else { return Ok(0) };
    let mut removed = 0;
    for child in children {
        let bare = child.strip_prefix("rw~").or_else(|| child.strip_prefix("sem~")).unwrap_or(&child);
        if bare.starts_with(escaped) {
            removed += delete_tree(&client, &format!("{}/{child}", target.root)).await?;
        }
    }
    Ok(removed)
}

/// Deletes `path` and everything under it (children first); how many znodes.
#[cfg(feature = "zk")]
async fn delete_tree(client: &zookeeper_client::Client, path: &str) -> Result<u64, LockError> {
    let mut stack = vec![(path.to_owned(), false)];
    let mut removed = 0;
    while let Some((node, expanded)) = stack.pop() {
        // A node already gone (an ephemeral node whose session ended, a container the server
        // removed) is fine.
        if !expanded {
            let Some(children) = zk_step(&node, client.list_children(&node)).await? else { continue };
            stack.push((node.clone(), true));
            stack.extend(children.into_iter().map(|c| (format!("{node}/{c}"), false)));
        } else if zk_step(&node, client.delete(&node, None)).await?.is_some() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// One ZooKeeper request within the bound; `None` when the node does not exist.
#[cfg(feature = "zk")]
async fn zk_step<T>(
    node: &str,
    request: impl std::future::Future<Output = Result<T, zookeeper_client::Error>>,
) -> Result<Option<T>, LockError> {
    match tokio::time::timeout(super::raw::WAIT, request).await {
        Ok(Ok(v)) => Ok(Some(v)),
        Ok(Err(zookeeper_client::Error::NoNode)) => Ok(None),
        Ok(Err(e)) => Err(LockError::unavailable("zookeeper", format!("clean-up of {node}: {e}"))),
        Err(_) => Err(LockError::unavailable(
            "zookeeper",
            format!("clean-up of {node}: no answer within {:?}", super::raw::WAIT),
        )),
    }
}
