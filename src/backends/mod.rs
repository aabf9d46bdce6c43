//! The backends shipped with dlock: one row of the backend table each, with the function that
//! connects it. A backend this build does not compile in keeps its row (so its URLs are known
//! and the error names the cargo feature to enable) without a connect function.

use std::sync::Arc;

use lock_core::{LockProvider, MemoryLock};

use crate::driver::{ConnectFn, Connecting, Driver};
use crate::scheme::Scheme;
use crate::Config;

#[cfg(any(feature = "sql", feature = "redis"))]
mod kinds;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sql")]
mod sql;
#[cfg(feature = "zk")]
mod zk;

#[cfg(feature = "redis")]
pub(crate) use self::redis::RedisProvider;
#[cfg(feature = "sql")]
pub(crate) use self::sql::SqlProvider;

/// `memory://[name]`: the in-process server of that name (one per name, shared in the process).
fn memory(config: &Config) -> Connecting<'_> {
    let name = config.url.split_once("://").map_or("", |(_, name)| name);
    let provider: Arc<dyn LockProvider> = Arc::new(MemoryLock::named(name));
    Box::pin(async move { Ok(provider) })
}

/// The row of a shipped backend that the cargo feature `$feature` compiles in: connected by
/// `$connect` in a build with the feature; without it the row stays (its URLs are known) and its
/// error names the feature to turn on. A macro because `$connect` does not exist without it.
macro_rules! shipped {
    ($name:literal, $schemes:expr, $scheme:expr, $feature:literal => $connect:path) => {{
        #[cfg(feature = $feature)]
        let connect: Option<ConnectFn> = Some($connect);
        #[cfg(not(feature = $feature))]
        let connect: Option<ConnectFn> = None;
        Driver::row($name, $schemes, $scheme, Some($feature), connect)
    }};
}

/// The rows of the shipped backends.
pub(crate) const SHIPPED: &[Driver] = &[
    Driver::row("memory", &["memory"], Scheme::Memory, None, Some(memory)).form("memory://[name]"),
    shipped!("sqlite", &["sqlite"], Scheme::Sqlite, "sqlite" => sql::connect).form("sqlite://path"),
    shipped!("postgres", &["postgres", "postgresql"], Scheme::Postgres, "postgres" => sql::connect)
        .form("postgres://user:password@host/db?sslmode=verify-full")
        .default_port(5432),
    shipped!("mysql", &["mysql", "mariadb"], Scheme::Mysql, "mysql" => sql::connect)
        .form("mysql://user:password@host/db?ssl-mode=verify_identity")
        .default_port(3306),
    // redis+sentinel: lock-redis asks the Sentinels for the primary; redis+cluster: the cluster
    // client routes by slot (same backend and options).
    shipped!(
        "redis",
        &["redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster"],
        Scheme::Redis,
        "redis" => redis::connect
    )
    .form(
        "redis://host:port (rediss:// for TLS, redis+sentinel://s1:p1,s2:p2,s3:p3/<master> via Sentinel, rediss+sentinel:// with TLS, \
         redis+cluster://n1:p1,n2:p2,… for Redis Cluster)",
    )
    .default_port(6379),
    // Redlock's majority protocol has no read-write lock or semaphore.
    shipped!("redlock", &["redlock"], Scheme::Redlock, "redis" => redis::connect_redlock)
        .form("redlock://h1:p1,h2:p2,h3:p3")
        .default_port(6379)
        .exclusive_only(),
    shipped!("zookeeper", &["zk", "zookeeper"], Scheme::ZooKeeper, "zk" => zk::connect)
        .form("zk://h1:p1,h2:p2/root")
        .default_port(2181),
];
