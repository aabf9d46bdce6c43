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
