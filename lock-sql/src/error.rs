//! Mapping of sqlx errors to [`LockError`]: what the caller can do about each.

use lock_core::LockError;
use sqlx::mysql::MySqlDatabaseError;

use crate::store::Kind;

/// What to do with a failed statement.
pub(crate) enum Class {
    /// A conflict the database resolved by aborting us (deadlock, busy file): run it again.
    Transient,
    /// The connection we used died (server restart, reset, killed session): a fresh pooled
    /// connection may work, so run it again, a few times.
    Broken,
    /// The server or the network is gone or refuses work.
    Unavailable,
    /// The URL or the account is wrong.
    Config,
    /// Anything else.
    Other,
}

pub(crate) fn classify(kind: Kind, e: &sqlx::Error) -> Class {
    match e {
        sqlx::Error::Configuration(_) => Class::Config,
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => Class::Broken,
        sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            Class::Unavailable
        }
        sqlx::Error::Database(db) => {
            if kind == Kind::Mysql {
                let Some(my) = db.try_downcast_ref::<MySqlDatabaseError>() else { return Class::Other };
                return match my.number() {
                    // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
                    1213 | 1205 => Class::Transient,
                    // too many connections, shutdown in progress, killed/interrupted, read-only
                    // server (a replica after failover), MariaDB connection killed
                    1040 | 1053 | 1077 | 1078 | 1079 | 1152 | 1153 | 1158 | 1159 | 1160 | 1161 | 1290 | 1317 | 1836
                    | 1927 | 4031 => Class::Unavailable,
                    // access denied, unknown database
                    1044 | 1045 | 1049 | 1698 => Class::Config,
                    _ => Class::Other,
                };
            }
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            if kind == Kind::Sqlite {
                let Ok(n) = code.parse::<u32>() else { return Class::Other };
                // SQLite (extended) result codes: BUSY and LOCKED families.
                return match n & 0xff {
                    5 | 6 => Class::Transient,
                    // CANTOPEN: the path is wrong (a missing directory, no permission)
                    14 => Class::Config,
                    // NOTADB, READONLY, IOERR, FULL
                    26 | 8 | 10 | 13 => Class::Unavailable,
                    _ => Class::Other,
                };
            }
            // PostgreSQL SQLSTATE.
            match code.as_str() {
                "40001" | "40P01" | "55P03" => Class::Transient,
                // the session was terminated (restart, pg_terminate_backend)
                "57P01" | "57P02" => Class::Broken,
                c if c.starts_with("08") => Class::Broken,
                "57P03" | "57014" | "53300" | "25006" | "53100" | "53200" => Class::Unavailable,
                c if c.starts_with("28") || c == "3D000" => Class::Config,
                _ => Class::Other,
            }
        }
        _ => Class::Other,
    }
}

/// Converts a failed statement (`what` says which, e.g. "acquire") into a [`LockError`].
pub(crate) fn to_lock_error(kind: Kind, what: &str, e: sqlx::Error) -> LockError {
    let backend = kind.label();
    if matches!(e, sqlx::Error::PoolTimedOut) {
        return LockError::unavailable_from(
            backend,
            format!(
                "{what}: no database connection within connect_timeout (the server does not answer, or all \
                 max_connections are busy)"
            ),
            e,
        );
    }
    match classify(kind, &e) {
        Class::Transient | Class::Broken | Class::Unavailable => {
            LockError::unavailable_from(backend, format!("{what} failed: {e}"), e)
        }
        Class::Config => LockError::config(format!(
            "{backend} rejected the connection settings during {what}: {e}; check the URL (user, password, \
             database, ssl-mode; for SQLite, that the file's directory exists and is writable)"
        )),
        Class::Other => LockError::backend(backend, e),
    }
}
