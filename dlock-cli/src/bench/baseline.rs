//! The `baseline` case: the least the server must do for one acquire + release, with the client
//! library the backend itself uses, so `uncontended / baseline` is what dlock adds on top.
//!
//! - Redis: `SET key owner NX PX ttl` + an owner-checked scripted delete (`EVALSHA`).
//! - Redlock: the same on every master, in parallel.
//! - PostgreSQL, MySQL/MariaDB, SQLite: one upsert that takes a free row and bumps its fence,
//!   one owner-checked update that frees it (sqlx, one connection), in a table made for the run
//!   and dropped after it: `CREATE TABLE` of a new name, never a table that exists, which someone
//!   else may have made first with a trigger that runs as the bench's user.
//! - ZooKeeper: create an ephemeral node, delete it.
//! - etcd: a transaction that puts a key if it does not exist (`create_revision == 0`), then a
//!   delete of it, on the connection of a `lock_etcd` client (same endpoints, TLS, credentials,
//!   under the URL's key prefix).

use std::time::Duration;

use dlock::{LockError, Scheme};
use tokio::time::Instant;

use super::cases::Plan;
use super::turns::Schedule;
use super::{from_latencies, CaseResult};

/// Runs the baseline loop for the plan's backend, on `schedule`.
pub(crate) async fn run(plan: &Plan, schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    let url = plan.config.url.as_str();
    match Scheme::of(url)? {
        Scheme::Redis => redis_baseline(std::slice::from_ref(&url.to_owned()), plan, schedule).await,
        Scheme::Redlock => redis_baseline(&redlock_masters(url)?, plan, schedule).await,
        Scheme::Postgres | Scheme::Mysql | Scheme::Sqlite => sql_baseline(url, plan, schedule).await,
        Scheme::ZooKeeper => zk_baseline(url, schedule).await,
        #[cfg(feature = "etcd")]
        Scheme::Registered("etcd") => Box::pin(etcd_baseline(plan, schedule)).await,
        Scheme::Registered(name) => Ok(CaseResult {
            name: "baseline".into(),
            note: Some(format!("no baseline: dlock has no client-library loop for the registered backend {name:?}")),
            ..Default::default()
        }),
        _ => Ok(CaseResult {
            name: "baseline".into(),
            note: Some("no server: the memory backend has no baseline".into()),
            ..Default::default()
        }),
    }
}

/// Times `op` back to back for the schedule's duration.
async fn timed<F, Fut>(mut schedule: Schedule<'_>, mut op: F) -> Result<CaseResult, LockError>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), LockError>>,
{
    let (mut lat, mut errors, mut i) = (Vec::new(), 0u64, 0u64);
    while schedule.next().await {
        i += 1;
        let t = Instant::now();
        match op(i).await {
            Ok(()) => lat.push(t.elapsed()),
            Err(e) if lat.is_empty() && errors == 0 => return Err(e),
            Err(_) => errors += 1,
        }
    }
    let mut r = from_latencies("baseline", lat, schedule.elapsed(), 1);
    r.errors = errors;
    Ok(r)
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(feature = "redis")]
fn redlock_masters(url: &str) -> Result<Vec<String>, LockError> {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or_default();
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let hosts = hosts.split(['/', '?']).next().unwrap_or_default();
    let masters: Vec<String> =
        hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{auth}{h}")).collect();
    if masters.is_empty() {
        return Err(LockError::config("the redlock URL names no masters"));
    }
    Ok(masters)
}

#[cfg(not(feature = "redis"))]
fn redlock_masters(_url: &str) -> Result<Vec<String>, LockError> {
    Err(LockError::config("dlock was built without the redis feature"))
}

#[cfg(feature = "redis")]
async fn redis_baseline(urls: &[String], plan: &Plan, schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    let err = |e: redis::RedisError| LockError::backend("redis", e);
    let mut conns = Vec::new();
    for url in urls {
        let client = redis::Client::open(url.as_str()).map_err(err)?;
        conns.push(client.get_multiplexed_async_connection().await.map_err(err)?);
    }
    let release = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
    );
    let key = format!("{}/baseline", plan.run_id);
    let (ttl, owner) = (ttl_ms(plan.ttl), format!("baseline-{}", std::process::id()));
    timed(schedule, |_| {
        let (conns, key, owner, release) = (conns.clone(), key.clone(), owner.clone(), release.clone());
        async move {
            let attempts = conns.into_iter().map(|mut c| {
                let (key, owner, release) = (key.clone(), owner.clone(), release.clone());
                async move {
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg(&owner)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl)
                        .query_async(&mut c)
                        .await
                        .map_err(err)?;
                    if set.is_none() {
                        return Err(LockError::unavailable("redis", "the baseline key was taken"));
                    }
                    let _: i64 = release.key(&key).arg(&owner).invoke_async(&mut c).await.map_err(err)?;
                    Ok(())
                }
            });
            futures::future::try_join_all(attempts).await.map(|_| ())
        }
    })
    .await
}

#[cfg(not(feature = "redis"))]
async fn redis_baseline(_urls: &[String], _plan: &Plan, _schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    Err(LockError::config("dlock was built without the redis feature"))
}

/// One dialect's baseline statements: the table, one upsert that takes a free row and bumps its
/// fence, one owner-checked update that frees it (binds: name, owner[, ttl in ms]). `{t}` is the
/// run's table.
#[cfg(feature = "sql")]
struct SqlText {
    create: &'static str,
    acquire: &'static str,
    release: &'static str,
}

#[cfg(feature = "sql")]
const POSTGRES: SqlText = SqlText {
    create: "CREATE TABLE {t} (name TEXT PRIMARY KEY, owner TEXT, \
             fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)",
    acquire: "INSERT INTO {t} AS t (name, owner, fence, expires_at) \
              VALUES ($1, $2, 1, (extract(epoch from clock_timestamp()) * 1000)::bigint + $3) \
              ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, fence = t.fence + 1, \
              expires_at = excluded.expires_at \
              WHERE t.owner IS NULL OR t.expires_at <= (extract(epoch from clock_timestamp()) * 1000)::bigint \
              RETURNING fence",
    release: "UPDATE {t} SET owner = NULL WHERE name = $1 AND owner = $2",
};

// One client: no race to guard, so the simplest upsert is the floor.
#[cfg(feature = "sql")]
const MYSQL: SqlText = SqlText {
    create: "CREATE TABLE {t} (name VARCHAR(255) PRIMARY KEY, owner VARCHAR(64), \
             fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)",
    acquire: "INSERT INTO {t} (name, owner, fence, expires_at) \
              VALUES (?, ?, 1, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + ?) \
              ON DUPLICATE KEY UPDATE \
              fence = IF(owner IS NULL, fence + 1, fence), \
              owner = IF(owner IS NULL, VALUES(owner), owner)",
    release: "UPDATE {t} SET owner = NULL WHERE name = ? AND owner = ?",
};

#[cfg(feature = "sql")]
const SQLITE: SqlText = SqlText {
    create: "CREATE TABLE {t} (name TEXT PRIMARY KEY, owner TEXT, \
             fence INTEGER NOT NULL, expires_at INTEGER NOT NULL)",
    acquire: "INSERT INTO {t} AS t (name, owner, fence, expires_at) \
              VALUES (?1, ?2, 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?3) \
              ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, fence = t.fence + 1, \
              expires_at = excluded.expires_at \
              WHERE t.owner IS NULL OR t.expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER) \
              RETURNING fence",
    release: "UPDATE {t} SET owner = NULL WHERE name = ?1 AND owner = ?2",
};

#[cfg(feature = "sql")]
async fn sql_baseline(url: &str, plan: &Plan, schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    use sqlx::Connection;
    let err = |e: sqlx::Error| LockError::backend("sql", e);
    match Scheme::of(url)? {
        Scheme::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await.map_err(err)?;
            // Pinned as the lock's own sessions are: the same name resolution, durable commits.
            let schema = dlock::sql::pin_postgres(&mut c, "dlock_bench_baseline").await?;
            let schema = schema.split_once('.').map(|(s, _)| format!("{s}."));
            sql_loop::<sqlx::Postgres>(c, &POSTGRES, plan, schedule, schema.as_deref().unwrap_or_default()).await
        }
        Scheme::Mysql => {
            let c = sqlx::MySqlConnection::connect(url).await.map_err(err)?;
            sql_loop::<sqlx::MySql>(c, &MYSQL, plan, schedule, "").await
        }
        _ => {
            let mut c = sqlx::SqliteConnection::connect(url).await.map_err(err)?;
            sqlx::query("PRAGMA journal_mode = WAL").execute(&mut c).await.map_err(err)?;
            sql_loop::<sqlx::Sqlite>(c, &SQLITE, plan, schedule, "").await
        }
    }
}

/// The baseline loop on one connection of any of the three databases; `schema`: the run's
/// table's schema with its dot, or empty.
#[cfg(feature = "sql")]
async fn sql_loop<DB>(
    mut c: DB::Connection,
    sql: &SqlText,
    plan: &Plan,
    schedule: Schedule<'_>,
    schema: &str,
) -> Result<CaseResult, LockError>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    let err = |e: sqlx::Error| LockError::backend("sql", e);
    // A new name each run, created without IF NOT EXISTS: a table that is already there (made
    // first by someone else, perhaps with a trigger) is an error, never used.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let table = format!("{schema}dlock_bench_baseline_{}_{nanos:08x}", std::process::id());
    let text = |s: &str| sqlx::AssertSqlSafe(s.replace("{t}", &table));
    let (acquire, release) = (sql.acquire.replace("{t}", &table), sql.release.replace("{t}", &table));
    sqlx::query::<DB>(text(sql.create)).execute(&mut c).await.map_err(|e| {
        LockError::config(format!(
            "dlock bench cannot create its baseline table {table} ({e}); it needs CREATE and DROP on the database"
        ))
    })?;
    let name = format!("{}/baseline", plan.run_id);
    let owner = format!("baseline-{}", std::process::id());
    let ttl = i64::try_from(ttl_ms(plan.ttl)).unwrap_or(i64::MAX);
    let c = tokio::sync::Mutex::new(c);
    let result = timed(schedule, |_| {
        let (c, name, owner) = (&c, name.as_str(), owner.as_str());
        let (acquire, release) = (acquire.as_str(), release.as_str());
        async move {
            let mut c = c.lock().await;
            let q = sqlx::query::<DB>(sqlx::AssertSqlSafe(acquire));
            q.bind(name).bind(owner).bind(ttl).execute(&mut *c).await.map_err(err)?;
            sqlx::query::<DB>(sqlx::AssertSqlSafe(release))
                .bind(name)
                .bind(owner)
                .execute(&mut *c)
                .await
                .map_err(err)?;
            Ok(())
        }
    })
    .await;
    let dropped = sqlx::query::<DB>(text("DROP TABLE {t}")).execute(&mut *c.lock().await).await;
    if let Err(e) = dropped {
        tracing::warn!("dlock bench could not drop its baseline table {table}: {e}; drop it by hand");
    }
    result
}

#[cfg(not(feature = "sql"))]
async fn sql_baseline(_url: &str, _plan: &Plan, _schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    Err(LockError::config("dlock was built without the SQL features"))
}

#[cfg(feature = "zk")]
async fn zk_baseline(url: &str, schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    use zookeeper_client::{Acls, Client, CreateMode};
    let err = |e: zookeeper_client::Error| LockError::backend("zookeeper", e);
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or_default();
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((a, r)) => (Some(a.to_owned()), r),
        None => (None, rest),
    };
    let hosts = rest.split(['/', '?']).next().unwrap_or_default();
    let mut connector = Client::connector();
    connector = connector.with_session_timeout(Duration::from_secs(10));
    if let Some(auth) = auth {
        connector = connector.with_auth("digest", auth.as_bytes());
    }
    let client = tokio::time::timeout(Duration::from_secs(10), connector.connect(hosts))
        .await
        .map_err(|_| LockError::unavailable("zookeeper", "no session within 10s"))?
        .map_err(err)?;
    let path = format!("/dlock-bench-baseline-{}", std::process::id());
    let mode = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    timed(schedule, |_| {
        let (client, path, mode) = (&client, path.clone(), &mode);
        async move {
            client.create(&path, &[], mode).await.map_err(err)?;
            client.delete(&path, None).await.map_err(err)?;
            Ok(())
        }
    })
    .await
}

#[cfg(not(feature = "zk"))]
async fn zk_baseline(_url: &str, _schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    Err(LockError::config("dlock was built without the zk feature"))
}

#[cfg(feature = "etcd")]
async fn etcd_baseline(plan: &Plan, schedule: Schedule<'_>) -> Result<CaseResult, LockError> {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let options: lock_etcd::EtcdOptions = plan.config.section("etcd")?;
    let bound = options.request_timeout;
    let lock = lock_etcd::connect(&plan.config.url, options).await?;
    let client = lock.etcd_client();
    let key = format!("{}bench-baseline-{}", lock.key_root(), std::process::id());
    let err = |e: etcd_client::Error| LockError::backend("etcd", e);
    let late = || LockError::unavailable("etcd", format!("no answer within {bound:?}"));
    timed(schedule, |i| {
        let (mut client, key) = (client.clone(), key.clone());
        async move {
            let put = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.as_str(), i.to_string(), None)]);
            tokio::time::timeout(bound, client.txn(put)).await.map_err(|_| late())?.map_err(err)?;
            tokio::time::timeout(bound, client.delete(key.as_str(), None)).await.map_err(|_| late())?.map_err(err)?;
            Ok(())
        }
    })
    .await
}
