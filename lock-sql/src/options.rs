//! Connection and table options of the SQL backend.

use std::time::Duration;

use lock_core::LockError;
use serde::Deserialize;

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
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SqlOptions {
    /// The lease table (created if missing). A plain identifier: `[A-Za-z_][A-Za-z0-9_]{0,62}`.
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
    /// (SQLite). Named `query_timeout` before 0.2; that key is still read, as this one.
    #[serde(with = "humantime_serde", alias = "query_timeout")]
    pub request_timeout: Duration,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            table: DEFAULT_TABLE.to_owned(),
            max_connections: 8,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
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
        if !is_plain_identifier(&self.table) {
            return Err(LockError::config(format!(
                "lease table name {:?} is not a plain identifier; use 1 to 63 ASCII letters, digits or \
                 underscores, not starting with a digit (e.g. \"dlock_leases\")",
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
            assert!(matches!(SqlOptions::default().table(bad).validate(), Err(LockError::Config { .. })));
        }
    }

    #[test]
    fn serde_defaults_and_unknown_fields() {
        let o: SqlOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(o, SqlOptions::default());
        assert!(serde_json::from_str::<SqlOptions>(r#"{"tabel":"x"}"#).is_err());
        let o: SqlOptions = serde_json::from_str(r#"{"connect_timeout":"250ms"}"#).unwrap();
        assert_eq!(o.connect_timeout, Duration::from_millis(250));
        // The old name of request_timeout still works.
        let o: SqlOptions = serde_json::from_str(r#"{"query_timeout":"750ms"}"#).unwrap();
        assert_eq!(o.request_timeout, Duration::from_millis(750));
    }
}
