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

/// `Some(connect)` when the crate is built with `feature`, else `None` (the row then says which
/// feature to turn on). A macro because `connect` does not exist without its feature.
macro_rules! with_feature {
    ($feature:literal, $connect:path) => {{
        #[cfg(feature = $feature)]
        let connect: Option<ConnectFn> = Some($connect);
        #[cfg(not(feature = $feature))]
        let connect: Option<ConnectFn> = None;
        connect
    }};
}

/// The rows of the shipped backends.
pub(crate) const SHIPPED: &[Driver] = &[
    Driver {
        name: "memory",
        schemes: &["memory"],
        form: "memory://[name]",
        default_port: None,
        exclusive_only: false,
        feature: None,
        connect: Some(memory),
        scheme: Scheme::Memory,
    },
    Driver {
        name: "sqlite",
        schemes: &["sqlite"],
        form: "sqlite://path",
        default_port: None,
        exclusive_only: false,
        feature: Some("sqlite"),
        connect: with_feature!("sqlite", sql::connect),
        scheme: Scheme::Sqlite,
    },
    Driver {
        name: "postgres",
        schemes: &["postgres", "postgresql"],
        form: "postgres://user:password@host/db?sslmode=verify-full",
        default_port: Some(5432),
        exclusive_only: false,
        feature: Some("postgres"),
        connect: with_feature!("postgres", sql::connect),
        scheme: Scheme::Postgres,
    },
    Driver {
        name: "mysql",
        schemes: &["mysql", "mariadb"],
        form: "mysql://user:password@host/db?ssl-mode=verify_identity",
        default_port: Some(3306),
        exclusive_only: false,
        feature: Some("mysql"),
        connect: with_feature!("mysql", sql::connect),
        scheme: Scheme::Mysql,
    },
    Driver {
        // redis+sentinel: lock-redis asks the Sentinels for the primary; redis+cluster: the
        // cluster client routes by slot (same backend and options).
        name: "redis",
        schemes: &["redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster"],
        form: "redis://host:port (rediss:// for TLS, redis+sentinel://s1:p1,s2:p2,s3:p3/<master> via Sentinel, rediss+sentinel:// with TLS, \
               redis+cluster://n1:p1,n2:p2,… for Redis Cluster)",
        default_port: Some(6379),
        exclusive_only: false,
        feature: Some("redis"),
        connect: with_feature!("redis", redis::connect),
        scheme: Scheme::Redis,
    },
    Driver {
        name: "redlock",
        schemes: &["redlock"],
        form: "redlock://h1:p1,h2:p2,h3:p3",
        default_port: Some(6379),
        // Redlock's majority protocol has no read-write lock or semaphore.
        exclusive_only: true,
        feature: Some("redis"),
        connect: with_feature!("redis", redis::connect_redlock),
        scheme: Scheme::Redlock,
    },
    Driver {
        name: "zookeeper",
        schemes: &["zk", "zookeeper"],
        form: "zk://h1:p1,h2:p2/root",
        default_port: Some(2181),
        exclusive_only: false,
        feature: Some("zk"),
        connect: with_feature!("zk", zk::connect),
        scheme: Scheme::ZooKeeper,
    },
];
