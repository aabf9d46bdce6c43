//! URL parameters: each dialect lists the ones its driver reads ([`Accepted`]), and anything
//! else — a misspelt `ssl_mode=`, `SSLMODE=`, a libpq parameter sqlx does not know — is a
//! `Config` error instead of being ignored, so a URL never seems to ask for TLS it does not get.
//! A parameter given twice (or under two of its spellings) is refused too: the driver takes the
//! last one, while a reader, and the TLS warning, see the first.

use lock_core::backend::redact::{redact_message, secrets};
use lock_core::LockError;

/// The parameters one dialect accepts.
pub(crate) struct Accepted {
    /// `postgres`, `mysql`, `sqlite`: names the dialect in messages.
    pub(crate) label: &'static str,
    /// One entry per parameter, with all its spellings (the first is the one to suggest).
    pub(crate) names: &'static [&'static [&'static str]],
    /// Families of keys written `prefix[...]` (PostgreSQL's `options[search_path]`).
    pub(crate) bracketed: &'static [&'static str],
    /// Whether the URL may carry a `#fragment` (SQLite paths may hold `#`; the network URLs'
    /// drivers ignore a fragment).
    pub(crate) fragment: bool,
}

impl Accepted {
    /// Checks the keys of `query` (the text after the first `?`, without fragment). `url` is
    /// only used to hide its secrets in the message.
    pub(crate) fn check_query(&self, query: &str, url: &str) -> Result<(), LockError> {
        let mut seen: Vec<usize> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            // Decoded as the driver decodes it (`ssl%2Dmode` is `ssl-mode` to sqlx).
            let raw = pair.split_once('=').map_or(pair, |(k, _)| k);
            let decoded = url::form_urlencoded::parse(raw.as_bytes()).next().map(|(k, _)| k.into_owned());
            let key = decoded.as_deref().unwrap_or(raw);
            let entry = self.names.iter().position(|spellings| spellings.contains(&key));
            if entry.is_none() && self.is_bracketed(key) {
                continue;
            }
            let Some(entry) = entry else { return Err(self.unknown(key, url)) };
            if seen.contains(&entry) {
                return Err(LockError::config(format!(
                    "the {} URL gives parameter {:?} twice (or under two spellings); the driver would silently \
                     use the last one: keep one",
                    self.label, self.names[entry][0]
                )));
            }
            seen.push(entry);
        }
        Ok(())
    }

    /// Checks a network URL (`scheme://…?query#fragment`) the way the `url` crate, and so sqlx,
    /// cuts it. A URL the `url` crate cannot parse is left to the driver's own error.
    pub(crate) fn check_url(&self, url: &str) -> Result<(), LockError> {
        let Ok(parsed) = url::Url::parse(url) else { return Ok(()) };
        if parsed.fragment().is_some() && !self.fragment {
            return Err(LockError::config(format!(
                "the {} URL has a #fragment, which the driver ignores; remove it (a '#' in a password is \
                 written %23)",
                self.label
            )));
        }
        self.check_query(parsed.query().unwrap_or(""), url)
    }

    fn is_bracketed(&self, key: &str) -> bool {
        self.bracketed.iter().any(|prefix| {
            key.strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix('['))
                .and_then(|rest| rest.strip_suffix(']'))
                .is_some_and(|inner| !inner.is_empty())
        })
    }

    fn unknown(&self, key: &str, url: &str) -> LockError {
        // Only a key that looks like a name, and is no piece of a secret, is quoted: a raw `?`
        // or `&` in a password or a secret parameter's value cuts it into "keys".
        let plain = !key.is_empty()
            && key.len() <= 40
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'[' | b']'))
            && !secrets(url).iter().any(|s| s.contains(key));
        let shown = if plain { format!("{key:?}") } else { "(a key that is not a plain name)".to_owned() };
        let fold = |s: &str| s.to_ascii_lowercase().replace(['-', '_'], "");
        let hint = self
            .names
            .iter()
            .find(|spellings| plain && spellings.iter().any(|s| fold(s) == fold(key)))
            .map(|spellings| format!("did you mean {:?}? ", spellings[0]))
            .unwrap_or_default();
        let mut accepted: Vec<String> = self.names.iter().map(|s| s.join("/")).collect();
        accepted.extend(self.bracketed.iter().map(|p| format!("{p}[…]")));
        let message = format!(
            "unknown {} URL parameter {shown}: the driver would ignore it (a misspelt TLS mode leaves the \
             connection unverified); {hint}accepted: {} (a percent-encoded '?' or '&' in a password is \
             %3F / %26)",
            self.label,
            accepted.join(", ")
        );
        LockError::config(redact_message(&message, url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Accepted = Accepted {
        label: "test",
        names: &[&["sslmode", "ssl-mode"], &["port"]],
        bracketed: &["options"],
        fragment: false,
    };

    fn reason(r: Result<(), LockError>) -> String {
        match r {
            Err(LockError::Config { reason }) => reason,
            other => panic!("expected a Config error, got {other:?}"),
        }
    }

    #[test]
    fn known_keys_pass_and_others_are_named() {
        for ok in ["", "sslmode=x", "ssl-mode=x&port=1", "options[search_path]=a", "port", "&&port=2&", "ssl%2Dmode=x"]
        {
            assert!(T.check_query(ok, "x://h").is_ok(), "{ok}");
        }
        for (bad, hint) in [
            ("ssl_mode=verify-full", Some("sslmode")),
            ("SSLMODE=verify-full", Some("sslmode")),
            ("sslMode=x", Some("sslmode")),
            ("Port=1", Some("port")),
            ("sslpassword=x", None),
            ("options[]=x", None),
            ("options[x=y", None),
        ] {
            let r = reason(T.check_query(bad, "x://h"));
            assert!(r.contains("unknown test URL parameter") && r.contains("sslmode/ssl-mode"), "{r}");
            match hint {
                Some(h) => assert!(r.contains(&format!("did you mean {h:?}")), "{r}"),
                None => assert!(!r.contains("did you mean"), "{r}"),
            }
        }
    }

    #[test]
    fn a_parameter_twice_is_refused() {
        for bad in [
            "sslmode=verify-full&sslmode=disable",
            "sslmode=verify-full&ssl-mode=require",
            "sslmode=verify-full&%73slmode=disable",
        ] {
            assert!(reason(T.check_query(bad, "x://h")).contains("twice"), "{bad}");
        }
    }

    #[test]
    fn fragments_and_secrets() {
        assert!(reason(T.check_url("x://u:pw@h/db#frag")).contains("fragment"));
        assert!(T.check_url("x://u:pw@h/db?sslmode=verify-full").is_ok());
        // A raw `?` in a password: the parser cuts the URL there; the message must not show
        // what follows.
        let url = "x://u:1?topsecret@h/db";
        let r = reason(T.check_url(url));
        assert!(!r.contains("topsecret"), "{r}");
        let r = reason(T.check_query("s3cr3t@h/db=1", "x://u:pre?s3cr3t@h/db=1"));
        assert!(!r.contains("s3cr3t"), "{r}");
        // A raw `&` in a secret parameter's value.
        let url = "x://h/db?sslmode=verify-full&password=Kiwi&9Secret";
        let r = reason(T.check_url(url));
        assert!(!r.contains("Kiwi") && !r.contains("9Secret"), "{r}");
    }
}
