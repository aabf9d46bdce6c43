//! Configuration: which backend (one URL) and its tuning keys, loaded with figment from
//! defaults < `dlock.toml` < `DLOCK_*` environment variables.
//!
//! ```toml
//! # dlock.toml
//! url = "sqlite://dlock.db"   # or postgres://…, mysql://…, redis://…, redlock://h1:p1,h2:p2,…, zk://h1:p1/root, memory://
//! ttl = "30s"                            # default lease time
//! wait = "10s"                           # default wait in acquire (omit to wait forever)
//! request_timeout = "2s"                 # bound on every request to the backend (omit: each backend's default)
//!
//! [sql]
//! table = "dlock_leases"
//!
//! [redis]
//! key_prefix = "dlock"
//!
//! [zk]
//! session_timeout = "10s"
//! ```
//!
//! `request_timeout` is the one bound on a single request (a statement, a command, a ZooKeeper
//! call): it sets the backend's own bound (`[sql] request_timeout`;
//! `[redis] request_timeout`; `[zk] request_timeout`) and the `request_timeout` of
//! [`Config::acquire_options`], so one number bounds each request wherever it is cut. The
//! per-backend keys are deprecated in the file: they still work when the top-level key is
//! absent, and a warning names the top-level key.
//!
//! Environment variables override the file: `DLOCK_URL`, `DLOCK_TTL`, `DLOCK_WAIT`,
//! `DLOCK_REQUEST_TIMEOUT`, and nested
//! keys with a double underscore (`DLOCK_SQL__TABLE=locks`). `DLOCK_CONFIG` names another file.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use figment::value::{Dict, Value};
use lock_core::{AcquireOptions, LockError, WaitPolicy};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The URL used when neither `dlock.toml` nor `DLOCK_URL` names one: an embedded SQLite file,
/// so the quick start needs no server.
pub const DEFAULT_URL: &str = "sqlite://dlock.db";

/// The longest `ttl` or `wait` (a year, the longest lease a backend promises). Durations near
/// `Duration::MAX` overflow the instant arithmetic of every backend; a clear error beats an
/// abort. Wait forever by leaving `wait` out.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest value of any `*_timeout` key: a day. Client libraries keep timeouts in 32-bit
/// milliseconds (at most 24.8 days; sqlx's SQLite panics above that) and ZooKeeper refuses
/// sessions longer than a day.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The longest `request_timeout` (that of [`AcquireOptions`]): a request that may take longer
/// is a hang.
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);

/// Where the backend lives and how it is tuned. Unknown keys are errors, so typos fail loudly:
/// a top-level table is accepted only as the section of a registered backend
/// ([`crate::register_backend`]), checked by [`Config::validate`].
///
/// `Serialize` writes the URL as given, secrets included: show it only with the URL replaced by
/// [`Config::redacted_url`] (as `dlock config` does).
#[derive(Clone, Deserialize, Serialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Config {
    /// The backend URL; its scheme picks the backend.
    pub url: String,
    /// Default lease time.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Default wait in `acquire`; `None` waits forever.
    #[serde(with = "humantime_serde")]
    pub wait: Option<Duration>,
    /// The bound on every single request to the backend (and the `request_timeout` of
    /// [`Config::acquire_options`]); `None`: each backend's own default.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Option<Duration>,
    /// SQL tuning (`[sql]`).
    #[cfg(feature = "sql")]
    pub sql: lock_sql::SqlOptions,
    /// SQL tuning (`[sql]`): this build has no SQL backend.
    #[cfg(not(feature = "sql"))]
    #[serde(skip_serializing)]
    pub sql: Option<serde::de::IgnoredAny>,
    /// Redis and Redlock tuning (`[redis]`).
    #[cfg(feature = "redis")]
    pub redis: lock_redis::RedisOptions,
    /// Redis tuning (`[redis]`): this build has no Redis backend.
    #[cfg(not(feature = "redis"))]
    #[serde(skip_serializing)]
    pub redis: Option<serde::de::IgnoredAny>,
    /// ZooKeeper tuning (`[zk]`).
    #[cfg(feature = "zk")]
    pub zk: lock_zk::ZkOptions,
    /// ZooKeeper tuning (`[zk]`): this build has no ZooKeeper backend.
    #[cfg(not(feature = "zk"))]
    #[serde(skip_serializing)]
    pub zk: Option<serde::de::IgnoredAny>,
    /// The sections of registered backends (`[etcd]`), by backend name, read with
    /// [`Config::section`]. Every other top-level key lands here too and fails validation.
    #[serde(flatten)]
    pub sections: BTreeMap<String, Value>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            url: DEFAULT_URL.to_owned(),
            ttl: lock_core::DEFAULT_TTL,
            wait: None,
            request_timeout: None,
            sql: Default::default(),
            redis: Default::default(),
            zk: Default::default(),
            sections: BTreeMap::new(),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("url", &crate::url::redact_url(&self.url)).field("ttl", &self.ttl).field("wait", &self.wait);
        d.field("request_timeout", &self.request_timeout);
        #[cfg(feature = "sql")]
        d.field("sql", &self.sql);
        #[cfg(feature = "redis")]
        d.field("redis", &self.redis);
        #[cfg(feature = "zk")]
        d.field("zk", &self.zk);
        // A section may hold a password: only its name is shown.
        d.field("sections", &self.sections.keys().collect::<Vec<_>>());
        d.finish()
    }
}

impl Config {
    /// Defaults with this backend URL.
    ///
    /// ```
    /// let config = dlock::Config::from_url("memory://");
    /// assert_eq!(config.url, "memory://");
    /// ```
    pub fn from_url(url: &str) -> Self {
        Config { url: url.to_owned(), ..Config::default() }
    }

    /// The SQL backend's options, with `request_timeout` applied.
    #[cfg(feature = "sql")]
    pub fn sql_options(&self) -> lock_sql::SqlOptions {
        let mut o = self.sql.clone();
        if let Some(t) = self.request_timeout {
            o.request_timeout = t;
        }
        o
    }

    /// The Redis / Redlock backend's options, with `request_timeout` applied.
    #[cfg(feature = "redis")]
    pub fn redis_options(&self) -> lock_redis::RedisOptions {
        let mut o = self.redis.clone();
        if let Some(t) = self.request_timeout {
            o.request_timeout = t;
        }
        o
    }

    /// The ZooKeeper backend's options, with `request_timeout` applied.
    #[cfg(feature = "zk")]
    pub fn zk_options(&self) -> lock_zk::ZkOptions {
        let mut o = self.zk.clone();
        if let Some(t) = self.request_timeout {
            o.request_timeout = t;
        }
        o
    }

    /// Acquire options from the configured defaults.
    pub fn acquire_options(&self) -> AcquireOptions {
        let mut opts = AcquireOptions::new(self.ttl);
        if let Some(t) = self.request_timeout {
            opts = opts.request_timeout(t);
        }
        match self.wait {
            Some(w) => opts.wait(w),
            None => opts.wait_policy(WaitPolicy::Forever),
        }
    }

    /// The URL with every secret replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        crate::url::redact_url(&self.url)
    }

    /// A registered backend's section (`[etcd]` for the backend named `etcd`), as its connect
    /// function's option type; an absent section is an empty one (so `#[serde(default)]` fields
    /// take their defaults). A value of the wrong shape is a `Config` error naming the section.
    pub fn section<T: DeserializeOwned>(&self, name: &str) -> Result<T, LockError> {
        let empty = Value::from(Dict::new());
        self.sections
            .get(name)
            .unwrap_or(&empty)
            .deserialize()
            .map_err(|e| LockError::config(format!("[{name}] in the configuration: {e}")))
    }
}
