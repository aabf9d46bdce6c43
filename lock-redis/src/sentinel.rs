//! Redis Sentinel: the URL, and the client that asks the Sentinels for the primary.
//!
//! URL: `redis[s]+sentinel://[user:password@]s1:p1,s2:p2,…/<master>[/<db>]
//! [?sentinel_username=…&sentinel_password=…]`. The userinfo and database are the data nodes';
//! the Sentinels get only the `sentinel_*` credentials (none: no AUTH), so a Sentinel never
//! sees the data password. The query was chosen over [`crate::RedisOptions`] fields because the
//! URL is already where every secret lives and what every log line and error redacts
//! (`lock_core::backend::redact` hides any parameter whose name holds `pass`); options are
//! printed by `Debug` and `dlock config`.
//!
//! `rediss+sentinel://` is TLS to the Sentinels and to the data nodes they name, both checked
//! against `tls_ca_file` (or the webpki roots) and the address the Sentinel gave (its IP or
//! host name must be in the certificate). A Sentinel that names a plaintext server or one
//! with another certificate makes the TLS handshake fail before any AUTH is sent.

use lock_core::backend::redact::redact_url;
use lock_core::LockError;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, TlsCertificates, TlsMode};

use crate::url::{open_client, split_db};

/// The plaintext scheme of a Sentinel URL.
pub(crate) const SCHEME: &str = "redis+sentinel";
/// The TLS scheme: TLS to the Sentinels and to the data nodes.
pub(crate) const TLS_SCHEME: &str = "rediss+sentinel";

const USAGE: &str = "use redis+sentinel://[user:password@]sentinel1:port1,sentinel2:port2,…/<master name>[/<db>] \
                     (rediss+sentinel:// for TLS) with the Sentinels' own credentials, if they need any, as \
                     ?sentinel_username=…&sentinel_password=… (percent-encoded)";

/// Whether `url` is a Sentinel URL (either scheme, any case).
pub(crate) fn is_sentinel(url: &str) -> bool {
    url.split_once("://").is_some_and(|(s, _)| s.eq_ignore_ascii_case(SCHEME) || s.eq_ignore_ascii_case(TLS_SCHEME))
}

/// A parsed Sentinel URL. `Debug` hides both passwords.
#[derive(PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    pub(crate) tls: bool,
    /// `redis[s]://host:port` of each Sentinel.
    pub(crate) sentinels: Vec<String>,
    pub(crate) master: String,
    /// The data nodes' `user:password`, as written (percent-encoded).
    userinfo: Option<String>,
    db: Option<u32>,
    /// The Sentinels' ACL user and password, decoded.
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
}

impl std::fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelUrl")
            .field("tls", &self.tls)
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .field("data_credentials", &self.userinfo.is_some())
            .field("sentinel_username", &self.sentinel_username)
            .field("sentinel_password", &self.sentinel_password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Parses a Sentinel URL; every problem is a `Config` error that shows no password.
pub(crate) fn parse_sentinel(raw: &str) -> Result<SentinelUrl, LockError> {
    let shown = redact_url(raw);
    let (tls, rest) = match raw.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case(SCHEME) => (false, rest),
        Some((s, rest)) if s.eq_ignore_ascii_case(TLS_SCHEME) => (true, rest),
        _ => return Err(LockError::config(format!("{shown} is not a {SCHEME}:// URL; {USAGE}"))),
    };
    if rest.contains('#') {
        return Err(LockError::config(format!(
            "{shown} has a #fragment; a Sentinel URL takes none (a '#' in a password is written %23); {USAGE}"
        )));
    }
    // The query starts at the first '?' after the userinfo (a data password may hold '?').
    let at = rest.rfind('@').map_or(0, |i| i + 1);
    let (rest, query) = match rest[at..].find('?') {
        Some(q) => (&rest[..at + q], Some(&rest[at + q + 1..])),
        None => (rest, None),
    };
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u.to_owned()), r),
        None => (None, rest),
    };
    let (hosts, path) =
        rest.split_once('/').ok_or_else(|| LockError::config(format!("no master name in {shown}; {USAGE}")))?;
    let (master, db) = split_db(path, SCHEME, USAGE)?;
    if master.is_empty() {
        return Err(LockError::config(format!("no master name in {shown}; {USAGE}")));
    }
    let node_scheme = if tls { "rediss" } else { "redis" };
    let mut sentinels = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(LockError::config(format!("empty sentinel address in {shown}; {USAGE}")));
        }
        // Sentinels listen on 26379 unless told otherwise.
        let url = if host.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && !p.contains(']')) {
            format!("{node_scheme}://{host}")
        } else {
            format!("{node_scheme}://{host}:26379")
        };
        open_client(&url).map_err(|e| LockError::config(format!("sentinel {host}: {e}")))?;
        sentinels.push(url);
    }
    let (sentinel_username, sentinel_password) = sentinel_credentials(query, &shown)?;
    Ok(SentinelUrl { tls, sentinels, master: master.to_owned(), userinfo, db, sentinel_username, sentinel_password })
}

/// The `sentinel_username` / `sentinel_password` parameters, percent-decoded.
fn sentinel_credentials(query: Option<&str>, shown: &str) -> Result<(Option<String>, Option<String>), LockError> {
    let (mut user, mut password) = (None, None);
    for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match key {
            "sentinel_username" => &mut user,
            "sentinel_password" => &mut password,
            _ => {
                return Err(LockError::config(format!(
                    "unknown Sentinel URL parameter {key:?} in {shown}; the only ones are sentinel_username and \
                     sentinel_password (TLS is the rediss+sentinel:// scheme); {USAGE}"
                )))
            }
        };
        let decoded = percent_decode(value).ok_or_else(|| {
            LockError::config(format!("the value of {key} in {shown} is not valid percent-encoded UTF-8; {USAGE}"))
        })?;
        if slot.replace(decoded).is_some() {
            return Err(LockError::config(format!("{key} is given twice in {shown}; {USAGE}")));
        }
    }
    if user.is_some() && password.is_none() {
        return Err(LockError::config(format!(
            "sentinel_username without sentinel_password in {shown}; give both (or only sentinel_password for the \
             Sentinels' default user); {USAGE}"
        )));
    }
    Ok((user, password))
}

/// `%XX` escapes decoded; `None` for a broken escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

impl SentinelUrl {
    /// The data nodes' settings (user, password, db): a client on the first Sentinel's
    /// address that is never connected, only read.
    pub(crate) fn data_settings(&self) -> Result<redis::Client, LockError> {
        let mut template = String::from("redis://");
        if let Some(u) = &self.userinfo {
            template.push_str(u);
            template.push('@');
        }
        template.push_str(self.sentinels[0].split_once("://").map_or("", |(_, h)| h));
        if let Some(db) = self.db {
            template.push_str(&format!("/{db}"));
        }
        open_client(&template)
    }

    /// The client that asks the Sentinels (with their own credentials only) for the primary
    /// and hands out clients for it (with the data nodes' credentials, after checking it
    /// answers `ROLE` as master). `ca`: the PEM of `tls_ca_file`, for both.
    pub(crate) fn client(
        &self,
        data: &redis::RedisConnectionInfo,
        ca: Option<&[u8]>,
    ) -> Result<SentinelClient, LockError> {
        let invalid = |e: redis::RedisError| LockError::config(format!("invalid Sentinel settings: {e}; {USAGE}"));
        let mut addrs: Vec<ConnectionAddr> = Vec::new();
        for url in &self.sentinels {
            addrs.push(open_client(url)?.get_connection_info().addr().clone());
        }
        let mut b = SentinelClientBuilder::new(addrs, &self.master, SentinelServerType::Master).map_err(invalid)?;
        b = b.set_client_to_redis_db(data.db());
        if let Some(u) = data.username() {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = data.password() {
            b = b.set_client_to_redis_password(p);
        }
        if let Some(u) = &self.sentinel_username {
            b = b.set_client_to_sentinel_username(u);
        }
        if let Some(p) = &self.sentinel_password {
            b = b.set_client_to_sentinel_password(p);
        }
        if self.tls {
            b = b.set_client_to_redis_tls_mode(TlsMode::Secure).set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(pem) = ca {
                let certs = || TlsCertificates { client_tls: None, root_cert: Some(pem.to_vec()) };
                b = b.set_client_to_redis_certificates(certs()).set_client_to_sentinel_certificates(certs());
            }
        }
        b.build().map_err(invalid)
    }
}

/// The current primary of a `redis[s]+sentinel://` URL as a `redis://` (`rediss://`) URL with the
/// data nodes' credentials and database, for tools that talk to it directly (`dlock`'s
/// clean-up, `init`, `doctor`). Found the way the lock client finds it: the Sentinels asked
/// with their own credentials only, the named server checked (TLS with `tls_ca_file`, `ROLE`
/// master) before it is returned. Bounded by `connect_timeout`; no answer is `Unavailable`,
/// a refused login or a bad URL `Config`.
pub async fn sentinel_primary(url: &str, options: &crate::RedisOptions) -> Result<String, LockError> {
    let parsed = parse_sentinel(url)?;
    let ca = options.read_ca().await?;
    let settings = parsed.data_settings()?;
    let mut client = parsed.client(settings.get_connection_info().redis_settings(), ca.as_deref())?;
    let label = redact_url(url);
    let found = tokio::time::timeout(options.connect_timeout, client.async_get_client()).await;
    let primary = match found {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            let detail = match settings.get_connection_info().redis_settings().password() {
                Some(p) if !p.is_empty() => e.to_string().replace(p, "***"),
                _ => e.to_string(),
            };
            if tokio::time::timeout(options.connect_timeout, sentinels_refuse_login(&mut client)).await == Ok(true) {
                return Err(LockError::config(refused_message(&label, &detail)));
            }
            return Err(LockError::unavailable("redis", format!("no primary from the Sentinels of {label}: {detail}")));
        }
        Err(_) => {
            return Err(LockError::unavailable(
                "redis",
                format!(
                    "no primary from the Sentinels of {label} within the connect timeout {:?}",
                    options.connect_timeout
                ),
            ))
        }
    };
    let (host, port) = match primary.get_connection_info().addr() {
        ConnectionAddr::Tcp(h, p) | ConnectionAddr::TcpTls { host: h, port: p, .. } => (h.clone(), *p),
        other => return Err(LockError::config(format!("the Sentinels of {label} named {other}, not a TCP address"))),
    };
    let host = if host.contains(':') { format!("[{host}]") } else { host };
    let mut out = format!("{}://", if parsed.tls { "rediss" } else { "redis" });
    if let Some(u) = &parsed.userinfo {
        out.push_str(u);
        out.push('@');
    }
    out.push_str(&format!("{host}:{port}"));
    if let Some(db) = parsed.db {
        out.push_str(&format!("/{db}"));
    }
    Ok(out)
}

/// Whether a Sentinel (not the data node it named) refused this client's credentials: asks the
/// Sentinels once more, with `ROLE`, which needs nothing but a login.
pub(crate) async fn sentinels_refuse_login(client: &mut SentinelClient) -> bool {
    match client.async_get_sentinel_client().await {
        Ok(_) => false,
        Err(e) => {
            e.kind() == redis::ErrorKind::AuthenticationFailed
                || e.code().is_some_and(|c| matches!(c, "NOAUTH" | "WRONGPASS" | "NOPERM"))
        }
    }
}

/// The message for [`sentinels_refuse_login`].
pub(crate) fn refused_message(label: &str, detail: &str) -> String {
    format!(
        "the Sentinels of {label} refused this client's login ({detail}); give the Sentinels' own ACL user and \
         password as ?sentinel_username=…&sentinel_password=… in the URL (the user before the '@' is the data \
         nodes', never sent to a Sentinel); that user needs +role and +sentinel|masters"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls() {
        let u = parse_sentinel("redis+sentinel://a:1,b:2,c:3/mymaster").unwrap();
        assert_eq!(u.sentinels, vec!["redis://a:1", "redis://b:2", "redis://c:3"]);
        assert_eq!((u.master.as_str(), u.db, u.userinfo.as_deref(), u.tls), ("mymaster", None, None, false));
        let u = parse_sentinel("redis+sentinel://u:p/w@a:1,b:2/m/3").unwrap();
        assert_eq!((u.master.as_str(), u.db, u.userinfo.as_deref()), ("m", Some(3), Some("u:p/w")));
        assert_eq!(parse_sentinel("redis+sentinel://a:1/m/").unwrap().db, None);
        let u = parse_sentinel("redis+sentinel://a,[::1],b:5/m").unwrap();
        assert_eq!(u.sentinels, vec!["redis://a:26379", "redis://[::1]:26379", "redis://b:5"]);
        let u =
            parse_sentinel("rediss+sentinel://u:d?x@a:1/m/2?sentinel_username=s&sentinel_password=p%26q%2B").unwrap();
        assert_eq!(
            (u.tls, u.sentinels[0].as_str(), u.db, u.userinfo.as_deref()),
            (true, "rediss://a:1", Some(2), Some("u:d?x"))
        );
        assert_eq!((u.sentinel_username.as_deref(), u.sentinel_password.as_deref()), (Some("s"), Some("p&q+")));
        let shown = format!("{u:?}");
        assert!(!shown.contains("p&q") && !shown.contains("d?x"), "{shown}");
        let u = parse_sentinel("REDIS+SENTINEL://a:1/m?sentinel_password=only").unwrap();
        assert_eq!((u.sentinel_username, u.sentinel_password.as_deref()), (None, Some("only")));
        for bad in [
            "redis://a:1/m",
            "redis+sentinel://a:1",
            "redis+sentinel://a:1/",
            "redis+sentinel://a:1,,b:2/m",
            "redis+sentinel://a:1/m/x",
            "redis+sentinel://a:1/m?tls=true",
            "redis+sentinel://a:1/m?sentinel_username=u",
            "redis+sentinel://a:1/m?sentinel_password=a&sentinel_password=b",
            "redis+sentinel://a:1/m?sentinel_password=%zz",
            "redis+sentinel://a:1/m#insecure",
            "redis+sentinel://a:notaport/m",
            "redis+sentinel:///m",
        ] {
            assert!(matches!(parse_sentinel(bad), Err(LockError::Config { .. })), "{bad} must be refused");
        }
        for raw in ["redis+sentinel://u:topsecret@a:1/m?x=1", "redis+sentinel://a:1/m/x?sentinel_password=topsecret"] {
            let e = parse_sentinel(raw).unwrap_err().to_string();
            assert!(!e.contains("topsecret"), "{e}");
        }
    }

    #[test]
    fn is_sentinel_takes_both_schemes() {
        assert!(is_sentinel("redis+sentinel://a/m") && is_sentinel("Rediss+Sentinel://a/m"));
        assert!(!is_sentinel("rediss://a") && !is_sentinel("redis+cluster://a"));
    }
}
