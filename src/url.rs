//! Backend URLs: the one scheme table (which scheme names which backend, the cargo feature that
//! compiles it in, its default port) used by config, connect and the CLI, and the one redactor
//! ([`lock_core::backend::redact`]) every URL shown to a person goes through.

use lock_core::LockError;

pub use lock_core::backend::redact::{redact_error, redact_message, redact_url, UrlParts};

/// The backend a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `memory://[name]`: the in-process reference backend.
    Memory,
    /// `sqlite://path` or `sqlite::memory:`.
    Sqlite,
    /// `postgres://` or `postgresql://`.
    Postgres,
    /// `mysql://` or `mariadb://`.
    Mysql,
    /// `redis://` or `rediss://` (TLS).
    Redis,
    /// `redlock://h1:p1,h2:p2,…`.
    Redlock,
    /// `zk://h1:p1,h2:p2/root`.
    ZooKeeper,
}

/// One row of the scheme table.
struct Row {
    names: &'static [&'static str],
    scheme: Scheme,
    /// The cargo feature of this crate that compiles the backend in (`None`: always there).
    feature: Option<&'static str>,
    default_port: Option<u16>,
    /// How the URL looks, for error messages.
    form: &'static str,
}

const TABLE: &[Row] = &[
    Row { names: &["memory"], scheme: Scheme::Memory, feature: None, default_port: None, form: "memory://[name]" },
    Row {
        names: &["sqlite"],
        scheme: Scheme::Sqlite,
        feature: Some("sqlite"),
        default_port: None,
        form: "sqlite://path",
    },
    Row {
        names: &["postgres", "postgresql"],
        scheme: Scheme::Postgres,
        feature: Some("postgres"),
        default_port: Some(5432),
        form: "postgres://user:password@host/db?sslmode=verify-full",
    },
    Row {
        names: &["mysql", "mariadb"],
        scheme: Scheme::Mysql,
        feature: Some("mysql"),
        default_port: Some(3306),
        form: "mysql://user:password@host/db?ssl-mode=verify_identity",
    },
    Row {
        // redis+sentinel: lock-redis asks the Sentinels for the primary; redis+cluster: the
        // cluster client routes by slot (same backend and options).
        names: &["redis", "rediss", "redis+sentinel", "redis+cluster"],
        scheme: Scheme::Redis,
        feature: Some("redis"),
        default_port: Some(6379),
        form: "redis://host:port (rediss:// for TLS, redis+sentinel://s1:p1,s2:p2,s3:p3/<master> via Sentinel, \
               redis+cluster://n1:p1,n2:p2,… for Redis Cluster)",
    },
    Row {
        names: &["redlock"],
        scheme: Scheme::Redlock,
        feature: Some("redis"),
        default_port: Some(6379),
        form: "redlock://h1:p1,h2:p2,h3:p3",
    },
    Row {
        names: &["zk", "zookeeper"],
        scheme: Scheme::ZooKeeper,
        feature: Some("zk"),
        default_port: Some(2181),
        form: "zk://h1:p1,h2:p2/root",
    },
];

impl Scheme {
    /// The scheme of `url`, or a `Config` error naming the supported ones.
    pub fn of(url: &str) -> Result<Scheme, LockError> {
        let name = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
        if name.is_empty() {
            return Err(LockError::config(format!(
                "the backend URL {:?} has no scheme; use one of {}",
                redact_url(url),
                supported()
            )));
        }
        TABLE.iter().find(|row| row.names.contains(&name.as_str())).map(|row| row.scheme).ok_or_else(|| {
            LockError::config(format!(
                "unknown backend scheme {:?} in {:?}; use one of {}",
                redact_url(&name),
                redact_url(url),
                supported()
            ))
        })
    }

    fn row(self) -> &'static Row {
        // Every variant has a row: the `every_scheme_has_one_row` test holds the table to it.
        TABLE.iter().find(|row| row.scheme == self).unwrap_or(&TABLE[0])
    }

    /// The cargo feature of `dlock` that compiles this backend in.
    pub fn feature(self) -> Option<&'static str> {
        self.row().feature
    }

    /// The port a host without one is reached on (`None`: no network).
    pub fn default_port(self) -> Option<u16> {
        self.row().default_port
    }

    /// Whether this build has the backend.
    pub fn is_compiled(self) -> bool {
        match self.feature() {
            Some("postgres") => cfg!(feature = "postgres"),
            Some("mysql") => cfg!(feature = "mysql"),
            Some("sqlite") => cfg!(feature = "sqlite"),
            Some("redis") => cfg!(feature = "redis"),
            Some("zk") => cfg!(feature = "zk"),
            _ => true,
        }
    }

    /// This scheme, or the `Config` error naming the feature to enable when this build does not
    /// have its backend.
    pub(crate) fn compiled(self) -> Result<Scheme, LockError> {
        if self.is_compiled() {
            Ok(self)
        } else {
            Err(self.not_compiled())
        }
    }

    /// The `Config` error for a backend this build does not have.
    pub(crate) fn not_compiled(self) -> LockError {
        LockError::config(format!(
            "the {self:?} backend is not compiled into this build; enable the cargo feature {:?} of dlock-rs",
            self.feature().unwrap_or("default")
        ))
    }
}

/// The supported URL forms, for messages.
fn supported() -> String {
    TABLE.iter().map(|row| row.form).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(Scheme::of("sqlite://x.db").ok(), Some(Scheme::Sqlite));
        assert_eq!(Scheme::of("sqlite::memory:").ok(), Some(Scheme::Sqlite));
        assert_eq!(Scheme::of("MariaDB://h/db").ok(), Some(Scheme::Mysql));
        assert_eq!(Scheme::of("rediss://h").ok(), Some(Scheme::Redis));
        assert_eq!(Scheme::of("redis+sentinel://a:1,b:2,c:3/m").ok(), Some(Scheme::Redis));
        assert_eq!(Scheme::of("redis+cluster://a:1,b:2,c:3").ok(), Some(Scheme::Redis));
        assert_eq!(Scheme::of("redlock://a:1,b:2,c:3").ok(), Some(Scheme::Redlock));
        assert_eq!(Scheme::of("zk://h:2181/r").ok(), Some(Scheme::ZooKeeper));
        for bad in ["", "nothing", "ftp://x", "://x"] {
            assert!(matches!(Scheme::of(bad), Err(LockError::Config { .. })), "{bad}");
        }
        let e = Scheme::of("ftp://u:pw@x").expect_err("unknown");
        assert!(!e.to_string().contains("pw"), "{e}");
    }

    #[test]
    fn every_scheme_has_one_row() {
        for scheme in [
            Scheme::Memory,
            Scheme::Sqlite,
            Scheme::Postgres,
            Scheme::Mysql,
            Scheme::Redis,
            Scheme::Redlock,
            Scheme::ZooKeeper,
        ] {
            assert_eq!(TABLE.iter().filter(|row| row.scheme == scheme).count(), 1, "{scheme:?}");
            for name in scheme.row().names {
                assert_eq!(Scheme::of(&format!("{name}://h")).ok(), Some(scheme));
            }
        }
    }

    #[test]
    fn a_backend_not_compiled_in_names_its_feature() {
        for row in TABLE {
            let Some(feature) = row.feature else { continue };
            let e = row.scheme.not_compiled();
            assert!(matches!(e, LockError::Config { .. }), "{e}");
            assert!(e.to_string().contains(&format!("{feature:?}")), "{e}");
            assert_eq!(row.scheme.compiled().is_ok(), row.scheme.is_compiled(), "{:?}", row.scheme);
        }
        assert!(Scheme::Memory.compiled().is_ok(), "memory is always there");
    }
}
