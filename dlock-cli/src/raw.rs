//! Plain connections to a deployment with the client library its backend uses, for what the
//! lock API has no call for: `dlock doctor`'s server checks, `dlock conformance`'s clean-up and
//! the bench baseline. Every wait is bounded by [`WAIT`].
//!
//! Assumptions: TLS Redis servers are verified as the lock client verifies them, against
//! `[redis] tls_ca_file` when set and the webpki roots otherwise, whether the URL names them or
//! the Sentinels do; the clean-up, `init` and `doctor` ask the Sentinels for the primary
//! ([`sentinel_primary`]); a `redis+cluster://` URL means the nodes it names.

use std::future::Future;
use std::time::Duration;

use dlock::LockError;
#[cfg(feature = "sql")]
use dlock::Scheme;

/// The bound on connecting and on every request made through these connections.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Runs `fut` within [`WAIT`]; `what` names the step in the error.
pub(crate) async fn within<T, E: std::fmt::Display>(
    backend: &str,
    what: &str,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, LockError> {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(LockError::unavailable(backend, format!("{what}: {e}"))),
        Err(_) => Err(LockError::unavailable(backend, format!("{what}: no answer within {WAIT:?}"))),
    }
}

/// The servers of a `redis://`/`rediss://` URL (itself) or a `redlock://` URL (each master), as
/// `redis://` URLs with the same credentials and database.
pub(crate) fn redis_urls(url: &str) -> Result<Vec<String>, LockError> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" => return Ok(vec![url.to_owned()]),
        "redlock" | "redis+cluster" => {}
        _ => {
            return Err(LockError::config(
                "dlock cannot reach the servers behind a Sentinel URL directly; give --url redis://<the master>",
            ))
        }
    }
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let tls = query.split('&').any(|p| p == "tls=true" || p == "tls=1");
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let (hosts, db) = hosts.split_once('/').map(|(h, d)| (h, format!("/{d}"))).unwrap_or((hosts, String::new()));
    let scheme = if tls { "rediss" } else { "redis" };
    let masters: Vec<String> =
        hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("{scheme}://{auth}{h}{db}")).collect();
    if masters.is_empty() {
        return Err(LockError::config(format!("the {scheme} URL names no nodes; use {scheme}://h1:p1,h2:p2,h3:p3")));
    }
    Ok(masters)
}

/// A connection to one Redis server; a `rediss://` one is verified against the CA of
/// `options.tls_ca_file` when set (as the lock client does), else against the webpki roots.
#[cfg(feature = "redis")]
pub(crate) async fn redis(
    url: &str,
    options: &dlock::redis::RedisOptions,
) -> Result<redis::aio::MultiplexedConnection, LockError> {
    let invalid = |e: redis::RedisError| LockError::config(format!("invalid redis URL: {e}"));
    let tls = url.get(..9).is_some_and(|s| s.eq_ignore_ascii_case("rediss://"));
    let client = match redis_tls(options, tls).await? {
        Some(certs) => redis::Client::build_with_tls(url, certs).map_err(invalid)?,
        None => redis::Client::open(url).map_err(invalid)?,
    };
    within("redis", "connect", client.get_multiplexed_async_connection()).await
}

/// For a TLS connection (`tls`) to Redis: the CA of `options.tls_ca_file` to verify the servers
/// against, or `None` for the webpki roots (and for plaintext). Installs rustls's process-wide
/// crypto provider for any TLS use (one the application installed stays).
#[cfg(feature = "redis")]
pub(crate) async fn redis_tls(
    options: &dlock::redis::RedisOptions,
    tls: bool,
) -> Result<Option<redis::TlsCertificates>, LockError> {
    if !tls {
        return Ok(None);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some(path) = &options.tls_ca_file else { return Ok(None) };
    let pem = tokio::fs::read(path)
        .await
        .map_err(|e| LockError::config(format!("cannot read redis tls_ca_file {}: {e}", path.display())))?;
    Ok(Some(redis::TlsCertificates { client_tls: None, root_cert: Some(pem) }))
}

/// Whether `url` names a primary behind Sentinels (`redis+sentinel://`, `rediss+sentinel://`).
pub(crate) fn is_sentinel(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase();
    scheme == "redis+sentinel" || scheme == "rediss+sentinel"
}

/// The current primary of a Sentinel URL as a `redis://` (`rediss://`) URL with the data nodes'
/// credentials and database, found as the lock client finds it (lock-redis's
/// `sentinel_primary`): the Sentinels get only their own `sentinel_*` credentials, never the
/// data password, and the named server is checked (TLS, `ROLE` master) before it is used.
#[cfg(feature = "redis")]
pub(crate) async fn sentinel_primary(config: &dlock::Config) -> Result<String, LockError> {
    dlock::redis::sentinel_primary(&config.url, &config.redis_options()).await
}

/// Runs one Redis command within [`WAIT`].
#[cfg(feature = "redis")]
pub(crate) async fn redis_query<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<T, LockError> {
    within("redis", "command", cmd.query_async::<T>(conn)).await
}

#[cfg(feature = "zk")]
/// A ZooKeeper URL's servers, root (default `/dlock`) and `user:password` digest credentials.
pub(crate) struct ZkTarget {
    pub(crate) hosts: String,
    pub(crate) root: String,
    pub(crate) auth: Option<String>,
}

#[cfg(feature = "zk")]
impl ZkTarget {
    pub(crate) fn parse(url: &str) -> ZkTarget {
        let rest = url.split_once("://").map(|(_, r)| r).unwrap_or_default();
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((a, r)) => (Some(a.to_owned()), r),
            None => (None, rest),
        };
        let (hosts, root) = rest.split_once('/').map(|(h, r)| (h, format!("/{r}"))).unwrap_or((rest, String::new()));
        let root = root.trim_end_matches('/');
        let root = if root.is_empty() { "/dlock".to_owned() } else { root.to_owned() };
        ZkTarget { hosts: hosts.to_owned(), root, auth }
    }
}

/// A ZooKeeper session for `url`, and the URL's root.
#[cfg(feature = "zk")]
pub(crate) async fn zk(url: &str) -> Result<(zookeeper_client::Client, ZkTarget), LockError> {
    let target = ZkTarget::parse(url);
    let mut connector = zookeeper_client::Client::connector();
    connector = connector.with_session_timeout(WAIT);
    if let Some(auth) = &target.auth {
        connector = connector.with_auth("digest", auth.as_bytes());
    }
    let client = within("zookeeper", "connect", connector.connect(&target.hosts)).await?;
    Ok((client, target))
}

/// One connection to a SQL database.
#[cfg(feature = "sql")]
pub(crate) enum Sql {
    Postgres(sqlx::PgConnection),
    Mysql(sqlx::MySqlConnection),
    Sqlite(sqlx::SqliteConnection),
}

#[cfg(feature = "sql")]
impl Sql {
    /// Connects with `url` as the lock client would, after the same TLS check (`[sql] tls`).
    pub(crate) async fn connect(url: &str, tls: dlock::sql::SqlTls) -> Result<Sql, LockError> {
        use sqlx::Connection;
        dlock::sql::check_tls(url, tls)?;
        let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
        Ok(match Scheme::of(url)? {
            Scheme::Postgres => Sql::Postgres(within("postgres", "connect", sqlx::PgConnection::connect(url)).await?),
            Scheme::Mysql => {
                let url = if scheme.eq_ignore_ascii_case("mariadb") { format!("mysql:{rest}") } else { url.to_owned() };
                Sql::Mysql(within("mysql", "connect", sqlx::MySqlConnection::connect(&url)).await?)
            }
            _ => Sql::Sqlite(within("sqlite", "connect", sqlx::SqliteConnection::connect(url)).await?),
        })
    }

    pub(crate) fn label(&self) -> &'static str {
        match self {
            Sql::Postgres(_) => "postgres",
            Sql::Mysql(_) => "mysql",
            Sql::Sqlite(_) => "sqlite",
        }
    }

    /// Runs a statement; the rows it changed.
    pub(crate) async fn execute(&mut self, sql: &str) -> Result<u64, LockError> {
        let label = self.label();
        let q = sqlx::AssertSqlSafe;
        match self {
            Sql::Postgres(c) => within(label, sql, sqlx::query(q(sql)).execute(c)).await.map(|r| r.rows_affected()),
            Sql::Mysql(c) => within(label, sql, sqlx::query(q(sql)).execute(c)).await.map(|r| r.rows_affected()),
            Sql::Sqlite(c) => within(label, sql, sqlx::query(q(sql)).execute(c)).await.map(|r| r.rows_affected()),
        }
    }

    /// The first column of the first row, as text (`None`: no row, or NULL).
    pub(crate) async fn text(&mut self, sql: &str) -> Result<Option<String>, LockError> {
        let label = self.label();
        let q = sqlx::AssertSqlSafe;
        let row = match self {
            Sql::Postgres(c) => {
                within(label, sql, sqlx::query_scalar::<_, Option<String>>(q(sql)).fetch_optional(c)).await
            }
            Sql::Mysql(c) => {
                within(label, sql, sqlx::query_scalar::<_, Option<String>>(q(sql)).fetch_optional(c)).await
            }
            Sql::Sqlite(c) => {
                within(label, sql, sqlx::query_scalar::<_, Option<String>>(q(sql)).fetch_optional(c)).await
            }
        };
        row.map(Option::flatten)
    }

    /// `table` quoted as an identifier of this database (`table` is a plain identifier).
    pub(crate) fn ident(&self, table: &str) -> String {
        match self {
            Sql::Mysql(_) => format!("`{table}`"),
            _ => format!("\"{table}\""),
        }
    }

    /// Whether `table` exists where this session finds tables.
    pub(crate) async fn table_exists(&mut self, table: &str) -> Result<bool, LockError> {
        let sql = match self {
            Sql::Postgres(_) => format!("SELECT to_regclass('\"{table}\"')::text"),
            Sql::Mysql(_) => format!(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '{table}'"
            ),
            Sql::Sqlite(_) => format!("SELECT name FROM sqlite_master WHERE type = 'table' AND name = '{table}'"),
        };
        Ok(self.text(&sql).await?.is_some())
    }

    /// The first column of the first row, as an integer (`None`: no row).
    pub(crate) async fn int(&mut self, sql: &str) -> Result<Option<i64>, LockError> {
        let label = self.label();
        let q = sqlx::AssertSqlSafe;
        match self {
            Sql::Postgres(c) => within(label, sql, sqlx::query_scalar::<_, i64>(q(sql)).fetch_optional(c)).await,
            Sql::Mysql(c) => within(label, sql, sqlx::query_scalar::<_, i64>(q(sql)).fetch_optional(c)).await,
            Sql::Sqlite(c) => within(label, sql, sqlx::query_scalar::<_, i64>(q(sql)).fetch_optional(c)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_masters_keep_credentials_database_and_tls() {
        assert_eq!(
            redis_urls("redlock://u:p@a:1,b:2,c:3/4?tls=true").expect("valid"),
            ["rediss://u:p@a:1/4", "rediss://u:p@b:2/4", "rediss://u:p@c:3/4"]
        );
        assert_eq!(redis_urls("redis://h:1/2").expect("valid"), ["redis://h:1/2"]);
        assert!(redis_urls("redis+sentinel://a:1,b:2/m").is_err());
    }

    #[test]
    fn zk_root_defaults_to_dlock() {
        let t = ZkTarget::parse("zk://u:p@h:1,h:2/app/locks/");
        assert_eq!((t.hosts.as_str(), t.root.as_str(), t.auth.as_deref()), ("h:1,h:2", "/app/locks", Some("u:p")));
        assert_eq!(ZkTarget::parse("zk://h:1").root, "/dlock");
    }
}
