//! What a SQL URL's TLS mode protects against, said once at connect.
//!
//! sqlx's PostgreSQL modes `prefer` (its default) and `require`, and MySQL's `preferred` (its
//! default) and `required`, encrypt without checking the server's certificate: a fake server or a
//! relay reads the password (an impostor simply asks for it in clear), and `prefer`/`preferred`
//! fall back to plaintext when the server, or a relay, answers "no TLS". Only `verify-full` /
//! `verify-ca` (PostgreSQL) and `verify_identity` / `verify_ca` (MySQL) authenticate the server.
//! Connections to the loopback interface or a Unix socket carry no network to attack, so an
//! absent mode there is not worth a warning; an explicit weak mode always is.

use crate::url::{redact_url, Scheme, UrlParts};

/// The warning `connect` logs for `url`, or `None` when its TLS mode verifies the server (or the
/// URL is not a networked SQL one).
pub fn weak_tls_warning(url: &str) -> Option<String> {
    let scheme = Scheme::of(url).ok()?;
    let (verifying, weak): (&[&str], &[&str]) = match scheme {
        Scheme::Postgres => (&["verify-full", "verify-ca"], &["allow", "prefer", "require"]),
        Scheme::Mysql => (&["verify_identity", "verify_ca"], &["preferred", "required"]),
        _ => return None,
    };
    let parts = UrlParts::parse(url)?;
    let mode = parts.query.into_iter().flat_map(|q| q.split('&')).find_map(|pair| match pair.split_once('=') {
        Some(("sslmode" | "ssl-mode", value)) => Some(value.to_ascii_lowercase()),
        _ => None,
    });
    let advice = format!(
        "use {}=… {} with the server's CA",
        if scheme == Scheme::Postgres { "sslmode" } else { "ssl-mode" },
        verifying[0]
    );
    match mode {
        Some(m) if verifying.contains(&m.as_str()) => None,
        Some(m) if weak.contains(&m.as_str()) => Some(format!(
            "{}: TLS mode {m:?} does not verify the server: an impostor or a relay can read the password and \
             the locks' traffic{}; {advice}",
            redact_url(url),
            if m.starts_with("pre") || m == "allow" {
                ", and the connection falls back to plaintext when TLS is refused"
            } else {
                ""
            }
        )),
        // `disable(d)`: plaintext chosen on purpose; other values are rejected by the backend.
        Some(_) => None,
        None if is_local(&parts.hosts) => None,
        None => Some(format!(
            "{}: no TLS mode, so the client library's default applies, which neither verifies the server nor refuses \
             plaintext; {advice}",
            redact_url(url)
        )),
    }
}

fn is_local(hosts: &[&str]) -> bool {
    // No host at all means a Unix socket or the library's local default.
    hosts.iter().all(|h| {
        let host = match h.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => h,
        };
        matches!(host, "localhost" | "[::1]" | "::1")
            || host.starts_with("127.")
            || host.starts_with('%')
            || host.starts_with('/')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_modes_warn_and_verifying_ones_do_not() {
        for (url, warns) in [
            ("postgres://u:pw@db.example/app?sslmode=require", true),
            ("postgres://u:pw@db.example/app?sslmode=prefer", true),
            ("postgres://u:pw@db.example/app?sslmode=allow", true),
            ("postgres://u:pw@127.0.0.1/app?sslmode=REQUIRE", true),
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
                assert!(w.contains("verify"), "the warning says what to use: {w}");
            }
        }
    }
}
