//! What a SQL URL's TLS mode protects against, said once at connect.
//!
//! sqlx's PostgreSQL modes `allow`, `prefer` (its default) and `require`, and MySQL's
//! `preferred` (its default) and `required`, encrypt without checking the server's certificate:
//! a fake server or a relay reads the password (an impostor simply asks for it in clear), and
//! `prefer`/`preferred` fall back to plaintext when the server, or a relay, answers "no TLS".
//! Only `verify-full` / `verify-ca` (PostgreSQL) and `verify_identity` / `verify_ca` (MySQL)
//! authenticate the server. The judgement is lock-sql's ([`lock_sql::weak_tls_warning`]): it
//! reads the mode back from the driver's own parse of the URL, so every spelling, encoding,
//! `?host=` override and the `PGSSLMODE` environment variable count the same; lock-sql logs the
//! warning at connect (target `lock_sql::tls`, shown by the `dlock` tool by default), and
//! `[sql] tls = "verify"` refuses such a mode instead.

/// The warning `connect` logs for `url`, or `None` when its TLS mode verifies the server (or the
/// URL is not a networked SQL one, or this build has no SQL backend).
pub fn weak_tls_warning(url: &str) -> Option<String> {
    #[cfg(feature = "sql")]
    return lock_sql::weak_tls_warning(url);
    #[cfg(not(feature = "sql"))]
    {
        let _ = url;
        None
    }
}

#[cfg(all(test, feature = "postgres", feature = "mysql"))]
mod tests {
    use super::*;

    #[test]
    fn weak_modes_warn_and_verifying_ones_do_not() {
        for (url, warns) in [
            ("postgres://u:pw@db.example/app?sslmode=require", true),
            ("postgres://u:pw@db.example/app?sslmode=prefer", true),
            ("postgres://u:pw@db.example/app?sslmode=allow", true),
            ("postgres://u:pw@127.0.0.1/app?sslmode=REQUIRE", true),
            ("postgres://u:pw@db.example/app?sslmode=%72equire", true),
            ("postgres://u:pw@127.0.0.1/app?host=db.example", true),
            ("postgresql://u:pw@db.example/app", true),
            ("postgres://u:pw@db.example/app?sslmode=verify-full&sslrootcert=/ca.pem", false),
            ("postgres://u:pw@db.example/app?ssl-mode=verify-ca", false),
            ("postgres://u:pw@db.example/app?sslmode=disable", false),
            ("postgres://u:pw@127.0.0.1:5432/app", false),
            ("postgres://u:pw@localhost/app", false),
            ("mysql://u:pw@db.example/app?ssl-mode=REQUIRED", true),
            ("mysql://u:pw@db.example/app?sslmode=preferred", true),
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
                assert!(w.to_ascii_lowercase().contains("verify"), "the warning says what to use: {w}");
            }
        }
    }
}
