//! Connection and table options of the SQL backend.

use std::time::Duration;

use lock_core::LockError;
use serde::Deserialize;

use crate::tls::SqlTls;

/// The default lease table.
pub const DEFAULT_TABLE: &str = "dlock_leases";

/// Options of [`connect`](crate::connect). Everything except the URL (which carries host,
/// credentials and TLS settings), so this struct holds no secrets and can be logged.
///
/// In a config file (durations as humantime strings):
///
/// ```
/// let opts: lock_sql::SqlOptions = serde_json::from_str(
///     r#"{ "table": "app_locks", "max_connections": 4, "connect_timeout": "3s", "request_timeout": "2s" }"#,
/// ).unwrap();
/// assert_eq!(opts.table, "app_locks");
/// assert_eq!(opts.request_timeout, std::time::Duration::from_secs(2));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SqlOptions {
    /// The lease table (created if missing): a plain identifier `[A-Za-z_][A-Za-z0-9_]*`, or a
    /// schema-qualified `schema.table` of two such identifiers (at most 63 characters in all). An
    /// unqualified name is looked up where the session's `search_path` (PostgreSQL) or database
    /// (MySQL) finds it; an existing table is used only if it is what dlock creates (see
    /// "Table squatting" in the crate docs).
    pub table: String,
    /// Connections of this client's pool, plus two kept for renew and release (PostgreSQL
    /// uses one more, for LISTEN).
    pub max_connections: u32,
    /// Bound for opening one connection (and for waiting for a free pooled one).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Bound for one request: one statement (or one short transaction), including retries of
    /// transient conflicts (deadlock, busy). Also the server-side `statement_timeout`
    /// (PostgreSQL), `innodb_lock_wait_timeout` (MySQL, whole seconds) and `busy_timeout`
    /// (SQLite).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Delete the rows of names nobody has held for this long (docs/contract.md §5.7), checked
    /// every half of it (at most every 15 minutes) by each client; `None` (the default) keeps
    /// every row. Tokens stay monotonic: a new row's fence starts at the database clock in µs.
    /// At least 1 s and longer than `request_timeout`; needs `DELETE` on the lease table.
    #[serde(with = "humantime_serde")]
    pub idle_gc_after: Option<Duration>,
    /// What the URL's TLS mode must be (PostgreSQL, MySQL): [`SqlTls::Warn`] (the default)
    /// accepts any and logs a warning for one that does not verify the server;
    /// [`SqlTls::Verify`] (`tls = "verify"`) refuses those with a `Config` error.
    pub tls: SqlTls,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            table: DEFAULT_TABLE.to_owned(),
            max_connections: 8,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            idle_gc_after: None,
            tls: SqlTls::Warn,
        }
    }
}

impl SqlOptions {
    /// Options with another lease table.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Checks the options; the error says which value to fix.
    pub fn validate(&self) -> Result<(), LockError> {
        if !is_table_name(&self.table) {
            return Err(LockError::config(format!(
                "lease table name {:?} is not a plain identifier or schema.table; use 1 to 63 ASCII letters, \
                 digits or underscores, not starting with a digit, optionally after a schema name and a dot \
                 (e.g. \"dlock_leases\" or \"locks.dlock_leases\")",
                self.table.chars().take(80).collect::<String>()
            )));
        }
        if self.max_connections == 0 {
            return Err(LockError::config("sql max_connections is 0; use at least 1 (e.g. 8)"));
        }
        if self.connect_timeout.is_zero() {
            return Err(LockError::config("sql connect_timeout is zero; use e.g. \"5s\""));
        }
        if self.request_timeout.is_zero() {
            return Err(LockError::config("sql request_timeout is zero; use e.g. \"5s\""));
        }
        if let Some(idle) = self.idle_gc_after {
            if idle < Duration::from_secs(1) || idle <= self.request_timeout {
                return Err(LockError::config(format!(
                    "sql idle_gc_after is {idle:?}; use at least 1s and more than request_timeout ({:?}), e.g. \"1h\"",
                    self.request_timeout
                )));
            }
        }
        Ok(())
    }
}

/// `^[A-Za-z_][A-Za-z0-9_]{0,62}$`: safe to splice into SQL (quoted) on every dialect, and short
/// enough for PostgreSQL's 63-byte identifiers (the table name doubles as the NOTIFY channel).
pub(crate) fn is_plain_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// A plain identifier, or `schema.table` of two, at most 63 bytes in all (PostgreSQL's NOTIFY
/// channel is named after the table).
pub(crate) fn is_table_name(s: &str) -> bool {
    s.len() <= 63
        && match s.split_once('.') {
            Some((schema, table)) => is_plain_identifier(schema) && is_plain_identifier(table),
            None => is_plain_identifier(s),
        }
}

/// `table` (validated by [`is_table_name`]) quoted with `q` for SQL: `"t"` or `"schema"."t"`.
pub(crate) fn quote_table(table: &str, q: char) -> String {
    match table.split_once('.') {
        Some((schema, name)) => format!("{q}{schema}{q}.{q}{name}{q}"),
        None => format!("{q}{table}{q}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for ok in ["dlock_leases", "_x", "A", &"a".repeat(63)] {
            assert!(is_plain_identifier(ok), "{ok}");
        }
        for bad in ["", "1abc", "a-b", "a b", "a\"b", "x;drop", "é", &"a".repeat(64), "a.b"] {
            assert!(!is_plain_identifier(bad), "{bad}");
        }
        for bad in
            ["", "1abc", "a-b", "a b", "a\"b", "x;drop", "é", &"a".repeat(64), ".a", "a.", "a.b.c", "a.1b", "a\".b"]
        {
            assert!(!is_table_name(bad), "{bad}");
            assert!(matches!(SqlOptions::default().table(bad).validate(), Err(LockError::Config { .. })), "{bad}");
        }
        for ok in ["a.b", "locks.dlock_leases", &format!("{}.{}", "s".repeat(31), "t".repeat(31))] {
            assert!(is_table_name(ok), "{ok}");
            assert!(SqlOptions::default().table(ok).validate().is_ok(), "{ok}");
        }
        assert_eq!(quote_table("locks.t", '"'), "\"locks\".\"t\"");
        assert_eq!(quote_table("t", '`'), "`t`");
    }

    #[test]
    fn serde_defaults_and_unknown_fields() {
        let o: SqlOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(o, SqlOptions::default());
        assert!(serde_json::from_str::<SqlOptions>(r#"{"tabel":"x"}"#).is_err());
        let o: SqlOptions = serde_json::from_str(r#"{"connect_timeout":"250ms"}"#).unwrap();
        assert_eq!(o.connect_timeout, Duration::from_millis(250));
        let o: SqlOptions = serde_json::from_str(r#"{"idle_gc_after":"1h"}"#).unwrap();
        assert_eq!(o.idle_gc_after, Some(Duration::from_secs(3600)));
        assert!(o.validate().is_ok());
        let short = SqlOptions { idle_gc_after: Some(Duration::from_secs(2)), ..SqlOptions::default() };
        assert!(matches!(short.validate(), Err(LockError::Config { .. })), "not above request_timeout");
        // No old names: an unknown key is an error, never silently ignored.
        assert!(serde_json::from_str::<SqlOptions>(r#"{"query_timeout":"750ms"}"#).is_err());
    }
}
