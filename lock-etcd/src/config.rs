//! The connection URL (`etcd[s]://[user:pass@]h1:2379,h2:2379/prefix`) and [`EtcdOptions`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lock_core::LockError;

/// The client port etcd listens on when the URL names none.
pub const DEFAULT_PORT: u16 = 2379;

/// The key prefix when the URL has no path.
const DEFAULT_PREFIX: &str = "dlock";

/// Connection options of the etcd backend. Credentials come from the URL, never from here, so
/// `Debug` output is always safe to log.
///
/// ```
/// let opts = lock_etcd::EtcdOptions::default();
/// assert_eq!(opts.connect_timeout, std::time::Duration::from_secs(5));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdOptions {
    /// Upper bound for connecting to an endpoint (and reconnecting after a failure).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Upper bound for one request to the server; never longer than the caller's remaining wait.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// HTTP/2 ping interval of the connection: a connection that answers no ping within this
    /// much again is dropped and redialled, so a silent network cut is found without waiting
    /// for a request to time out.
    #[serde(with = "humantime_serde")]
    pub keep_alive: Duration,
    /// For `etcds://` members whose certificates a private CA signed: that CA's certificate, a
    /// PEM file. Default: the webpki (Mozilla) roots. Refused with a plaintext `etcd://` URL,
    /// where it would be silently unused.
    pub tls_ca_file: Option<PathBuf>,
    /// For members that demand a client certificate (etcd's `--client-cert-auth`): this
    /// client's certificate (chain), a PEM file, offered in every TLS handshake. Set together
    /// with `tls_key_file`; refused with a plaintext `etcd://` URL.
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `tls_cert_file`, a PEM file.
    pub tls_key_file: Option<PathBuf>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            keep_alive: Duration::from_secs(2),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl EtcdOptions {
    pub(crate) fn validate(&self) -> Result<(), LockError> {
        let zero = [self.connect_timeout, self.request_timeout, self.keep_alive].iter().any(Duration::is_zero);
        if zero {
            return Err(LockError::config("etcd connect_timeout, request_timeout and keep_alive must be above zero"));
        }
        if self.request_timeout > Duration::from_secs(3600) {
            return Err(LockError::config("etcd request_timeout is above an hour; use a few seconds"));
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err(LockError::config(
                "etcd tls_cert_file and tls_key_file go together: set both (the client certificate and its key) or \
                 neither",
            ));
        }
        Ok(())
    }

    /// The PEM of `tls_ca_file`, if set.
    pub(crate) async fn read_ca(&self) -> Result<Option<Vec<u8>>, LockError> {
        let Some(path) = &self.tls_ca_file else { return Ok(None) };
        read_pem(path, "tls_ca_file", "the PEM certificate of the CA that signed the members' certificates")
            .await
            .map(Some)
    }

    /// The PEMs of the client certificate and its key, if set.
    pub(crate) async fn read_identity(&self) -> Result<Option<(Vec<u8>, Vec<u8>)>, LockError> {
        let (Some(cert), Some(key)) = (&self.tls_cert_file, &self.tls_key_file) else { return Ok(None) };
        let cert = read_pem(cert, "tls_cert_file", "this client's PEM certificate").await?;
        let key = read_pem(key, "tls_key_file", "the PEM private key of tls_cert_file").await?;
        Ok(Some((cert, key)))
    }
}

/// The contents of the PEM file `path`, the option `what`; a `Config` error saying what it
/// should hold when it cannot be read.
async fn read_pem(path: &std::path::Path, what: &str, should_be: &str) -> Result<Vec<u8>, LockError> {
    tokio::fs::read(path).await.map_err(|e| {
        LockError::config(format!("cannot read etcd {what} {}: {e}; point it at {should_be}", path.display()))
    })
}

/// A parsed `etcd://` URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `http://host:port` (`https://` with TLS), one per member.
    pub(crate) endpoints: Vec<String>,
    /// `etcds://`: every member is reached over TLS.
    pub(crate) tls: bool,
    /// The key prefix, without slashes at either end, never empty.
    pub(crate) prefix: String,
    /// `user:password`, when given.
    pub(crate) user: Option<(String, String)>,
}

impl fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdUrl")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls)
            .field("prefix", &self.prefix)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl EtcdUrl {
    /// Parses `etcd[s]://[user:pass@]h1[:port][,h2[:port]…][/prefix]` (`etcds`: TLS).
    pub(crate) fn parse(url: &str) -> Result<EtcdUrl, LockError> {
        let bad = |why: &str| {
            LockError::config(format!(
                "bad etcd URL: {why}; expected etcd://[user:pass@]host:2379[,host:2379…]/prefix (etcds:// for TLS)"
            ))
        };
        let (tls, rest) = match url.split_once("://") {
            Some(("etcd", rest)) => (false, rest),
            Some(("etcds", rest)) => (true, rest),
            _ => return Err(bad("the scheme is not etcd:// or etcds://")),
        };
        if rest.contains(['?', '#']) {
            return Err(bad("query parameters and fragments are not supported"));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((info, hosts)) => {
                let (u, p) = info.split_once(':').ok_or_else(|| bad("credentials must be user:password"))?;
                let (u, p) = (
                    decode(u).ok_or_else(|| bad("bad %-escape in the user"))?,
                    decode(p).ok_or_else(|| bad("bad %-escape in the password"))?,
                );
                if u.is_empty() {
                    return Err(bad("the user is empty"));
                }
                (Some((u, p)), hosts)
            }
            None => (None, authority),
        };
        let endpoints = hosts
            .split(',')
            .map(|h| endpoint(h, tls).ok_or_else(|| bad("a host is empty or its port is not a number")))
            .collect::<Result<Vec<_>, _>>()?;
        let prefix = path.trim_matches('/');
        if prefix.chars().any(char::is_control) {
            return Err(bad("the prefix contains control characters"));
        }
        let prefix = if prefix.is_empty() {
            DEFAULT_PREFIX.to_owned()
        } else {
            decode(prefix).ok_or_else(|| bad("bad %-escape in the prefix"))?
        };
        Ok(EtcdUrl { endpoints, tls, prefix, user })
    }
}

/// `http[s]://host:port` of one URL host (`[::1]:2379` and a missing port allowed).
fn endpoint(host: &str, tls: bool) -> Option<String> {
    if host.is_empty() {
        return None;
    }
    let has_port = match host.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && (h.starts_with('[') == h.ends_with(']')) && !p.contains(']') => {
            p.parse::<u16>().ok()?;
            true
        }
        _ => false,
    };
    let scheme = if tls { "https" } else { "http" };
    Some(if has_port { format!("{scheme}://{host}") } else { format!("{scheme}://{host}:{DEFAULT_PORT}") })
}

/// Percent-decodes `s` (`None` on a malformed escape or non-UTF-8 result).
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(s.get(i + 1..i + 3)?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = EtcdUrl::parse("etcd://alice:p%40ss@h1:2379,h2,10.0.0.3:2381/my/locks/").unwrap();
        assert_eq!(u.endpoints, ["http://h1:2379", "http://h2:2379", "http://10.0.0.3:2381"]);
        assert_eq!(u.prefix, "my/locks");
        assert_eq!(u.user, Some(("alice".into(), "p@ss".into())));
        assert!(!format!("{u:?}").contains("p@ss"));
        let u = EtcdUrl::parse("etcd://127.0.0.1:2379").unwrap();
        assert_eq!((u.prefix.as_str(), u.user), ("dlock", None));
        assert_eq!(EtcdUrl::parse("etcd://[::1]:2379/x").unwrap().endpoints, ["http://[::1]:2379"]);
        let u = EtcdUrl::parse("etcds://u:p@h1,h2:2391/x").unwrap();
        assert_eq!((u.tls, u.endpoints), (true, vec!["https://h1:2379".to_owned(), "https://h2:2391".to_owned()]));
        assert!(!EtcdUrl::parse("etcd://h1/x").unwrap().tls);
        for bad in [
            "zk://h:1/x",
            "etcd://",
            "etcd://h:port/x",
            "etcd://h1,,h2/x",
            "etcd://:pw@h/x",
            "etcd://u@h/x",
            "etcdss://h/x",
            "http://h:2379/x",
            "etcd://h/x?a=b",
            "etcd://h/%zz",
        ] {
            assert!(matches!(EtcdUrl::parse(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }
}
