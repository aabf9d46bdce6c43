//! dlock benchmarks: every number is a ratio against a baseline measured in the same run.
//!
//! - **acquire / RTT**: an uncontended `try_acquire` against one plain round trip to the same
//!   server (`PING`, `SELECT 1`, `exists /`). About 1 means "acquire is one round trip".
//! - **hand-off, notified vs polled**: how long a blocked `acquire` takes to return after the
//!   holder releases, with the backend's notification (Redis pub/sub, PostgreSQL NOTIFY,
//!   ZooKeeper watch) against the same store forced to poll with dlock's jittered back-off.
//!
//! Run with `cargo bench --bench locks`. Servers: SQLite in a temp file; PostgreSQL and MariaDB
//! from `DLOCK_TEST_POSTGRES_URL` / `DLOCK_TEST_MYSQL_URL` or the local defaults; Redis and
//! ZooKeeper started locally (lock-conformance provisioning). A backend that cannot be reached
//! is reported as such, not left out silently.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dlock::{
    backend::{Claim, LeaseStore, ReleaseOutcome, RenewOutcome, StoreLock, TryLock},
    AcquireOptions, Capabilities, DistributedLock, LockError, LockName, OwnerId,
};
use dlock_testkit::servers::redis::RedisServer;
use dlock_testkit::servers::zookeeper::ZkServer;

const CYCLES: usize = 200;
const HANDOFFS: usize = 25;

/// The same store with its notifications hidden: waiters fall back to polling.
struct PollOnly<S>(Arc<S>);

#[async_trait]
impl<S: LeaseStore> LeaseStore for PollOnly<S> {
    fn backend(&self) -> &str {
        self.0.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn try_lock(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        self.0.try_lock(claim, waiting).await
    }
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.0.abandon(name, owner).await
    }
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.0.renew(name, owner, ttl).await
    }
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.0.release(name, owner).await
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Median of one plain round trip.
async fn rtt<F, Fut>(mut ping: F) -> Result<Duration, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    ping().await?;
    let mut v = Vec::with_capacity(CYCLES);
    for _ in 0..CYCLES {
        let t = Instant::now();
        ping().await?;
        v.push(t.elapsed());
    }
    Ok(median(v))
}

/// Median of an uncontended `try_acquire` (the release is not timed).
async fn acquire_latency(lock: &dyn DistributedLock, tag: &str) -> Result<Duration, LockError> {
    let opts = AcquireOptions::new(Duration::from_secs(10)).auto_renew(false);
    let mut v = Vec::with_capacity(CYCLES);
    for i in 0..CYCLES {
        let name = LockName::new(format!("bench/{tag}/{}", i % 8))?;
        let t = Instant::now();
        let lease = lock.try_acquire(&name, &opts).await?.ok_or_else(|| LockError::config("bench lock busy"))?;
        v.push(t.elapsed());
        lease.release().await?;
    }
    Ok(median(v))
}

/// Median time from release to the blocked waiter's grant.
async fn handoff_latency(
    holder: &dyn DistributedLock,
    waiter: Arc<dyn DistributedLock>,
    tag: &str,
) -> Result<Duration, LockError> {
    let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(10));
    let mut v = Vec::with_capacity(HANDOFFS);
    for i in 0..HANDOFFS {
        let name = LockName::new(format!("bench/handoff/{tag}/{i}"))?;
        let lease = holder.acquire(&name, &opts).await?;
        let (w, n, o) = (Arc::clone(&waiter), name.clone(), opts.clone());
        let task = tokio::spawn(async move {
            let l = w.acquire(&n, &o).await;
            (Instant::now(), l)
        });
        // Hold for a varying time so a poller's phase is random, as in production.
        tokio::time::sleep(Duration::from_millis(60 + (i as u64 * 37) % 90)).await;
        let released = Instant::now();
        lease.release().await?;
        let (granted, l) = task.await.map_err(|e| LockError::backend("bench", e))?;
        l?.release().await?;
        v.push(granted.saturating_duration_since(released));
    }
    Ok(median(v))
}

struct Row {
    backend: &'static str,
    rtt: Duration,
    acquire: Duration,
    handoff: Duration,
    handoff_polled: Option<Duration>,
}

fn print(rows: &[Row], failures: &[String]) {
    println!("| backend | RTT (baseline) | try_acquire | acquire / RTT | hand-off notified | hand-off polled (baseline) | polled / notified |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        let ratio = r.acquire.as_secs_f64() / r.rtt.as_secs_f64().max(1e-9);
        let (polled, speedup) = match r.handoff_polled {
            Some(p) => (ms(p), format!("{:.1}×", p.as_secs_f64() / r.handoff.as_secs_f64().max(1e-9))),
            None => ("—".into(), "—".into()),
        };
        println!(
            "| {} | {} | {} | {:.2} | {} | {} | {} |",
            r.backend,
            ms(r.rtt),
            ms(r.acquire),
            ratio,
            ms(r.handoff),
            polled,
            speedup
        );
    }
    for f in failures {
        println!("\nNOT MEASURED: {f}");
    }
}

/// The median round trip of `SELECT 1` over a pool of the database at `url`.
async fn select_one_rtt<DB: sqlx::Database>(url: &str) -> Result<Duration, String>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let pool = sqlx::Pool::<DB>::connect(url).await.map_err(|e| e.to_string())?;
    rtt(|| {
        let pool = pool.clone();
        async move { sqlx::query("SELECT 1").execute(&pool).await.map(|_| ()).map_err(|e| e.to_string()) }
    })
    .await
}

async fn sql_row(backend: &'static str, url: &str, table: &str) -> Result<Row, String> {
    let opts = lock_sql::SqlOptions { table: table.to_owned(), ..Default::default() };
    let lock = lock_sql::connect(url, opts.clone()).await.map_err(|e| e.to_string())?;
    let rtt = match backend {
        "postgres" => select_one_rtt::<sqlx::Postgres>(url).await?,
        "mysql" => select_one_rtt::<sqlx::MySql>(url).await?,
        _ => select_one_rtt::<sqlx::Sqlite>(url).await?,
    };
    let acquire = acquire_latency(&lock, backend).await.map_err(|e| e.to_string())?;
    let waiter: Arc<dyn DistributedLock> =
        Arc::new(lock_sql::connect(url, opts.clone()).await.map_err(|e| e.to_string())?);
    let handoff = handoff_latency(&lock, waiter, backend).await.map_err(|e| e.to_string())?;
    let handoff_polled = if backend == "postgres" {
        let polled = lock_sql::connect(url, opts).await.map_err(|e| e.to_string())?;
        let polled: Arc<dyn DistributedLock> = Arc::new(StoreLock::new(PollOnly(Arc::clone(polled.store()))));
        Some(handoff_latency(&lock, polled, "postgres-polled").await.map_err(|e| e.to_string())?)
    } else {
        None
    };
    Ok(Row { backend, rtt, acquire, handoff, handoff_polled })
}

async fn redis_row(url: &str) -> Result<Row, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let con = client.get_multiplexed_async_connection().await.map_err(|e| e.to_string())?;
    let rtt = rtt(|| {
        let mut con = con.clone();
        async move { redis::cmd("PING").query_async::<String>(&mut con).await.map(|_| ()).map_err(|e| e.to_string()) }
    })
    .await?;
    let opts = lock_redis::RedisOptions::default();
    let lock = lock_redis::connect(url, opts.clone()).await.map_err(|e| e.to_string())?;
    let acquire = acquire_latency(&lock, "redis").await.map_err(|e| e.to_string())?;
    let waiter: Arc<dyn DistributedLock> =
        Arc::new(lock_redis::connect(url, opts.clone()).await.map_err(|e| e.to_string())?);
    let handoff = handoff_latency(&lock, waiter, "redis").await.map_err(|e| e.to_string())?;
    let polled = lock_redis::connect(url, opts).await.map_err(|e| e.to_string())?;
    let polled: Arc<dyn DistributedLock> = Arc::new(StoreLock::new(PollOnly(Arc::clone(polled.store()))));
    let handoff_polled = Some(handoff_latency(&lock, polled, "redis-polled").await.map_err(|e| e.to_string())?);
    Ok(Row { backend: "redis", rtt, acquire, handoff, handoff_polled })
}

async fn zk_row(server: &ZkServer) -> Result<Row, String> {
    let addr = server.addr().ok_or("no ZooKeeper address")?;
    let raw = zookeeper_client::Client::connect(&addr.to_string()).await.map_err(|e| e.to_string())?;
    let rtt = rtt(|| {
        let raw = raw.clone();
        async move { raw.check_stat("/").await.map(|_| ()).map_err(|e| e.to_string()) }
    })
    .await?;
    let url = server.url_with_root("/dlock-bench");
    let opts = lock_zk::ZkOptions::default();
    let lock = lock_zk::connect(&url, opts.clone()).await.map_err(|e| e.to_string())?;
    let acquire = acquire_latency(&lock, "zk").await.map_err(|e| e.to_string())?;
    let waiter: Arc<dyn DistributedLock> = Arc::new(lock_zk::connect(&url, opts).await.map_err(|e| e.to_string())?);
    let handoff = handoff_latency(&lock, waiter, "zk").await.map_err(|e| e.to_string())?;
    Ok(Row { backend: "zookeeper", rtt, acquire, handoff, handoff_polled: None })
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_owned())
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run a tiny smoke pass then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("dlock benches: run with `cargo bench --bench locks`");
        return;
    }
    let run = format!("{:x}", std::process::id());
    let table = format!("dlock_bench_{run}");
    let mut rows = Vec::new();
    let mut failures = Vec::new();

    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
    let pg = env_or("DLOCK_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
    let my = env_or("DLOCK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
    for (backend, url) in [("sqlite", sqlite.as_str()), ("postgres", pg.as_str()), ("mysql", my.as_str())] {
        eprintln!("measuring {backend}…");
        match sql_row(backend, url, &table).await {
            Ok(r) => rows.push(r),
            Err(e) => failures.push(format!("{backend}: {e}")),
        }
    }
    eprintln!("measuring redis…");
    match RedisServer::start().await {
        Ok(server) => match redis_row(server.url()).await {
            Ok(r) => rows.push(r),
            Err(e) => failures.push(format!("redis: {e}")),
        },
        Err(e) => failures.push(format!("redis: {e}")),
    }
    eprintln!("measuring zookeeper…");
    match ZkServer::start().await {
        Ok(server) => match zk_row(&server).await {
            Ok(r) => rows.push(r),
            Err(e) => failures.push(format!("zookeeper: {e}")),
        },
        Err(e) => failures.push(format!("zookeeper: {e}")),
    }
    print(&rows, &failures);
}
