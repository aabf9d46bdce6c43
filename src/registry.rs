//! The backend table: the shipped backends' rows and the ones registered at run time, and the
//! lookup from a URL's scheme to its row, used by configuration, [`crate::Client`] and the
//! `dlock` tool alike, so a registered backend is reached everywhere ours are.

use std::sync::RwLock;

use lock_core::LockError;

use crate::backends::SHIPPED;
use crate::driver::Driver;
use crate::scheme::Scheme;
use crate::url::redact_url;

/// The rows registered at run time (after the shipped ones, which they may not shadow).
static REGISTERED: RwLock<Vec<Driver>> = RwLock::new(Vec::new());

/// The top-level values of `dlock.toml`.
pub(crate) const VALUE_KEYS: &[&str] = &["url", "ttl", "wait", "request_timeout"];
/// The sections of the shipped backends in `dlock.toml`.
pub(crate) const SHIPPED_SECTIONS: &[&str] = &["sql", "redis", "zk"];

/// Adds a backend to the table: from then on its URLs work in `dlock.toml`, `DLOCK_URL`,
/// [`crate::Client`], [`crate::connect()`] and the `dlock` tool (the `dlock-cli` package's
/// `dlock_cli::main` in the application's own binary), and its `[name]` section of the configuration reaches its connect
/// function through [`crate::Config::section`].
///
/// Registering the same name with the same schemes again is a no-op (tests may each register);
/// a name or scheme another backend already has is a `Config` error, as is a name that is a
/// top-level configuration key (`url`, `sql`, …).
///
/// ```
/// # use std::sync::Arc;
/// # use dlock::{Config, Connecting, Driver, LockProvider, MemoryLock};
/// fn connect(config: &Config) -> Connecting<'_> {
///     Box::pin(async move { Ok(Arc::new(MemoryLock::named(&config.url)) as Arc<dyn LockProvider>) })
/// }
/// dlock::register_backend(Driver::new("scratch", &["scratch"], connect))?;
/// assert_eq!(dlock::Scheme::of("scratch://x")?, dlock::Scheme::Registered("scratch"));
/// assert!(dlock::register_backend(Driver::new("mine", &["redis"], connect)).is_err(), "redis is taken");
/// # Ok::<(), dlock::LockError>(())
/// ```
pub fn register_backend(driver: Driver) -> Result<(), LockError> {
    let name = driver.name;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return Err(LockError::config(format!(
            "a backend name is lower-case letters, digits and '_' (it names the config section): {name:?}"
        )));
    }
    if driver.schemes.is_empty() || driver.schemes.iter().any(|s| s.is_empty() || s.to_ascii_lowercase() != *s) {
        return Err(LockError::config(format!("the backend {name:?} needs lower-case URL schemes")));
    }
    if VALUE_KEYS.contains(&name) || SHIPPED_SECTIONS.contains(&name) {
        return Err(LockError::config(format!("the backend name {name:?} is a top-level config key")));
    }
    let mut registered = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    for row in SHIPPED.iter().chain(registered.iter()) {
        if row.name == name && row.schemes == driver.schemes && !SHIPPED.iter().any(|s| s.name == name) {
            return Ok(());
        }
        let taken = driver.schemes.iter().find(|s| row.schemes.contains(s));
        if row.name == name || taken.is_some() {
            return Err(LockError::config(format!(
                "the backend {name:?} cannot be registered: the {} {:?} belongs to the backend {:?}",
                if taken.is_some() { "scheme" } else { "name" },
                taken.copied().unwrap_or(name),
                row.name
            )));
        }
    }
    registered.push(driver);
    Ok(())
}

/// Registers, once, the backends this build offers through the open table (as a third party
/// would): before the table is first read, so their URLs and sections are known everywhere.
fn feature_backends() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(feature = "etcd")]
        if let Err(e) = register_backend(crate::etcd::driver()) {
            tracing::error!("the etcd backend could not be registered: {e}");
        }
    });
}

/// Every row of the table: the shipped backends (compiled in or not), then the registered ones.
pub fn drivers() -> Vec<Driver> {
    feature_backends();
    let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    SHIPPED.iter().chain(registered.iter()).copied().collect()
}

/// The names of the registered backends, which are also their configuration sections.
pub(crate) fn registered_names() -> Vec<&'static str> {
    feature_backends();
    REGISTERED.read().unwrap_or_else(|e| e.into_inner()).iter().map(|d| d.name).collect()
}

/// The row of the backend `url` names, or a `Config` error naming the known URL forms.
pub fn driver_of(url: &str) -> Result<Driver, LockError> {
    let name = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    if name.is_empty() {
        return Err(LockError::config(format!(
            "the backend URL {:?} has no scheme; use one of {}",
            redact_url(url),
            known_forms()
        )));
    }
    drivers().into_iter().find(|row| row.schemes.contains(&name.as_str())).ok_or_else(|| {
        LockError::config(format!(
            "unknown backend scheme {:?} in {:?}; use one of {}",
            redact_url(&name),
            redact_url(url),
            known_forms()
        ))
    })
}

/// The URL forms of every row, for messages.
fn known_forms() -> String {
    drivers().iter().map(|row| row.form).collect::<Vec<_>>().join(", ")
}

impl Scheme {
    /// The backend of `url`, or a `Config` error naming the known ones.
    pub fn of(url: &str) -> Result<Scheme, LockError> {
        driver_of(url).map(|row| row.scheme)
    }

    /// This backend's row of the table.
    pub fn driver(self) -> Option<Driver> {
        drivers().into_iter().find(|row| row.scheme == self)
    }

    /// The cargo feature of `dlock` that compiles this backend in (`None`: always there, or
    /// registered).
    pub fn feature(self) -> Option<&'static str> {
        self.driver().and_then(|row| row.feature)
    }

    /// The port a host without one is reached on (`None`: no network).
    pub fn default_port(self) -> Option<u16> {
        self.driver().and_then(|row| row.default_port)
    }

    /// Whether this build (and process) has the backend.
    pub fn is_compiled(self) -> bool {
        self.driver().is_some_and(|row| row.connect.is_some())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use lock_core::{LockProvider, MemoryLock};

    use super::*;
    use crate::driver::Connecting;
    use crate::Config;

    #[test]
    fn schemes() {
        assert_eq!(Scheme::of("sqlite://x.db").ok(), Some(Scheme::Sqlite));
        assert_eq!(Scheme::of("sqlite::memory:").ok(), Some(Scheme::Sqlite));
        assert_eq!(Scheme::of("MariaDB://h/db").ok(), Some(Scheme::Mysql));
        assert_eq!(Scheme::of("rediss://h").ok(), Some(Scheme::Redis));
        assert_eq!(Scheme::of("redis+sentinel://a:1,b:2,c:3/m").ok(), Some(Scheme::Redis));
        assert_eq!(Scheme::of("rediss+sentinel://a:1,b:2,c:3/m").ok(), Some(Scheme::Redis));
        assert_eq!(Scheme::of("redis+cluster://a:1,b:2,c:3").ok(), Some(Scheme::Redis));
        assert_eq!(Scheme::of("redlock://a:1,b:2,c:3").ok(), Some(Scheme::Redlock));
        assert_eq!(Scheme::of("zk://h:2181/r").ok(), Some(Scheme::ZooKeeper));
        for bad in ["", "nothing", "ftp://x", "://x"] {
            assert!(matches!(Scheme::of(bad), Err(LockError::Config { .. })), "{bad}");
        }
        let e = Scheme::of("ftp://u:pw@x").expect_err("unknown");
        assert!(!e.to_string().contains("pw"), "{e}");
        assert!(e.to_string().contains("zk://h1:p1,h2:p2/root"), "the known forms are named: {e}");
    }

    #[test]
    fn every_shipped_scheme_has_one_row() {
        for scheme in [
            Scheme::Memory,
            Scheme::Sqlite,
            Scheme::Postgres,
            Scheme::Mysql,
            Scheme::Redis,
            Scheme::Redlock,
            Scheme::ZooKeeper,
        ] {
            assert_eq!(SHIPPED.iter().filter(|row| row.scheme == scheme).count(), 1, "{scheme:?}");
            for name in scheme.driver().expect("a row").schemes {
                assert_eq!(Scheme::of(&format!("{name}://h")).ok(), Some(scheme));
            }
        }
    }

    #[test]
    fn a_backend_not_compiled_in_names_its_feature() {
        for row in SHIPPED {
            let Some(feature) = row.feature else { continue };
            let e = row.not_compiled();
            assert!(matches!(e, LockError::Config { .. }), "{e}");
            assert!(e.to_string().contains(&format!("{feature:?}")), "{e}");
        }
        assert!(Scheme::Memory.is_compiled(), "memory is always there");
    }

    fn connect(config: &Config) -> Connecting<'_> {
        Box::pin(async move { Ok(Arc::new(MemoryLock::named(&config.url)) as Arc<dyn LockProvider>) })
    }

    #[test]
    fn registration_opens_the_table_but_takes_nothing_that_is_taken() {
        assert!(Scheme::of("regtest://x").is_err());
        register_backend(Driver::new("regtest", &["regtest", "regtests"], connect).default_port(7)).expect("new");
        register_backend(Driver::new("regtest", &["regtest", "regtests"], connect)).expect("again: a no-op");
        assert_eq!(Scheme::of("REGTESTS://h").ok(), Some(Scheme::Registered("regtest")));
        assert_eq!(Scheme::Registered("regtest").default_port(), Some(7));
        assert!(Scheme::Registered("regtest").is_compiled());
        for (name, schemes) in [
            ("regtest", &["other"][..]),
            ("regtest2", &["regtests"][..]),
            ("mine", &["postgres"][..]),
            ("redis", &["myredis"][..]),
            ("sql", &["mysql2"][..]),
            ("Upper", &["upper"][..]),
            ("lower", &["UPPER"][..]),
        ] {
            let e = register_backend(Driver::new(name, schemes, connect)).expect_err(name);
            assert!(matches!(e, LockError::Config { .. }), "{e}");
        }
    }
}
