//! Mapping of sqlx errors to [`LockError`]: what the caller can do about each. The error codes
//! of each database live with its dialect, as a [`Codes`] table.

use lock_core::LockError;
use sqlx::error::DatabaseError;

/// The privileges the lock user needs, as the crate docs list them.
pub(crate) const PRIVILEGES: &str = "SELECT, INSERT, UPDATE on the lease table, SELECT, INSERT, UPDATE, DELETE on \
     its waiter queue <table>_waiters, and SELECT, INSERT, UPDATE, DELETE on <table>_counters and <table>_holders \
     for read-write locks and semaphores";

/// What to do with a failed statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// The account lacks a privilege on the tables.
    Denied,
    /// Anything else.
    Other,
}

/// A database's name in errors and its server error codes.
#[derive(Clone, Copy)]
pub(crate) struct Codes {
    pub(crate) label: &'static str,
    pub(crate) database: fn(&dyn DatabaseError) -> Class,
}

pub(crate) fn classify(codes: Codes, e: &sqlx::Error) -> Class {
    match e {
        sqlx::Error::Configuration(_) => Class::Config,
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => Class::Broken,
        sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            Class::Unavailable
        }
        sqlx::Error::Database(db) => (codes.database)(db.as_ref()),
        _ => Class::Other,
    }
}

/// Converts a failed statement (`what` says which, e.g. "acquire") into a [`LockError`].
pub(crate) fn to_lock_error(codes: Codes, what: &str, e: sqlx::Error) -> LockError {
    let backend = codes.label;
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
    match classify(codes, &e) {
        Class::Transient | Class::Broken | Class::Unavailable => {
            LockError::unavailable_from(backend, format!("{what} failed: {e}"), e)
        }
        Class::Denied => LockError::config(format!(
            "{backend} denied {what} to this user: {e}; the lock user needs {PRIVILEGES} (once the tables \
             exist; creating them needs CREATE)"
        )),
        Class::Config => LockError::config(format!(
            "{backend} rejected the connection settings during {what}: {e}; check the URL (user, password, \
             database, ssl-mode; for SQLite, that the file's directory exists and is writable)"
        )),
        Class::Other => LockError::backend(backend, e),
    }
}
