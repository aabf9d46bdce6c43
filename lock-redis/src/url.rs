//! URL handling: validation and the `redlock://` list of masters. Passwords are hidden by
//! lock-core's one redaction (`lock_core::backend::redact`), as everywhere else.

use lock_core::backend::redact::{redact_message, redact_url};
use lock_core::LockError;

/// Checks a `redis://` / `rediss://` URL and opens a (not yet connected) client for it.
pub(crate) fn open_client(raw: &str) -> Result<redis::Client, LockError> {
    open_client_with_ca(raw, None)
}

/// Like [`open_client`]; with `ca` (PEM), `rediss://` servers are verified against that CA
/// instead of the webpki (Mozilla) roots.
pub(crate) fn open_client_with_ca(raw: &str, ca: Option<&[u8]>) -> Result<redis::Client, LockError> {
    let parsed = url::Url::parse(raw).map_err(|e| {
        LockError::config(format!(
            "invalid redis URL {}: {e}; use redis://[user:password@]host[:port][/db] or rediss://… for TLS",
            redact_url(raw)
        ))
    })?;
    match parsed.scheme() {
        "redis" | "rediss" => {}
        other => {
            return Err(LockError::config(format!(
                "unsupported scheme {other:?} in {}; use redis://, rediss:// (TLS) or redlock://h1:p1,h2:p2,…",
                redact_url(raw)
            )))
        }
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(LockError::config(format!("redis URL {} has no host; use redis://host:port", redact_url(raw))));
    }
    // A misspelt or unknown parameter (`?tls=true`) would otherwise be ignored silently and the
    // connection would not be what the URL seems to ask for.
    for (key, _) in parsed.query_pairs() {
        if key != "protocol" {
            return Err(LockError::config(format!(
                "unknown redis URL parameter {key:?} in {}; the only parameter is protocol=resp2|resp3 (for TLS use \
                 rediss://, for a database the path: redis://host:port/1)",
                redact_url(raw)
            )));
        }
    }
    // `#insecure` is the client library's switch for rediss:// (warned about below); any other
    // fragment, or one on a plain redis:// URL, would be ignored.
    match (parsed.scheme(), parsed.fragment()) {
        (_, None) | ("rediss", Some("insecure")) => {}
        (_, Some(_)) => {
            return Err(LockError::config(format!(
                "redis URL {} has a #fragment the client would ignore; the only one is rediss://…#insecure (which \
                 turns off certificate checks); a '#' in a password is written %23",
                redact_url(raw)
            )))
        }
    }
    if parsed.scheme() == "rediss" && parsed.fragment() == Some("insecure") {
        tracing::warn!(
            server = %redact_url(raw),
            "rediss://…#insecure encrypts without verifying the server's certificate: anyone on the path can \
             impersonate the server and read the password; give the CA with tls_ca_file instead"
        );
    }
    if parsed.scheme() == "rediss" {
        install_crypto_provider();
    }
    let info = redis::IntoConnectionInfo::into_connection_info(raw).map_err(|e| {
        LockError::config(format!(
            "invalid redis URL {}: {}; use redis://[user:password@]host[:port][/db]",
            redact_url(raw),
            redact_message(&e.to_string(), raw)
        ))
    })?;
    // No `CLIENT SETINFO` on connect: one round trip less, which matters on slow links.
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_redis_settings(settings);
    let client = match ca {
        Some(pem) if parsed.scheme() == "rediss" => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates { client_tls: None, root_cert: Some(pem.to_vec()) },
        ),
        _ => redis::Client::open(info),
    };
    client.map_err(|e| {
        LockError::config(format!(
            "invalid redis URL {}: {}; use redis://[user:password@]host[:port][/db]",
            redact_url(raw),
            redact_message(&e.to_string(), raw)
        ))
    })
}

/// rustls panics when it cannot pick a process-wide crypto provider (none, or several, compiled
/// in). Installing ring up front makes `rediss://` work in every build; if the application
/// installed a provider already, that one stays.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The masters of a `redlock://[user:password@]h1:p1,h2:p2,…[/db][?tls=true]` URL, each as a
/// `redis://` (or `rediss://`) URL.
pub(crate) fn parse_redlock(raw: &str) -> Result<Vec<String>, LockError> {
    let usage = "use redlock://[user:password@]host1:port1,host2:port2,…[/db][?tls=true] (an odd number ≥ 3 of \
                 independent masters)";
    parse_node_list(raw, "redlock", usage)
}

/// The nodes of a `<scheme>://[user:password@]h1:p1,h2:p2,…[/db][?tls=true]` URL (Redlock's
/// masters, a cluster's seed nodes), each as a `redis://` (or `rediss://`) URL; `usage` ends
/// every error message.
/// `rest` up to its first '/', and the database number after it (none when absent or empty);
/// `scheme` and `usage` make the error when it is not a number.
pub(crate) fn split_db<'a>(rest: &'a str, scheme: &str, usage: &str) -> Result<(&'a str, Option<u32>), LockError> {
    match rest.split_once('/') {
        Some((a, "")) => Ok((a, None)),
        Some((a, d)) => match d.parse::<u32>() {
            Ok(n) => Ok((a, Some(n))),
            Err(_) => Err(LockError::config(format!("{scheme} database {d:?} is not a number; {usage}"))),
        },
        None => Ok((rest, None)),
    }
}

pub(crate) fn parse_node_list(raw: &str, scheme: &str, usage: &str) -> Result<Vec<String>, LockError> {
    let rest = match raw.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case(scheme) => rest,
        _ => return Err(LockError::config(format!("{} is not a {scheme}:// URL; {usage}", redact_url(raw)))),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let mut tls = false;
    for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("tls", "true" | "1")) => tls = true,
            Some(("tls", "false" | "0")) => tls = false,
            _ => {
                return Err(LockError::config(format!(
                    "unknown {scheme} URL parameter {pair:?}; the only parameter is tls=true|false; {usage}"
                )))
            }
        }
    }
    let (authority_and_userinfo, db) = split_db(rest, scheme, usage)?;
    let (userinfo, hosts) = match authority_and_userinfo.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority_and_userinfo),
    };
    let node_scheme = if tls { "rediss" } else { "redis" };
    let mut nodes = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(LockError::config(format!("empty host in {}; {usage}", redact_url(raw))));
        }
        let mut node = format!("{node_scheme}://");
        if let Some(u) = userinfo {
            node.push_str(u);
            node.push('@');
        }
        node.push_str(host);
        if let Some(db) = db {
            node.push_str(&format!("/{db}"));
        }
        // Validate each node the same way as a single-instance URL.
        open_client(&node)
            .map_err(|e| LockError::config(format!("{scheme} node {}: {e}; {usage}", redact_url(&node))))?;
        nodes.push(node);
    }
    if nodes.is_empty() {
        return Err(LockError::config(format!("no nodes in {}; {usage}", redact_url(raw))));
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_urls() {
        let n = parse_redlock("redlock://a:1,b:2,c:3").unwrap();
        assert_eq!(n, vec!["redis://a:1", "redis://b:2", "redis://c:3"]);
        let n = parse_redlock("redlock://u:p@a:1,b:2/3?tls=true").unwrap();
        assert_eq!(n, vec!["rediss://u:p@a:1/3", "rediss://u:p@b:2/3"]);
        assert!(parse_redlock("redis://a:1").is_err());
        assert!(parse_redlock("redlock://a:1,,b:2").is_err());
        assert!(parse_redlock("redlock://").is_err());
        assert!(parse_redlock("redlock://a:1?x=y").is_err());
        assert!(parse_redlock("redlock://a:notaport").is_err());
        let e = parse_redlock("redlock://u:topsecret@a:1,b:x").unwrap_err().to_string();
        assert!(!e.contains("topsecret"), "{e}");
    }

    #[test]
    fn single_urls() {
        assert!(open_client("redis://127.0.0.1:6379/0").is_ok());
        assert!(matches!(open_client("http://x"), Err(LockError::Config { .. })));
        assert!(matches!(open_client("not a url"), Err(LockError::Config { .. })));
        for url in ["redis://h?tls=true", "rediss://h:1/0?ssl=1", "redis://u:pw@h?Protocol=resp3", "redis://h?db=2"] {
            let e = open_client(url).unwrap_err();
            assert!(matches!(e, LockError::Config { .. }), "{url}: {e}");
            assert!(e.to_string().contains("unknown redis URL parameter") && !e.to_string().contains("pw@"), "{e}");
        }
        assert!(open_client("redis://h?protocol=resp3").is_ok());
        for url in ["redis://u:pw@h#insecure", "rediss://h#secure", "redis://h/0#x"] {
            let e = open_client(url).unwrap_err();
            assert!(matches!(e, LockError::Config { .. }) && e.to_string().contains("#fragment"), "{url}: {e}");
            assert!(!e.to_string().contains("pw@"), "{e}");
        }
        let e = open_client("postgres://u:hunter2@h/db").unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }
}
