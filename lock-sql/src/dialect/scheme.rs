//! Which database a URL names, and the one place that connects the dialect for it.
//!
//! Every other module talks to a [`Dialect`] and never asks which database is behind it; only
//! the scheme of the URL tells them apart, and only here. `mariadb:` is MySQL to sqlx, and a
//! build without a database's crate feature refuses its URLs with a `Config` error that names
//! the feature, rather than an "unknown scheme" that would send the user looking for a typo.

use std::sync::Arc;

use lock_core::LockError;

#[cfg(feature = "mysql")]
use super::mysql;
#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "sqlite")]
use super::sqlite;
use super::Dialect;
use crate::options::SqlOptions;

/// The databases a URL can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Db {
    Sqlite,
    Postgres,
    Mysql,
}

impl Db {
    /// The crate feature that brings the dialect.
    fn feature(self) -> &'static str {
        match self {
            Db::Sqlite => "sqlite",
            Db::Postgres => "postgres",
            Db::Mysql => "mysql",
        }
    }
}

/// Splits off the scheme and maps `mariadb:` to sqlx's `mysql:`.
fn parse_url(url: &str) -> Result<(Db, String), LockError> {
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("sqlite") => Ok((Db::Sqlite, url.to_owned())),
        Some("postgres") | Some("postgresql") => Ok((Db::Postgres, url.to_owned())),
        Some("mysql") => Ok((Db::Mysql, url.to_owned())),
        Some("mariadb") => Ok((Db::Mysql, format!("mysql{}", &url["mariadb".len()..]))),
        _ => Err(LockError::config(
            "sql URL must start with sqlite:, postgres:, postgresql:, mysql: or mariadb: \
             (e.g. sqlite://dlock.db or postgres://user@host/db)",
        )),
    }
}

/// Connects the dialect the URL's scheme names: the one place that tells the databases apart.
pub(crate) async fn connect(url: &str, options: &SqlOptions) -> Result<Arc<dyn Dialect>, LockError> {
    let (db, url) = parse_url(url)?;
    match db {
        #[cfg(feature = "sqlite")]
        Db::Sqlite => sqlite::connect(&url, options).await,
        #[cfg(feature = "postgres")]
        Db::Postgres => postgres::connect(&url, options).await,
        #[cfg(feature = "mysql")]
        Db::Mysql => mysql::connect(&url, options).await,
        #[allow(unreachable_patterns)]
        missing => Err(LockError::config(format!(
            "this build of lock-sql has no {} support: enable the crate feature \"{}\" (on by default)",
            missing.feature(),
            missing.feature()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(parse_url("sqlite://x.db").unwrap().0, Db::Sqlite);
        assert_eq!(parse_url("postgresql://h/db").unwrap().0, Db::Postgres);
        assert_eq!(parse_url("POSTGRES://h/db").unwrap().0, Db::Postgres);
        assert_eq!(parse_url("mariadb://root@h:3306/test").unwrap(), (Db::Mysql, "mysql://root@h:3306/test".into()));
        for bad in ["redis://h", "nocolon", "", "mssql://h"] {
            assert!(matches!(parse_url(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }

    /// Misspelt, unknown or repeated URL parameters are Config errors before any connection is
    /// tried (port 1: nothing listens; a connection attempt would be Unavailable instead).
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    #[tokio::test]
    async fn unknown_url_parameters_are_config_errors() {
        for (url, says) in [
            ("postgres://u:pw@127.0.0.1:1/db?ssl_mode=verify-full", "did you mean \"sslmode\""),
            ("postgres://u:pw@127.0.0.1:1/db?SSLMODE=verify-full", "did you mean \"sslmode\""),
            ("postgres://u:pw@127.0.0.1:1/db?sslmode=verify-full&sslpassword=pw", "\"sslpassword\""),
            ("postgresql://u:pw@127.0.0.1:1/db?connect_timeout=5", "\"connect_timeout\""),
            ("postgres://u:pw@127.0.0.1:1/db?sslmode=verify-full&sslmode=disable", "twice"),
            ("postgres://u:pw@127.0.0.1:1/db?sslmode=verify-full#x", "fragment"),
            ("mysql://u:pw@127.0.0.1:1/db?ssl_mode=VERIFY_IDENTITY", "did you mean \"ssl-mode\""),
            ("mariadb://u:pw@127.0.0.1:1/db?SSL-MODE=VERIFY_IDENTITY", "did you mean \"ssl-mode\""),
            ("mysql://u:pw@127.0.0.1:1/db?sslrootcert=/ca.pem", "\"sslrootcert\""),
            ("mysql://u:pw@127.0.0.1:1/db?ssl-mode=verify_ca&sslmode=preferred", "twice"),
            ("sqlite://x.db?MODE=ro", "did you mean \"mode\""),
            ("sqlite://x.db?mode=ro&mode=rwc", "twice"),
        ] {
            match connect(url, &SqlOptions::default()).await {
                Err(LockError::Config { reason }) => {
                    assert!(reason.contains(says), "{url}: {reason}");
                    assert!(!reason.contains("pw"), "{url}: {reason}");
                }
                Err(e) => panic!("{url}: expected a Config error, got {e}"),
                Ok(_) => panic!("{url}: connected"),
            }
        }
        // Wrong values of a known parameter: the driver refuses them (Config too).
        for url in
            ["mysql://u@127.0.0.1:1/db?ssl-mode=VERIFY-IDENTITY", "postgres://u@127.0.0.1:1/db?sslmode=verify_full"]
        {
            let r = connect(url, &SqlOptions::default()).await;
            assert!(matches!(r, Err(LockError::Config { .. })), "{url}");
        }
    }

    /// A build without a dialect's feature refuses its URLs with a Config error that names the
    /// feature (runs in such builds: `--no-default-features --features sqlite`).
    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn a_dialect_left_out_is_a_config_error() {
        let Err(e) = connect("postgres://u@h/db", &SqlOptions::default()).await else {
            panic!("connected without postgres support")
        };
        assert!(matches!(&e, LockError::Config { reason } if reason.contains("\"postgres\"")), "{e}");
    }
}
