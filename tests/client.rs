//! `dlock::Client`: every lock kind over one set of connections — PostgreSQL sessions counted in
//! `pg_stat_activity` (a unique `application_name`), Redis connections counted by a proxy in
//! front of the shared server — and the config file's `request_timeout` bounding a request
//! against a server that stopped answering, on every network backend.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dlock::{AcquireOptions, Client, Config, DistributedLock, Lease, LockError, LockName};
use lock_conformance::proxy::FaultProxy;
use lock_conformance::ClientLink;
use tokio::time::Instant;

mod common;
use common::{env_or, mysql_url, postgres_url, Sql};

fn redis_url() -> String {
    env_or("DLOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379")
}

/// `prefix_` and 12 random hex digits.
fn unique(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("{prefix}_{:012x}", h.finish() & 0xffff_ffff_ffff)
}

fn opts() -> AcquireOptions {
    AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5))
}

/// Takes and releases each kind once, one after another.
async fn use_every_kind(client: &Client, name: &LockName) -> Result<(), LockError> {
    let o = opts();
    client.lock().acquire(name, &o).await?.release().await?;
    let rw = client.rw().await?;
    rw.acquire_read(name, &o).await?.release().await?;
    rw.acquire_write(name, &o).await?.release().await?;
    client.semaphore().await?.acquire_permit(name, 2, &o).await?.release().await?;
    Ok(())
}

async fn use_exclusive(lock: &Arc<dyn DistributedLock>, name: &LockName) -> Result<(), LockError> {
    for _ in 0..4 {
        lock.acquire(name, &opts()).await?.release().await?;
    }
    Ok(())
}

/// Sessions of `app` in `pg_stat_activity`, counted from a connection of another name.
async fn pg_sessions(app: &str) -> i64 {
    let mut conn =
        <sqlx::PgConnection as sqlx::Connection>::connect(&postgres_url()).await.expect("postgres for counting");
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
        .bind(app)
        .fetch_one(&mut conn)
        .await
        .expect("count sessions")
}

fn pg_config(app: &str, table: &str) -> Config {
    let sep = if postgres_url().contains('?') { '&' } else { '?' };
    let mut config = Config::from_url(&format!("{}{sep}application_name={app}", postgres_url()));
    config.sql.table = table.to_owned();
    config
}

/// Using all three kinds from one `Client` opens no more PostgreSQL sessions than the exclusive
/// lock alone; three single-kind clients (what `connect_*` did for every kind) open more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_client_opens_no_more_sessions_than_the_exclusive_lock() {
    let (app, table) = (unique("dlock_client"), unique("dlock_client_t"));
    let name = LockName::new("client-sessions").expect("name");
    let config = pg_config(&app, &table);

    let client = Client::from_config(&config).await.expect("client");
    use_exclusive(&client.lock(), &name).await.expect("exclusive");
    let exclusive_only = pg_sessions(&app).await;
    assert!(exclusive_only >= 2, "a pool connection and the listener: {exclusive_only}");
    use_every_kind(&client, &name).await.expect("every kind");
    use_exclusive(&client.lock(), &name).await.expect("exclusive again");
    let every_kind = pg_sessions(&app).await;
    assert!(
        every_kind <= exclusive_only,
        "all three kinds from one Client opened {every_kind} sessions, the exclusive lock alone {exclusive_only}"
    );

    // The same work through one client per kind opens a pool and a listener per client.
    let rw = dlock::connect_rw_with(&config).await.expect("rw client");
    rw.acquire_read(&name, &opts()).await.expect("read").release().await.expect("release");
    let sem = dlock::connect_semaphore_with(&config).await.expect("semaphore client");
    sem.acquire_permit(&name, 2, &opts()).await.expect("permit").release().await.expect("release");
    let separate = pg_sessions(&app).await;
    eprintln!("postgres sessions: exclusive lock alone {exclusive_only}, every kind from one Client {every_kind}, plus a client per kind {separate}");
    assert!(separate >= every_kind + 4, "separate clients: {separate} sessions, one Client: {every_kind}");
    drop((client, rw, sem));
    Sql::connect(&postgres_url()).await.drop_tables(&table).await;
}

/// Releases `held` while `waiting` (spawned) waits for the same name, so that the waiter is
/// woken, and releases what the waiter (`who`) was granted.
async fn hand_over(held: Lease, waiting: impl Future<Output = Result<Lease, LockError>> + Send + 'static, who: &str) {
    let waiter = tokio::spawn(waiting);
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release");
    let granted = waiter.await.expect("join").unwrap_or_else(|e| panic!("{who} not granted: {e}"));
    granted.release().await.expect("release");
}

/// The same on Redis: one command connection (and one pub/sub connection once someone waits)
/// for every kind, counted by a proxy every connection of the client goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_one_client_opens_no_more_connections_than_the_exclusive_lock() {
    let proxy = proxy_for(&redis_url(), 6379).await;
    let mut config = Config::from_url(&format!("redis://{}", proxy.local_addr()));
    config.redis.key_prefix = unique("dlock-client");
    config.redis.restart_quiet_period = Some(Duration::ZERO);
    let name = LockName::new("client-connections").expect("name");

    let client = Client::from_config(&config).await.expect("client");
    let lock = client.lock();
    use_exclusive(&lock, &name).await.expect("exclusive");
    // A waiter subscribes: the pub/sub connection opens too.
    let held = lock.acquire(&name, &opts()).await.expect("held");
    let (waiter, waited) = (Arc::clone(&lock), name.clone());
    hand_over(held, async move { waiter.acquire(&waited, &opts()).await }, "waiter").await;
    let exclusive_only = proxy.connections_accepted();

    use_every_kind(&client, &name).await.expect("every kind");
    let rw = client.rw().await.expect("rw");
    let write = rw.acquire_write(&name, &opts()).await.expect("write");
    let (reader, waited) = (Arc::clone(&rw), name.clone());
    hand_over(write, async move { reader.acquire_read(&waited, &opts()).await }, "reader").await;
    let every_kind = proxy.connections_accepted();
    eprintln!("redis connections: exclusive lock alone {exclusive_only}, every kind from one Client {every_kind}");
    assert!(exclusive_only >= 2, "a command and a pub/sub connection: {exclusive_only}");
    assert_eq!(every_kind, exclusive_only, "all three kinds from one Client opened more connections");

    let _rw = dlock::connect_rw_with(&config).await.expect("separate rw client");
    assert!(proxy.connections_accepted() > every_kind, "a separate client opens its own connection");
}

/// A config with `request_timeout = "300ms"` from the file, for `url`.
fn config_with_request_timeout(url: &str) -> Config {
    let toml = format!("url = \"{url}\"\nrequest_timeout = \"300ms\"\n");
    use figment::providers::Format;
    let fig = figment::Figment::new().merge(figment::providers::Toml::string(&toml));
    Config::extract(fig).expect("config")
}

/// Connects through a proxy, then black-holes it: a try with a generous per-call
/// `request_timeout` (10 s) must still fail within about the config's 300 ms, so the config
/// reached the backend's own bound — and `acquire_options()` carries it too.
async fn check_request_timeout(config: Config, proxy: Arc<FaultProxy>) {
    assert_eq!(config.acquire_options().request_timeout, Duration::from_millis(300));
    let client = Client::from_config(&config).await.expect("client");
    let lock = client.lock();
    let name = LockName::new("request-timeout").expect("name");
    let generous = AcquireOptions::new(Duration::from_secs(10)).request_timeout(Duration::from_secs(10));
    lock.try_acquire(&name, &generous).await.expect("answers before the partition").expect("free").release().await.ok();
    proxy.set_partitioned(true).await;
    let began = Instant::now();
    let result = lock.try_acquire(&name, &generous).await;
    let took = began.elapsed();
    proxy.set_partitioned(false).await;
    eprintln!("{}: a request to a silent server ended after {took:?}: {result:?}", lock.backend());
    assert!(matches!(result, Err(LockError::Unavailable { .. } | LockError::Timeout { .. })), "{result:?}");
    // Below every backend's default (Redis 1 s, SQL and ZooKeeper 5 s): the file's value reached the backend.
    assert!(took < Duration::from_millis(900), "{}: a silent server held the request {took:?}", lock.backend());
}

/// `scheme://[userinfo@]host[:port]/rest` split at the host and port.
fn split(url: &str) -> (&str, &str, &str) {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| (&rest[..i], &rest[i..]));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let userinfo = &url[..scheme.len() + 3 + authority.len() - host_port.len()];
    (userinfo, host_port, path)
}

/// `url` with its host and port replaced by the proxy's.
fn through(proxy: &FaultProxy, url: &str) -> String {
    let (before, _, path) = split(url);
    format!("{before}{}{path}", proxy.local_addr())
}

async fn proxy_for(url: &str, port: u16) -> Arc<FaultProxy> {
    let (_, host_port, _) = split(url);
    let target = if host_port.contains(':') { host_port.to_owned() } else { format!("{host_port}:{port}") };
    let addr: SocketAddr = tokio::net::lookup_host(target).await.expect("resolve").next().expect("an address");
    FaultProxy::start(addr).await.expect("proxy")
}

/// [`check_request_timeout`] on the SQL server at `url` (`port` when it names none), in a
/// private table dropped afterwards.
async fn check_sql_request_timeout(url: &str, port: u16) {
    let proxy = proxy_for(url, port).await;
    let table = unique("dlock_rt");
    let mut config = config_with_request_timeout(&through(&proxy, url));
    config.sql.table = table.clone();
    check_request_timeout(config, proxy).await;
    Sql::connect(url).await.drop_tables(&table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_from_the_file_bounds_postgres() {
    check_sql_request_timeout(&postgres_url(), 5432).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_from_the_file_bounds_mysql() {
    check_sql_request_timeout(&mysql_url(), 3306).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_from_the_file_bounds_redis() {
    let proxy = proxy_for(&redis_url(), 6379).await;
    let mut config = config_with_request_timeout(&through(&proxy, &redis_url()));
    config.redis.key_prefix = unique("dlock-rt");
    config.redis.restart_quiet_period = Some(Duration::ZERO);
    check_request_timeout(config, proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_from_the_file_bounds_zookeeper() {
    let server = dlock_testkit::servers::zookeeper::ZkServer::start().await.expect("zookeeper");
    let addr = server.addr().expect("zookeeper address");
    let proxy = FaultProxy::start(addr).await.expect("proxy");
    let url = format!("zk://{}/{}", proxy.local_addr(), unique("dlock_rt"));
    let mut config = config_with_request_timeout(&url);
    config.zk.session_timeout = Duration::from_secs(10);
    check_request_timeout(config, proxy).await;
}
