//! TLS of the network databases, judged once, from what the driver will do.
//!
//! sqlx's PostgreSQL modes `allow`, `prefer` (its default) and `require`, and MySQL's
//! `preferred` (its default) and `required`, encrypt without checking the server's certificate:
//! an impostor or a relay reads the password (an impostor simply asks for it in clear), and
//! `allow`/`prefer`/`preferred` fall back to plaintext when the server, or a relay, answers "no
//! TLS". Only `verify-ca`/`verify-full` (PostgreSQL) and `verify_ca`/`verify_identity` (MySQL)
//! authenticate the server.
//!
//! The mode is read back from the driver's own connect options, parsed from the URL, not from
//! the URL's text: so every way of setting it counts the same, whatever the spelling
//! (`ssl-mode`, `SSLMODE` is refused earlier as unknown), the case or the percent-encoding
//! (`sslmode=%72equire`), the host the connection really goes to (a `?host=` or `hostaddr=`
//! parameter overrides the URL's), and PostgreSQL's `PGSSLMODE` and `PGHOST` environment
//! variables, which sqlx reads when the URL says nothing (an unparsable `PGSSLMODE` is silently
//! ignored by sqlx, leaving `prefer`). `PGSSLROOTCERT` only picks the CA a verifying mode
//! trusts. Connections to the loopback interface or a Unix socket carry no network to attack,
//! so a mode left to the default there is not worth a warning; a weak mode asked for always is.

use lock_core::backend::redact::redact_url;
use lock_core::LockError;
use serde::{Deserialize, Serialize};

/// What [`SqlOptions::tls`](crate::SqlOptions::tls) demands of a PostgreSQL or MySQL
/// connection (`[sql] tls = "verify"` in a config file). SQLite, a local file, has no TLS:
/// either value is accepted there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SqlTls {
    /// Any mode the URL (or `PGSSLMODE`) asks for; one that does not verify the server is
    /// logged as a warning at connect ([`weak_tls_warning`]).
    #[default]
    Warn,
    /// Only modes that verify the server's certificate (`verify-full`/`verify-ca`,
    /// `VERIFY_IDENTITY`/`VERIFY_CA`); any other, the drivers' defaults included, is a
    /// [`LockError::Config`] before a byte is sent.
    Verify,
}

/// How a driver spells its TLS modes, and what to advise instead of a weak one.
struct Spelling {
    /// `sslmode` / `ssl-mode`: the parameter to advise.
    param: &'static str,
    /// The verifying mode to advise.
    advice: &'static str,
    /// The parameter naming the CA file the verifying mode trusts.
    ca_param: &'static str,
    /// Plaintext asked for: a choice, not an accident.
    disabled: &'static str,
    /// The modes that fall back to plaintext when the server (or a relay) refuses TLS.
    falls_back: &'static [&'static str],
}

#[cfg(feature = "postgres")]
const POSTGRES: Spelling = Spelling {
    param: "sslmode",
    advice: "verify-full",
    ca_param: "sslrootcert",
    disabled: "disable",
    falls_back: &["allow", "prefer"],
};

#[cfg(feature = "mysql")]
const MYSQL: Spelling = Spelling {
    param: "ssl-mode",
    advice: "VERIFY_IDENTITY",
    ca_param: "ssl-ca",
    disabled: "disabled",
    falls_back: &["preferred"],
};

/// The TLS a connection will use, as the driver reads it.
pub(crate) struct Judged {
    /// The mode as it is written (`require`, `preferred`, …).
    mode: &'static str,
    verifies: bool,
    /// Where the mode came from when it was set: `"the URL"`, `"PGSSLMODE"`; `None`: the
    /// driver's default.
    source: Option<&'static str>,
    /// A loopback address or a Unix socket.
    local: bool,
    spelling: &'static Spelling,
}

impl Judged {
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(opts: &sqlx::postgres::PgConnectOptions, url: Option<&str>) -> Judged {
        use sqlx::postgres::PgSslMode as M;
        let mode = match opts.get_ssl_mode() {
            M::Disable => ("disable", false),
            M::Allow => ("allow", false),
            M::Prefer => ("prefer", false),
            M::Require => ("require", false),
            M::VerifyCa => ("verify-ca", true),
            M::VerifyFull => ("verify-full", true),
        };
        let env = std::env::var("PGSSLMODE").is_ok_and(|v| v.parse::<M>().is_ok()).then_some("PGSSLMODE");
        Judged::new(&POSTGRES, mode, url, env, opts.get_socket().is_some(), opts.get_host())
    }

    #[cfg(feature = "mysql")]
    pub(crate) fn mysql(opts: &sqlx::mysql::MySqlConnectOptions, url: Option<&str>) -> Judged {
        use sqlx::mysql::MySqlSslMode as M;
        let mode = match opts.get_ssl_mode() {
            M::Disabled => ("disabled", false),
            M::Preferred => ("preferred", false),
            M::Required => ("required", false),
            M::VerifyCa => ("verify_ca", true),
            M::VerifyIdentity => ("verify_identity", true),
        };
        Judged::new(&MYSQL, mode, url, None, opts.get_socket().is_some(), opts.get_host())
    }

    /// `mode` (and whether it verifies) in the driver's `spelling`, read from the options parsed
    /// from `url` (`None`: a pool's options); `env` is the environment variable that set the mode
    /// when the URL did not, `socket` whether the connection goes to a Unix socket, else to `host`.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    fn new(
        spelling: &'static Spelling,
        (mode, verifies): (&'static str, bool),
        url: Option<&str>,
        env: Option<&'static str>,
        socket: bool,
        host: &str,
    ) -> Judged {
        let source = match url {
            Some(u) if url_sets_mode(u) => Some("the URL"),
            None => Some("the pool's options"),
            _ => env,
        };
        Judged { mode, verifies, source, local: socket || is_loopback(host), spelling }
    }

    /// The warning for a connection to `url` in this mode, or `None` when the mode verifies
    /// the server, was set to plaintext on purpose, or is the default on a local connection.
    pub(crate) fn warning(&self, url: &str) -> Option<String> {
        let spelling = self.spelling;
        if self.verifies || self.mode == spelling.disabled || (self.source.is_none() && self.local) {
            return None;
        }
        let advice = format!("use {}={} with the server's CA", spelling.param, spelling.advice);
        let falls_back = spelling.falls_back.contains(&self.mode);
        let fallback = if falls_back { ", and the connection falls back to plaintext when TLS is refused" } else { "" };
        Some(match self.source {
            Some(source) => format!(
                "{}: TLS mode {:?} (from {source}) does not verify the server: an impostor or a relay can read the \
                 password and the locks' traffic{fallback}; {advice}",
                redact_url(url),
                self.mode
            ),
            None => format!(
                "{}: no TLS mode, so the client library's default {:?} applies, which does not verify the server \
                 (an impostor or a relay can read the password){fallback}; {advice}",
                redact_url(url),
                self.mode
            ),
        })
    }

    /// Checks the mode against `policy`: under [`SqlTls::Verify`] anything but a verifying
    /// mode is a `Config` error; under [`SqlTls::Warn`] a weak one is logged.
    pub(crate) fn enforce(&self, policy: SqlTls, url: Option<&str>) -> Result<(), LockError> {
        match policy {
            SqlTls::Verify if !self.verifies => Err(LockError::config(format!(
                "sql tls = \"verify\" refuses TLS mode {:?} (from {}): it does not verify the server; set {}={} \
                 (and {}=<the server's CA file> unless the system roots sign its certificate) in the URL, or set \
                 [sql] tls = \"warn\" to accept it",
                self.mode,
                self.source.unwrap_or("the client library's default"),
                self.spelling.param,
                self.spelling.advice,
                self.spelling.ca_param,
            ))),
            SqlTls::Verify => Ok(()),
            _ => {
                if let Some(warning) = url.and_then(|u| self.warning(u)) {
                    tracing::warn!("{warning}");
                }
                Ok(())
            }
        }
    }
}

/// Whether the URL's query sets the mode, under any name the drivers read, decoded as they
/// decode it (`ssl%2Dmode` is `ssl-mode`).
fn url_sets_mode(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| u.query_pairs().any(|(k, _)| matches!(&*k, "sslmode" | "ssl-mode")))
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.starts_with('/')
        || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The warning a connection to `url` logs at connect when its TLS mode does not verify the
/// server (see [`SqlTls`]), or `None`: a verifying mode, plaintext asked for, the default on a
/// loopback or Unix-socket connection, SQLite, or a URL the driver cannot parse (its error
/// comes at connect). The URL's password never appears in it.
pub fn weak_tls_warning(url: &str) -> Option<String> {
    judge(url)?.warning(url)
}

/// Checks `url`'s TLS mode against `policy` as [`connect`](crate::connect) does, for a tool
/// that opens connections of its own with the URL: under [`SqlTls::Verify`] a mode that does
/// not verify the server is a [`LockError::Config`]; under [`SqlTls::Warn`] it is logged. A URL
/// that is not PostgreSQL or MySQL, or that the driver cannot parse (its own error comes at
/// connect), passes.
pub fn check_tls(url: &str, policy: SqlTls) -> Result<(), LockError> {
    match judge(url) {
        Some(judged) => judged.enforce(policy, Some(url)),
        None => Ok(()),
    }
}

/// The TLS of a connection to `url`, as the driver parses it; `None` for SQLite, another
/// scheme, or a URL the driver refuses.
fn judge(url: &str) -> Option<Judged> {
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase())?;
    match scheme.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => {
            let opts: sqlx::postgres::PgConnectOptions = url.parse().ok()?;
            Some(Judged::postgres(&opts, Some(url)))
        }
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => {
            let sqlx_url = format!("mysql{}", &url[scheme.len()..]);
            let opts: sqlx::mysql::MySqlConnectOptions = sqlx_url.parse().ok()?;
            Some(Judged::mysql(&opts, Some(url)))
        }
        _ => None,
    }
}

#[cfg(all(test, feature = "postgres", feature = "mysql"))]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_weak_mode_warns() {
        for (url, warns) in [
            ("postgres://u:pw@db.example/app?sslmode=require", true),
            ("postgres://u:pw@db.example/app?sslmode=prefer", true),
            ("postgres://u:pw@db.example/app?sslmode=allow", true),
            ("postgres://u:pw@127.0.0.1/app?sslmode=REQUIRE", true),
            ("postgres://u:pw@db.example/app?sslmode=%72equire", true),
            ("postgres://u:pw@db.example/app?ssl%2Dmode=require", true),
            ("postgres://u:pw@db.example/app?sslmode=re%71uire", true),
            ("postgresql://u:pw@db.example/app", true),
            // The URL's host is local, the host parameter is not: the connection goes there.
            ("postgres://u:pw@127.0.0.1:5432/app?host=db.example", true),
            ("postgres://u:pw@localhost/app?hostaddr=192.0.2.7", true),
            ("postgres://u:pw@db.example/app?sslmode=verify-full&sslrootcert=/ca.pem", false),
            ("postgres://u:pw@db.example/app?ssl-mode=verify-ca", false),
            ("postgres://u:pw@db.example/app?sslmode=VERIFY%2Dfull", false),
            ("postgres://u:pw@db.example/app?sslmode=disable", false),
            ("postgres://u:pw@127.0.0.1:5432/app", false),
            ("postgres://u:pw@localhost/app", false),
            ("postgres://u:pw@[::1]/app", false),
            ("postgres://u:pw@db.example/app?host=/var/run/postgresql", false),
            ("mysql://u:pw@db.example/app?ssl-mode=REQUIRED", true),
            ("mysql://u:pw@db.example/app?sslmode=preferred", true),
            ("mysql://u:pw@db.example/app?ssl-mode=%52EQUIRED", true),
            ("mariadb://u:pw@db.example:3306/app", true),
            ("mysql://u:pw@db.example/app?ssl-mode=VERIFY_IDENTITY", false),
            ("mysql://u:pw@db.example/app?ssl-mode=verify_ca", false),
            ("mysql://root@127.0.0.1:3306/test", false),
            ("sqlite://dlock.db", false),
            ("redis://db.example:6379", false),
        ] {
            let warning = weak_tls_warning(url);
            assert_eq!(warning.is_some(), warns, "{url}: {warning:?}");
            if let Some(w) = warning {
                assert!(!w.contains("pw"), "{w}");
                assert!(w.contains("does not verify the server"), "{w}");
                assert!(w.contains("verify") || w.contains("VERIFY"), "the warning says what to use: {w}");
            }
        }
    }

    #[test]
    fn verify_refuses_every_unverified_mode() {
        for (url, ok) in [
            ("postgres://u@db.example/app?sslmode=verify-full", true),
            ("postgres://u@db.example/app?sslmode=verify-ca", true),
            ("postgres://u@db.example/app?sslmode=require", false),
            ("postgres://u@db.example/app?sslmode=%72equire", false),
            ("postgres://u@db.example/app?sslmode=disable", false),
            ("postgres://u@127.0.0.1/app", false),
            ("mysql://u@db.example/app?ssl-mode=VERIFY_IDENTITY", true),
            ("mysql://u@db.example/app?ssl-mode=required", false),
            ("mysql://u@127.0.0.1/app", false),
        ] {
            let r = judge(url).expect("a PostgreSQL or MySQL URL").enforce(SqlTls::Verify, Some(url));
            assert_eq!(r.is_ok(), ok, "{url}: {r:?}");
            let advice = if url.starts_with("postgres") { "sslmode=verify-full" } else { "ssl-mode=VERIFY_IDENTITY" };
            if let Err(LockError::Config { reason }) = r {
                assert!(reason.contains(advice), "{reason}");
            }
        }
    }

    #[test]
    fn config_spelling() {
        #[derive(Deserialize)]
        struct T {
            tls: SqlTls,
        }
        assert_eq!(serde_json::from_str::<T>(r#"{"tls":"verify"}"#).unwrap().tls, SqlTls::Verify);
        assert_eq!(serde_json::from_str::<T>(r#"{"tls":"warn"}"#).unwrap().tls, SqlTls::Warn);
        assert!(serde_json::from_str::<T>(r#"{"tls":"strict"}"#).is_err());
    }
}
