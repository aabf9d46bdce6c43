//! Loading and checking a [`Config`]: figment layers (defaults < file < `DLOCK_*`), duration
//! bounds, the deprecated per-backend timeout keys, and which top-level keys exist (ours plus one
//! section per registered backend).

use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Env, Format, Toml};
use figment::Figment;
use lock_core::LockError;

use crate::config::{Config, DEFAULT_URL, MAX_DURATION, MAX_REQUEST_TIMEOUT, MAX_TIMEOUT};
use crate::registry::{registered_names, SHIPPED_SECTIONS, VALUE_KEYS};
use crate::scheme::Scheme;

/// The per-backend keys that `request_timeout` replaces in the file.
const BACKEND_TIMEOUT_KEYS: &[&str] = &["sql.request_timeout", "redis.request_timeout", "zk.request_timeout"];

impl Config {
    /// Loads defaults < `dlock.toml` in the working directory (or the file named by
    /// `DLOCK_CONFIG`) < `DLOCK_*` environment variables.
    ///
    /// When neither names a `url`, this is the quick start's embedded SQLite file
    /// ([`DEFAULT_URL`], `dlock.db` in the working directory), and a `WARN` says so: on more than
    /// one host that is one lock per host, not one lock. Production code that must not fall
    /// back calls [`Config::load_required`].
    pub fn load() -> Result<Self, LockError> {
        let (config, url_given) = Self::load_default_file()?;
        if !url_given {
            let file =
                std::env::current_dir().map(|d| d.join("dlock.db")).unwrap_or_else(|_| PathBuf::from("dlock.db"));
            tracing::warn!(
                backend = "sqlite",
                url = DEFAULT_URL,
                file = %file.display(),
                "no backend URL configured (neither DLOCK_URL nor url in {}): falling back to the SQLite file {}, \
                 which locks only among processes of this host; set DLOCK_URL or url in the config file, or call \
                 Config::load_required() to make a missing URL an error",
                Self::default_file().display(),
                file.display()
            );
        }
        Ok(config)
    }

    /// [`Config::load`] without the fallback: a `Config` error when neither `DLOCK_URL` nor the
    /// config file (`dlock.toml` or the file named by `DLOCK_CONFIG`) names a `url`.
    ///
    /// ```
    /// # figment::Jail::expect_with(|jail| {
    /// jail.set_env("DLOCK_URL", "memory://");
    /// assert_eq!(dlock::Config::load_required().expect("a URL is set").url, "memory://");
    /// # Ok(()) });
    /// ```
    pub fn load_required() -> Result<Self, LockError> {
        let (config, url_given) = Self::load_default_file()?;
        if !url_given {
            return Err(LockError::config(format!(
                "no backend URL configured: set DLOCK_URL (e.g. DLOCK_URL=postgres://user@host/db) or write \
                 url = \"…\" in {}; Config::load() would fall back to a SQLite file in the working directory",
                Self::default_file().display()
            )));
        }
        Ok(config)
    }

    /// The config file [`Config::load`] reads: the one `DLOCK_CONFIG` names, else `dlock.toml`
    /// in the working directory (it need not exist).
    pub fn default_file() -> PathBuf {
        std::env::var_os("DLOCK_CONFIG").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("dlock.toml"))
    }

    /// The config of [`Config::load`] and whether the file or the environment named a `url`.
    fn load_default_file() -> Result<(Self, bool), LockError> {
        let fig = Self::figment(Some(&Self::default_file()))?;
        let url_given = fig.find_value("url").is_ok();
        Ok((Self::extract(fig)?, url_given))
    }

    /// Loads defaults < the given file (which must exist) < `DLOCK_*` environment variables.
    pub fn load_file(path: &Path) -> Result<Self, LockError> {
        if !path.is_file() {
            return Err(LockError::config(format!("config file {} does not exist", path.display())));
        }
        Self::figment(Some(path)).and_then(Self::extract)
    }

    /// The figment behind [`Config::load`], for applications that add their own layers.
    pub fn figment(file: Option<&Path>) -> Result<Figment, LockError> {
        let mut fig = Figment::new();
        if let Some(file) = file {
            fig = fig.merge(Toml::file(file));
        }
        let env = Env::prefixed("DLOCK_").split("__").filter(|k| {
            let key = k.as_str().to_ascii_lowercase();
            let registered = registered_names();
            VALUE_KEYS.iter().chain(SHIPPED_SECTIONS).chain(&registered).any(|top| {
                key == *top || key.strip_prefix(top).is_some_and(|rest| rest.starts_with("__") || rest.starts_with('.'))
            })
        });
        Ok(fig.merge(env))
    }

    /// Extracts and checks a [`Config`] from a figment.
    pub fn extract(fig: Figment) -> Result<Self, LockError> {
        // Before the typed extraction: nested backend keys are checked here too, by path, so a
        // huge timeout from the file or the environment never reaches a backend.
        if let Ok(tree) = fig.extract::<figment::value::Value>() {
            check_durations(&tree, "")?;
            for old in BACKEND_TIMEOUT_KEYS {
                if tree.find_ref(old).is_some() {
                    tracing::warn!(
                        "config key {old} is deprecated: set the top-level request_timeout, which bounds every request \
                         of every backend{}",
                        if tree.find_ref("request_timeout").is_some() { " (it is set, and wins)" } else { "" }
                    );
                }
            }
        }
        let config: Config = fig.extract().map_err(|e| {
            LockError::config(format!("{e}. Known keys: {}; durations look like \"10s\" or \"500ms\"", known_keys()))
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values that do not need a server.
    pub fn validate(&self) -> Result<(), LockError> {
        Scheme::of(&self.url)?;
        let registered = registered_names();
        if let Some(unknown) = self.sections.keys().find(|k| !registered.contains(&k.as_str())) {
            return Err(LockError::config(format!(
                "unknown config key {unknown:?}. Known keys: {}; a table of a backend of your own needs \
                 dlock::register_backend first",
                known_keys()
            )));
        }
        if self.ttl.is_zero() {
            return Err(LockError::config("ttl is zero; give leases a positive time to live, e.g. ttl = \"30s\""));
        }
        check_duration("ttl", self.ttl)?;
        if let Some(wait) = self.wait {
            check_duration("wait", wait)?;
        }
        if let Some(t) = self.request_timeout {
            if t.is_zero() || t > MAX_REQUEST_TIMEOUT {
                return Err(LockError::config(format!(
                    "request_timeout = {} is out of range; use a bound above zero and at most an hour, e.g. \"2s\"",
                    humantime::format_duration(t)
                )));
            }
        }
        Ok(())
    }
}

/// The top-level keys, for messages: ours, then a section per registered backend.
fn known_keys() -> String {
    let sections = SHIPPED_SECTIONS.iter().copied().chain(registered_names()).map(|name| format!("[{name}]"));
    VALUE_KEYS.iter().map(|key| key.to_string()).chain(sections).collect::<Vec<_>>().join(", ")
}

fn check_duration(key: &str, value: Duration) -> Result<(), LockError> {
    let max = if key.ends_with("timeout") { MAX_TIMEOUT } else { MAX_DURATION };
    if value > max {
        return Err(LockError::config(format!(
            "{key} = {} is longer than the {} it may be; use a shorter one{}",
            humantime::format_duration(value),
            humantime::format_duration(max),
            if key == "wait" { " or leave wait out to wait forever" } else { "" }
        )));
    }
    Ok(())
}

/// Every string in the tree that reads as a duration is at most [`MAX_DURATION`] (a timeout: at
/// most [`MAX_TIMEOUT`]).
fn check_durations(value: &figment::value::Value, path: &str) -> Result<(), LockError> {
    use figment::value::Value;
    match value {
        Value::Dict(_, dict) => dict.iter().try_for_each(|(k, v)| {
            check_durations(v, &if path.is_empty() { k.clone() } else { format!("{path}.{k}") })
        }),
        Value::Array(_, items) => items.iter().try_for_each(|v| check_durations(v, path)),
        Value::String(_, text) => match humantime::parse_duration(text) {
            Ok(d) => check_duration(path, d),
            Err(humantime::DurationError::NumberOverflow) => Err(LockError::config(format!(
                "{path} = {text:?} overflows; durations may be at most {}",
                humantime::format_duration(if path.ends_with("timeout") { MAX_TIMEOUT } else { MAX_DURATION })
            ))),
            Err(_) => Ok(()),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail closures return figment::Error
mod tests {
    use super::*;
    use figment::Jail;
    use lock_core::AcquireOptions;

    #[test]
    fn defaults_to_embedded_sqlite() {
        Jail::expect_with(|_jail| {
            let c = Config::load().map_err(|e| e.to_string())?;
            assert_eq!(c.url, DEFAULT_URL);
            assert_eq!(c.ttl, Duration::from_secs(30));
            Ok(())
        });
    }

    /// Logs written by `f`, at every level.
    fn logs_of(f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buf.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn the_fallback_to_sqlite_is_said_out_loud() {
        Jail::expect_with(|jail| {
            let logs = logs_of(|| assert_eq!(Config::load().expect("loads").url, DEFAULT_URL));
            assert!(logs.contains("WARN"), "{logs}");
            for piece in ["sqlite", "dlock.db", "DLOCK_URL", "load_required"] {
                assert!(logs.contains(piece), "the warning should name {piece:?}: {logs}");
            }
            // A URL from the file or the environment: no warning.
            jail.create_file("dlock.toml", "url = \"memory://file\"\n")?;
            let logs = logs_of(|| assert_eq!(Config::load().expect("loads").url, "memory://file"));
            assert!(!logs.contains("falling back"), "{logs}");
            jail.create_file("dlock.toml", "ttl = \"5s\"\n")?;
            jail.set_env("DLOCK_URL", "memory://env");
            let logs = logs_of(|| assert_eq!(Config::load().expect("loads").url, "memory://env"));
            assert!(!logs.contains("falling back"), "{logs}");
            Ok(())
        });
    }

    #[test]
    fn load_required_refuses_to_fall_back() {
        Jail::expect_with(|jail| {
            let says = |e: LockError| match e {
                LockError::Config { reason } => {
                    assert!(reason.contains("DLOCK_URL") && reason.contains("dlock.toml"), "{reason}");
                }
                other => panic!("expected a Config error, got {other}"),
            };
            says(Config::load_required().expect_err("no URL anywhere"));
            // A file without a url is no URL either.
            jail.create_file("dlock.toml", "ttl = \"5s\"\n")?;
            says(Config::load_required().expect_err("a file without url"));
            jail.create_file("dlock.toml", "url = \"memory://file\"\nttl = \"5s\"\n")?;
            let c = Config::load_required().expect("a URL in the file");
            assert_eq!((c.url.as_str(), c.ttl), ("memory://file", Duration::from_secs(5)));
            jail.set_env("DLOCK_URL", "memory://env");
            assert_eq!(Config::load_required().expect("a URL in the environment").url, "memory://env");
            Ok(())
        });
    }

    #[test]
    fn file_then_env() {
        Jail::expect_with(|jail| {
            jail.create_file("dlock.toml", "url = \"memory://a\"\nttl = \"5s\"\nwait = \"2s\"\n")?;
            let c = Config::load().map_err(|e| e.to_string())?;
            assert_eq!(c.url, "memory://a");
            assert_eq!(c.ttl, Duration::from_secs(5));
            assert_eq!(c.wait, Some(Duration::from_secs(2)));
            jail.set_env("DLOCK_URL", "memory://b");
            jail.set_env("DLOCK_TEST_REDIS_URL", "redis://ignored");
            let c = Config::load().map_err(|e| e.to_string())?;
            assert_eq!(c.url, "memory://b");
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        Jail::expect_with(|jail| {
            jail.create_file("dlock.toml", "url = \"memory://\"\nttll = \"5s\"\n")?;
            let e = Config::load().expect_err("typo must fail");
            assert!(matches!(e, LockError::Config { .. }), "{e}");
            assert!(e.to_string().contains("ttll"), "{e}");
            jail.create_file("dlock.toml", "url = \"memory://\"\nttl = \"soon\"\n")?;
            assert!(matches!(Config::load(), Err(LockError::Config { .. })));
            jail.create_file("dlock.toml", "url = \"ftp://x\"\n")?;
            let e = Config::load().expect_err("unknown scheme");
            assert!(e.to_string().contains("ftp"), "{e}");
            jail.create_file("dlock.toml", "this is not toml = = \n")?;
            assert!(matches!(Config::load(), Err(LockError::Config { .. })));
            jail.create_file("dlock.toml", "url = \"memory://\"\nttl = \"0s\"\n")?;
            assert!(matches!(Config::load(), Err(LockError::Config { .. })));
            Ok(())
        });
    }

    #[test]
    fn one_request_timeout_reaches_every_backend() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "dlock.toml",
                "url = \"memory://\"\nrequest_timeout = \"750ms\"\n[sql]\nrequest_timeout = \"9s\"\n",
            )?;
            let c = Config::load().map_err(|e| e.to_string())?;
            let t = Duration::from_millis(750);
            assert_eq!(c.request_timeout, Some(t));
            assert_eq!(c.acquire_options().request_timeout, t);
            assert_eq!(c.sql_options().request_timeout, t, "the top-level key wins over the deprecated one");
            assert_eq!(c.redis_options().request_timeout, t);
            assert_eq!(c.zk_options().request_timeout, t);
            jail.set_env("DLOCK_REQUEST_TIMEOUT", "2s");
            let c = Config::load().map_err(|e| e.to_string())?;
            assert_eq!(c.sql_options().request_timeout, Duration::from_secs(2));
            jail.set_env("DLOCK_REQUEST_TIMEOUT", "0s");
            assert!(matches!(Config::load(), Err(LockError::Config { .. })));
            Ok(())
        });
        Jail::expect_with(|jail| {
            // Without the top-level key, the per-backend keys still apply.
            jail.create_file("dlock.toml", "url = \"memory://\"\n[sql]\nrequest_timeout = \"9s\"\n")?;
            let c = Config::load().map_err(|e| e.to_string())?;
            assert_eq!(c.request_timeout, None);
            assert_eq!(c.sql_options().request_timeout, Duration::from_secs(9));
            assert_eq!(c.acquire_options().request_timeout, AcquireOptions::new(c.ttl).request_timeout);
            Ok(())
        });
    }

    #[test]
    fn secrets_are_redacted() {
        let c = Config::from_url("redlock://admin:hunter2@h1:1,h2:2?password=hunter3");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter"), "{shown}");
        let c = Config::from_url("postgres://u:pa/ss?w#rd@h/db?sslpassword=k3y-secret&sslmode=verify-full");
        let shown = format!("{c:?} {}", c.redacted_url());
        for secret in ["pa/ss?w#rd", "k3y-secret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
