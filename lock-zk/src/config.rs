//! The connection URL (`zk://[user:pass@]h1:p1,h2:p2/root`) and [`ZkOptions`].

use std::fmt;
use std::time::Duration;

use lock_core::LockError;

/// Connection options of the ZooKeeper backend.
///
/// Durations are humantime strings in configuration files (`"10s"`, `"500ms"`). Credentials come
/// from the URL, never from here, so `Debug` output is always safe to log.
///
/// ```
/// use std::time::Duration;
/// let opts = lock_zk::ZkOptions { session_timeout: Duration::from_secs(4), ..Default::default() };
/// assert_eq!(opts.connect_timeout, Duration::from_secs(5));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZkOptions {
    /// The session timeout asked of the server (it may clamp it to its `min/maxSessionTimeout`).
    /// Leases are bound to the session: a holder cut off from the ensemble for this long loses
    /// its locks, and a crashed holder's locks free up after it.
    #[serde(with = "humantime_serde")]
    pub session_timeout: Duration,
    /// Upper bound for establishing a session (connect, and reconnect after an expiry).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Upper bound for one request to the server; never longer than the caller's remaining wait.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// A PEM file with the CA certificate(s) that sign the servers' certificates. When set,
    /// every connection uses TLS (point the URL at ZooKeeper's `secureClientPort`), verifying
    /// the chain and that the certificate names the host or IP of the URL; digest credentials
    /// then no longer cross the wire in clear. Needs lock-zk's `tls` feature.
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// The servers' `tickTime` (ZooKeeper's default is 2 s). Through a follower, the leader —
    /// which alone expires sessions — learns of our requests only from the follower's answers
    /// to its pings, every half tick, so a lease's validity is cut by half a tick (see the
    /// crate docs, "When a lease counts as lost"). Never taken as more than half the negotiated
    /// session timeout: ZooKeeper negotiates no session shorter than two ticks unless its
    /// `minSessionTimeout` is lowered. Set it when your servers run another tick.
    #[serde(with = "humantime_serde")]
    pub tick_time: Duration,
}

impl Default for ZkOptions {
    fn default() -> Self {
        ZkOptions {
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            tls_ca_file: None,
            tick_time: Duration::from_secs(2),
        }
    }
}

impl ZkOptions {
    /// The longest lease a client with these options grants on a session of `session_timeout`
    /// (as asked: a server with other `minSessionTimeout`/`maxSessionTimeout` may negotiate
    /// another): what the leader surely keeps of the session after a request the quorum
    /// answered, given `tick_time` (crate docs, "When a lease counts as lost"). A longer ttl is
    /// cut to it; so a test or conformance fixture's base ttl must fit in it.
    pub fn lease_bound(&self) -> Duration {
        crate::lease::server_bound(self.session_timeout, self.tick_time)
    }

    pub(crate) fn validate(&self) -> Result<(), LockError> {
        if self.session_timeout < Duration::from_millis(100) {
            return Err(LockError::config(format!(
                "zookeeper session_timeout {:?} is too short; use at least 100ms (ZooKeeper's minimum is 2 ticks)",
                self.session_timeout
            )));
        }
        if self.session_timeout > Duration::from_secs(24 * 3600) {
            return Err(LockError::config("zookeeper session_timeout is longer than a day; use seconds to minutes"));
        }
        if self.tick_time.is_zero() {
            return Err(LockError::config(
                "zookeeper tick_time is zero; give the servers' tickTime (ZooKeeper's default is 2s)",
            ));
        }
        if self.connect_timeout.is_zero() || self.request_timeout.is_zero() {
            return Err(LockError::config("zookeeper connect_timeout and request_timeout must be above zero"));
        }
        Ok(())
    }
}

/// A parsed `zk://` URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ZkUrl {
    /// `h1:p1,h2:p2`, the connect string without a chroot (the root is handled by us, so that it
    /// can be created when missing).
    pub(crate) hosts: String,
    /// The absolute root path, without a trailing slash, never `/`.
    pub(crate) root: String,
    /// Digest credentials `user:password`, if given.
    pub(crate) digest: Option<(String, String)>,
}

impl fmt::Debug for ZkUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for ZkUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The password never appears in logs or error messages.
        match &self.digest {
            Some((user, _)) => write!(f, "zk://{user}:***@{}{}", self.hosts, self.root),
            None => write!(f, "zk://{}{}", self.hosts, self.root),
        }
    }
}

/// The root used when the URL has no path.
pub(crate) const DEFAULT_ROOT: &str = "/dlock";

/// What [`ZkUrl::hosts`] says for a client built from the application's own session.
pub(crate) const APP_HOSTS: &str = "application-session";

impl ZkUrl {
    /// For a client over the application's own session: only the root (`/a/b`, or empty for
    /// the default), no servers to connect to and no credentials of ours.
    pub(crate) fn app(root: &str) -> Result<ZkUrl, LockError> {
        if !(root.is_empty() || root.starts_with('/')) {
            return Err(LockError::config(format!(
                "the ZooKeeper root {root:?} must be an absolute path, e.g. /dlock"
            )));
        }
        Ok(ZkUrl { hosts: APP_HOSTS.to_owned(), root: parse_root(root)?, digest: None })
    }

    pub(crate) fn parse(url: &str) -> Result<ZkUrl, LockError> {
        let rest = url
            .strip_prefix("zk://")
            .or_else(|| url.strip_prefix("zookeeper://"))
            .ok_or_else(|| LockError::config("a ZooKeeper URL starts with zk://, e.g. zk://h1:2181,h2:2181/dlock"))?;
        if rest.contains(['?', '#']) {
            return Err(LockError::config(
                "ZooKeeper URLs take no query or fragment; set session_timeout etc. in the options",
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (digest, hosts) = match authority.rfind('@') {
            Some(i) => {
                let creds = &authority[..i];
                let (user, pass) = creds.split_once(':').ok_or_else(|| {
                    LockError::config("ZooKeeper credentials must be user:password@ (digest auth) in the URL")
                })?;
                let user = percent_decode(user)?;
                let pass = percent_decode(pass)?;
                if user.is_empty() || user.contains(':') {
                    return Err(LockError::config(
                        "the ZooKeeper user in the URL is empty or contains ':'; digest auth needs user:password",
                    ));
                }
                (Some((user, pass)), &authority[i + 1..])
            }
            None => (None, authority),
        };
        let hosts = parse_hosts(hosts)?;
        let root = parse_root(path)?;
        Ok(ZkUrl { hosts, root, digest })
    }
}

fn parse_hosts(hosts: &str) -> Result<String, LockError> {
    if hosts.is_empty() {
        return Err(LockError::config("the ZooKeeper URL names no server; use zk://host:2181/root"));
    }
    let mut out = Vec::new();
    for h in hosts.split(',') {
        let (host, port) = if let Some(v6) = h.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| LockError::config(format!("unclosed '[' in ZooKeeper server {h:?}")))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| {
                    LockError::config(format!("expected :port after the IPv6 address in ZooKeeper server {h:?}"))
                })?),
            };
            (format!("[{addr}]"), port)
        } else {
            match h.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (h.to_owned(), None),
            }
        };
        let valid_host = !host.is_empty()
            && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'));
        if !valid_host {
            return Err(LockError::config(format!(
                "invalid ZooKeeper server {h:?}; list servers as host:port separated by commas"
            )));
        }
        let port = match port {
            None => 2181,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                LockError::config(format!("invalid port in ZooKeeper server {h:?}; use a number from 1 to 65535"))
            })?,
        };
        out.push(format!("{host}:{port}"));
    }
    Ok(out.join(","))
}

fn parse_root(path: &str) -> Result<String, LockError> {
    let path = path.strip_suffix('/').unwrap_or(path);
    if path.is_empty() {
        return Ok(DEFAULT_ROOT.to_owned());
    }
    let decoded = percent_decode(path)?;
    let segments: Vec<&str> = decoded.split('/').skip(1).collect();
    for s in &segments {
        if s.is_empty() || *s == "." || *s == ".." || s.chars().any(char::is_control) {
            return Err(LockError::config(format!(
                "invalid ZooKeeper root path {decoded:?}: empty, '.' or '..' segments and control characters are not allowed"
            )));
        }
    }
    if segments.first() == Some(&"zookeeper") {
        return Err(LockError::config("the ZooKeeper root path must not be under /zookeeper (reserved by the server)"));
    }
    Ok(decoded)
}

fn percent_decode(s: &str) -> Result<String, LockError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let b =
                hex.ok_or_else(|| LockError::config("bad %-escape in the ZooKeeper URL; use %XX with two hex digits"))?;
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| LockError::config("the ZooKeeper URL decodes to invalid UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = ZkUrl::parse("zk://h1:1,h2:2/a/b").unwrap();
        assert_eq!(u.hosts, "h1:1,h2:2");
        assert_eq!(u.root, "/a/b");
        assert_eq!(u.digest, None);
        let u = ZkUrl::parse("zk://bob:s%40cret@h1/").unwrap();
        assert_eq!(u.hosts, "h1:2181");
        assert_eq!(u.root, DEFAULT_ROOT);
        assert_eq!(u.digest, Some(("bob".into(), "s@cret".into())));
        assert!(!format!("{u:?}").contains("cret"));
        assert!(!format!("{u}").contains("cret"));
        let u = ZkUrl::parse("zk://[::1]:2182,localhost").unwrap();
        assert_eq!(u.hosts, "[::1]:2182,localhost:2181");
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "redis://h",
            "zk://",
            "zk:///root",
            "zk://h:0",
            "zk://h:x",
            "zk://h:99999",
            "zk://h/a//b",
            "zk://h/a/../b",
            "zk://h/zookeeper/x",
            "zk://h/a?x=1",
            "zk://user@h/a",
            "zk://h,/a",
            "zk://h/%zz",
            "zk://h%20x/a",
        ] {
            assert!(matches!(ZkUrl::parse(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }

    #[test]
    fn options_deserialize() {
        let o: ZkOptions = serde_json::from_str(r#"{"session_timeout":"2s"}"#).unwrap();
        assert_eq!(o.session_timeout, Duration::from_secs(2));
        assert_eq!(o.request_timeout, ZkOptions::default().request_timeout);
        assert_eq!(o.tick_time, Duration::from_secs(2));
        let o: ZkOptions = serde_json::from_str(r#"{"tick_time":"200ms"}"#).unwrap();
        assert_eq!(o.tick_time, Duration::from_millis(200));
        assert!(serde_json::from_str::<ZkOptions>(r#"{"sesion_timeout":"2s"}"#).is_err());
    }
}
