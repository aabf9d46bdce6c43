//! The SQL backends (PostgreSQL, MySQL/MariaDB, SQLite) as a [`LockProvider`]: one pool and, on
//! PostgreSQL, one listener, shared by every kind.

use std::sync::Arc;

use lock_core::LockProvider;
use lock_sql::SqlBackend;

use super::kinds::{every_kind, KindsProvider};
use crate::driver::Connecting;
use crate::Config;

/// Connects the database the URL names, with the `[sql]` options; lock-sql warns once when the
/// URL's TLS mode does not verify the server, or refuses it under `[sql] tls = "verify"`. (The
/// `sql` feature alone compiles no database to connect.)
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(super) fn connect(config: &Config) -> Connecting<'_> {
    Box::pin(async move {
        let backend = SqlBackend::connect(&config.url, config.sql_options()).await?;
        Ok(Arc::new(SqlProvider::new(backend)) as Arc<dyn LockProvider>)
    })
}

/// A [`SqlBackend`] as a provider.
pub(crate) type SqlProvider = KindsProvider<SqlBackend>;

every_kind!(SqlBackend);
