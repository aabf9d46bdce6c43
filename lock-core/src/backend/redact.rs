//! The one redactor: hides every secret a backend URL can carry, in the URL itself and in any
//! message (a client library's error, a log line) that may quote it.
//!
//! Secrets are the userinfo password (`scheme://user:PASSWORD@host…`) and the values of secret
//! query parameters (`password`, `sslpassword`, `sslkey`, `token`, …).
//!
//! Users paste passwords as they are, so the password may hold `/`, `?`, `#`, `@`, `:` or `%`
//! unencoded. Where that makes a URL ambiguous the redactor hides too much rather than too little:
//! the userinfo runs to the **last** `@`, and a secret query value runs to the next `&`. The `url`
//! crate reads the URL as well, and whatever it calls a password is hidden too, so a URL that
//! `url` (or a backend using it) reads differently still shows no secret.
//!
//! ```
//! use lock_core::backend::redact::{redact_message, redact_url};
//! assert_eq!(redact_url("redis://u:s3cret@h:6379/0"), "redis://u:***@h:6379/0");
//! assert_eq!(redact_url("zk://u:p/w?d@h1:1,h2:2/root"), "zk://u:***@h1:1,h2:2/root");
//! assert_eq!(redact_url("postgres://h/db?sslpassword=k3y&sslmode=verify-full"),
//!            "postgres://h/db?sslpassword=***&sslmode=verify-full");
//! let url = "redlock://u:hunter2!@a:1,b:2";
//! assert_eq!(redact_message("cannot parse 'hunter2!@a' in redlock://u:hunter2!@a:1,b:2", url),
//!            "cannot parse '***@a' in redlock://u:***@a:1,b:2");
//! ```

use crate::error::BoxError;
use crate::LockError;

/// What a hidden secret is replaced by.
pub const MASK: &str = "***";

/// Pieces of a secret shorter than this are not searched for on their own in messages: too many
/// false hits, and too little of the secret to matter.
const MIN_PIECE: usize = 4;

/// Characters a URL parser may cut a pasted password at; a message can quote the pieces.
const DELIMITERS: &[char] = &['/', '?', '#', '@', ':', ',', '&', '=', ';', '%', '[', ']', ' '];

/// A `scheme://[user[:password]@]host1[:port1][,host2[:port2]…][/path][?query]` URL cut into its
/// parts by one small parser that also reads multi-host lists (`redlock://`, `zk://`), which the
/// `url` crate refuses.
///
/// Its `Debug` hides the password and the secret query values (a `{:?}` in a log line must not
/// leak them); the fields themselves hold the text as written.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UrlParts<'a> {
    /// The scheme, as written (`redis`).
    pub scheme: &'a str,
    /// The user name, if any (possibly empty: `redis://:pw@h`).
    pub user: Option<&'a str>,
    /// The password as written (not percent-decoded), if any.
    pub password: Option<&'a str>,
    /// The `host[:port]` entries of the authority, in order.
    pub hosts: Vec<&'a str>,
    /// Everything after the hosts that is not the query: `/path` (may be empty).
    pub path: &'a str,
    /// Everything after the first `?` that follows the hosts (fragment included), if any.
    pub query: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    /// Cuts `raw`; `None` when it has no `scheme://`.
    pub fn parse(raw: &'a str) -> Option<Self> {
        let (scheme, rest) = raw.split_once("://")?;
        // The userinfo ends at the last `@` that is not inside a secret parameter's value.
        let offset = scheme.len() + 3;
        let spans = secret_spans(raw);
        let at = rest
            .match_indices('@')
            .map(|(i, _)| i)
            .rfind(|i| !spans.iter().any(|(s, e)| (*s..*e).contains(&(i + offset))));
        let (userinfo, after) = match at {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (user, password) = match userinfo {
            Some(info) => match info.split_once(':') {
                Some((u, p)) => (Some(u), Some(p)),
                None => (Some(info), None),
            },
            None => (None, None),
        };
        let host_end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let hosts = after[..host_end].split(',').filter(|h| !h.is_empty()).collect();
        let tail = &after[host_end..];
        let (path, query) = match tail.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (tail, None),
        };
        Some(UrlParts { scheme, user, password, hosts, path, query })
    }

    /// The text before the hosts: `scheme://[user[:password]@]`, password as written.
    pub fn head(&self) -> String {
        let mut out = format!("{}://", self.scheme);
        if let Some(user) = self.user {
            out.push_str(user);
            if let Some(p) = self.password {
                out.push(':');
                out.push_str(p);
            }
            out.push('@');
        }
        out
    }

    /// The text after the hosts: `[/path][?query]`, as written.
    pub fn tail(&self) -> String {
        match self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.to_owned(),
        }
    }
}

impl std::fmt::Debug for UrlParts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlParts")
            .field("scheme", &self.scheme)
            .field("user", &self.user)
            .field("password", &self.password.map(|_| MASK))
            .field("hosts", &self.hosts)
            .field("path", &self.path)
            .field("query", &self.query.map(redact_query))
            .finish()
    }
}

/// Whether a query parameter's value is a secret. Case, `-` and `_` do not matter
/// (`sslPassword`, `ssl-key`, `auth_token`).
fn is_secret_param(key: &str) -> bool {
    let k: String = key.chars().filter(|c| *c != '-' && *c != '_').collect::<String>().to_ascii_lowercase();
    k.contains("pass")
        || k.contains("secret")
        || k.contains("token")
        || k.contains("pwd")
        || k.ends_with("key")
        || k == "auth"
        || k == "credentials"
}

/// `raw` with every secret replaced by [`MASK`], for logs, errors and `Debug`.
pub fn redact_url(raw: &str) -> String {
    let shown = match UrlParts::parse(raw) {
        Some(parts) => {
            let mut out = format!("{}://", parts.scheme);
            if let Some(user) = parts.user {
                out.push_str(user);
                if parts.password.is_some() {
                    out.push(':');
                    out.push_str(MASK);
                }
                out.push('@');
            }
            out.push_str(&parts.hosts.join(","));
            out.push_str(parts.path);
            if let Some(q) = parts.query {
                out.push('?');
                out.push_str(&redact_query(q));
            }
            out
        }
        // No authority (`sqlite:path?…`, `sqlite::memory:`, a forgotten `//`): a password can
        // still sit before an `@`, and the query can hold secrets.
        None => {
            let (head, query) = match raw.split_once('?') {
                Some((head, q)) => (head, Some(q)),
                None => (raw, None),
            };
            let mut out = match bare_password(head) {
                Some((start, end)) => format!("{}{MASK}{}", &head[..start], &head[end..]),
                None => head.to_owned(),
            };
            if let Some(q) = query {
                out.push('?');
                out.push_str(&redact_query(q));
            }
            out
        }
    };
    // A second reading (the `url` crate's) may place the password elsewhere.
    scrub(&shown, &secrets(raw))
}

/// `message` with `raw_url` and every secret it carries hidden — also percent-decoded or
/// percent-encoded, and the longer pieces a parser may have cut it into.
pub fn redact_message(message: &str, raw_url: &str) -> String {
    let mut out = message.to_owned();
    if !raw_url.is_empty() {
        out = out.replace(raw_url, &redact_url(raw_url));
    }
    scrub(&out, &secrets(raw_url))
}

/// `error` with every secret of `raw_url` hidden in its messages and in its source chain. A
/// source is replaced by its redacted text only when it shows a secret, so typed sources stay
/// reachable otherwise.
pub fn redact_error(error: LockError, raw_url: &str) -> LockError {
    let secrets = secrets(raw_url);
    let clean = |text: String| {
        let text = if raw_url.is_empty() { text } else { text.replace(raw_url, &redact_url(raw_url)) };
        scrub(&text, &secrets)
    };
    let clean_source = |source: BoxError| -> BoxError {
        let chain = chain_text(source.as_ref());
        if clean(chain.clone()) == chain {
            source
        } else {
            Box::new(Redacted(clean(chain)))
        }
    };
    match error {
        LockError::Config { reason } => LockError::Config { reason: clean(reason) },
        LockError::InvalidOptions { reason } => LockError::InvalidOptions { reason: clean(reason) },
        LockError::Unavailable { backend, reason, source } => {
            LockError::Unavailable { backend, reason: clean(reason), source: source.map(clean_source) }
        }
        LockError::Backend { backend, source } => LockError::Backend { backend, source: clean_source(source) },
        other => other,
    }
}

/// A source error whose text showed a secret: the text with the secret hidden, the chain flattened.
#[derive(Debug)]
struct Redacted(String);

impl std::fmt::Display for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Redacted {}

fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        text.push_str(": ");
        text.push_str(&e.to_string());
        next = e.source();
    }
    text
}

/// Every secret of `raw`, as the small parser and the `url` crate read it, with the forms a
/// message may quote it in (percent-decoded, percent-encoded, `{:?}`-escaped, cut into pieces).
pub fn secrets(raw: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    match UrlParts::parse(raw) {
        Some(parts) => found.extend(parts.password.map(str::to_owned)),
        None => found.extend(bare_password(raw).map(|(s, e)| raw[s..e].to_owned())),
    }
    // Secret parameters wherever a `?` or `&` introduces them: a password holding `@` or `?`
    // moves the boundaries the parsers see, the parameters stay where they are.
    found.extend(secret_spans(raw).into_iter().map(|(s, e)| raw[s..e].to_owned()));
    if let Ok(parsed) = url::Url::parse(raw) {
        found.extend(parsed.password().map(str::to_owned));
    }
    let mut all = Vec::new();
    for secret in found.into_iter().filter(|s| !s.is_empty()) {
        all.push(percent_decode(&secret));
        all.push(percent_encode(&secret));
        all.push(secret.escape_debug().to_string());
        all.extend(secret.split(DELIMITERS).filter(|p| p.len() >= MIN_PIECE).map(str::to_owned));
        all.push(secret);
    }
    // Longest first, so a piece never masks part of a longer secret and leaves the rest visible.
    all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    all.dedup();
    all.retain(|s| !s.is_empty() && s != MASK);
    all
}

/// Where a password sits in `user:password@host` written without `scheme://`: between the
/// first `:` and the last `@`.
fn bare_password(text: &str) -> Option<(usize, usize)> {
    let at = text.rfind('@')?;
    let colon = text[..at].find(':')?;
    Some((colon + 1, at))
}

fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    out
}

fn redact_query(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    let mut at = 0;
    for (start, end) in secret_spans(query) {
        out.push_str(&query[at..start]);
        out.push_str(MASK);
        at = end;
    }
    out.push_str(&query[at..]);
    out
}

/// Byte ranges of the values of secret parameters in `text`: a parameter starts at the text's
/// start or after `?` or `&`; its value runs to the next `&` that starts another `key=` (so a
/// value holding `&` or `?` is hidden whole).
fn secret_spans(text: &str) -> Vec<(usize, usize)> {
    // Start offsets of the segments between `?`/`&` delimiters.
    let starts: Vec<usize> = std::iter::once(0).chain(text.match_indices(['?', '&']).map(|(i, _)| i + 1)).collect();
    let seg_end = |i: usize| starts.get(i + 1).map(|next| next - 1).unwrap_or(text.len());
    let mut spans = Vec::new();
    let mut i = 0;
    while i < starts.len() {
        let segment = &text[starts[i]..seg_end(i)];
        match param_key(segment) {
            Some(key) if is_secret_param(key) => {
                let value_start = starts[i] + key.len() + 1;
                let mut j = i;
                while j + 1 < starts.len() && param_key(&text[starts[j + 1]..seg_end(j + 1)]).is_none() {
                    j += 1;
                }
                spans.push((value_start, seg_end(j)));
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    spans
}

/// The key of a `key=value` segment, if the segment looks like a parameter.
fn param_key(segment: &str) -> Option<&str> {
    let (key, _) = segment.split_once('=')?;
    let mut chars = key.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))).then_some(key)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{:?}` of the public parts shows no secret: not the password, not a secret query value.
    #[test]
    fn url_parts_debug_hides_the_secrets() {
        let raw = "redis://app:Hunter2word@h1:6379,h2:6379/0?password=Kiwi9Secret&timeout=3";
        let parts = UrlParts::parse(raw).expect("parses");
        assert_eq!(parts.password, Some("Hunter2word"), "the field keeps the text as written");
        let shown = format!("{parts:?} {parts:#?}");
        for secret in ["Hunter2word", "Kiwi9Secret"] {
            assert!(!shown.contains(secret), "Debug shows {secret}: {shown}");
        }
        for kept in ["app", "h1:6379", "h2:6379", "/0", "timeout=3", MASK] {
            assert!(shown.contains(kept), "Debug lost {kept}: {shown}");
        }
        let bare = UrlParts::parse("zk://h:2181/root").expect("parses");
        assert!(format!("{bare:?}").contains("password: None"), "{bare:?}");
    }

    /// Every printable ASCII character that is not a letter or digit.
    fn specials() -> impl Iterator<Item = char> {
        (0x21u8..0x7f).map(char::from).filter(|c| !c.is_ascii_alphanumeric())
    }

    /// Passwords with `c` at the start, the middle, the end, and doubled.
    fn passwords(c: char) -> Vec<String> {
        vec![
            format!("{c}Hunter2word"),
            format!("Hunter{c}2word"),
            format!("Hunter2word{c}"),
            format!("Hun{c}{c}ter2word"),
        ]
    }

    /// Neither the password nor a piece of it of [`MIN_PIECE`] characters or more is visible.
    fn assert_hidden(shown: &str, pw: &str, url: &str) {
        for piece in [pw, "Hunter", "2word", "ter2word"] {
            if pw.contains(piece) {
                assert!(!shown.contains(piece), "{url:?} shown as {shown:?} shows {piece:?}");
            }
        }
    }

    const TEMPLATES: &[&str] = &[
        "redis://user:{}@127.0.0.1:6379/0",
        "rediss://:{}@cache.example:6380",
        "redlock://user:{}@a:1,b:2,c:3?tls=true",
        "zk://user:{}@h1:2181,h2:2181/locks/root",
        "postgres://app:{}@db.example:5432/test?sslmode=verify-full",
        "mysql://root:{}@127.0.0.1:3306/test",
        "postgres://app@db/test?sslmode=verify-full&sslpassword={}",
        "postgres://app@db/test?password={}&sslmode=verify-full",
        "mysql://app@db/test?ssl-key={}",
        "sqlite:dlock.db?password={}",
        "user:{}@host:6379",
    ];

    #[test]
    fn no_generated_password_survives_in_a_url_or_a_message() {
        for c in specials() {
            for pw in passwords(c) {
                for template in TEMPLATES {
                    let url = template.replace("{}", &pw);
                    let shown = redact_url(&url);
                    assert!(shown.contains(MASK), "{url:?} shown as {shown:?}");
                    assert_hidden(&shown, &pw, &url);
                    let message = format!("failed: {url}; password {pw:?} rejected; near '{}'", percent_encode(&pw));
                    assert_hidden(&redact_message(&message, &url), &pw, &url);
                }
            }
        }
    }

    #[test]
    fn percent_encoded_passwords_are_hidden_in_both_forms() {
        let url = "postgres://u:p%2Fss%40w%3Frd@h/db";
        assert_eq!(redact_url(url), "postgres://u:***@h/db");
        assert_eq!(redact_message("auth failed for p/ss@w?rd", url), "auth failed for ***");
    }

    #[test]
    fn what_is_not_secret_stays() {
        for (raw, shown) in [
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("redis://u@h:6379", "redis://u@h:6379"),
            ("sqlite://dlock.db", "sqlite://dlock.db"),
            ("sqlite::memory:", "sqlite::memory:"),
            ("memory://", "memory://"),
            (
                "postgres://u:pw@h/db?sslmode=verify-full&application_name=x",
                "postgres://u:***@h/db?sslmode=verify-full&application_name=x",
            ),
            ("redlock://:pw@a:1,b:2,c:3", "redlock://:***@a:1,b:2,c:3"),
            ("zk://h1:2181,h2:2181/root", "zk://h1:2181,h2:2181/root"),
            (
                "mysql://u:pw@h/db?ssl-mode=VERIFY_IDENTITY&ssl_key=/k.pem",
                "mysql://u:***@h/db?ssl-mode=VERIFY_IDENTITY&ssl_key=***",
            ),
        ] {
            assert_eq!(redact_url(raw), shown, "{raw}");
        }
        assert_eq!(redact_message("no url here", "redis://h"), "no url here");
        assert_eq!(
            redact_url("postgres://u:a@b@h/db?sslpassword=c@d&sslmode=verify-full"),
            "postgres://u:***@h/db?sslpassword=***&sslmode=verify-full"
        );
    }

    #[test]
    fn multi_host_urls_are_cut_by_one_parser() {
        let p = UrlParts::parse("redlock://u:p,w@a:1,b:2,c:3/1?tls=true").expect("parses");
        assert_eq!((p.scheme, p.user, p.password), ("redlock", Some("u"), Some("p,w")));
        assert_eq!(p.hosts, vec!["a:1", "b:2", "c:3"]);
        assert_eq!((p.path, p.query), ("/1", Some("tls=true")));
        assert_eq!(format!("{}{}{}", p.head(), p.hosts.join(","), p.tail()), "redlock://u:p,w@a:1,b:2,c:3/1?tls=true");
        let p = UrlParts::parse("zk://h:2181/root/x").expect("parses");
        assert_eq!((p.user, p.hosts, p.path, p.query), (None, vec!["h:2181"], "/root/x", None));
        assert_eq!(UrlParts::parse("sqlite::memory:"), None);
    }

    #[test]
    fn secret_parameters() {
        for k in ["password", "PASSWORD", "sslpassword", "sslkey", "ssl-key", "ssl_key", "pass", "auth_token", "secret"]
        {
            assert!(is_secret_param(k), "{k}");
        }
        for k in ["sslmode", "ssl-mode", "sslrootcert", "tls", "application_name", "user", "key_prefix"] {
            assert!(!is_secret_param(k), "{k}");
        }
    }

    #[test]
    fn errors_lose_their_secrets_and_keep_their_kind() {
        let url = "zk://u:Hunter2/word@h:1/root";
        let e = redact_error(LockError::config(format!("bad port in {url}")), url);
        assert_eq!(e.to_string(), "configuration error: bad port in zk://u:***@h:1/root");
        let e = redact_error(LockError::backend("zk", std::io::Error::other("near 'word@h'")), url);
        assert!(matches!(e, LockError::Backend { .. }));
        assert!(!e.to_string().contains("word"), "{e}");
        let e = redact_error(LockError::unavailable_from("zk", "down", std::io::Error::other("refused")), url);
        let source = std::error::Error::source(&e).expect("kept");
        assert!(source.downcast_ref::<std::io::Error>().is_some(), "a clean source stays typed");
    }
}
