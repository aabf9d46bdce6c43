//! [`Driver`]: one row of the backend table — the URL schemes of one backend and the function
//! that connects it (the shape of sqlx's `AnyDriver`). The rows of the backends shipped with
//! dlock are in `backends.rs`; a third party hands its row to [`crate::register_backend`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use lock_core::{LockError, LockProvider};

use crate::scheme::Scheme;
use crate::Config;

/// What a connect function returns: the provider of one connection set, once connected.
pub type Connecting<'a> = Pin<Box<dyn Future<Output = Result<Arc<dyn LockProvider>, LockError>> + Send + 'a>>;

/// Connects the backend a configuration names. It gets the whole [`Config`]: the URL
/// (`config.url`, parsed with [`crate::url::UrlParts::parse`] where it has hosts), the
/// `request_timeout` that bounds every request, and the backend's own section
/// ([`Config::section`]). Its errors pass through the URL redactor before anyone sees them.
pub type ConnectFn = for<'a> fn(&'a Config) -> Connecting<'a>;

/// One backend of the table.
///
/// ```
/// # use std::sync::Arc;
/// # use dlock::{Config, Connecting, Driver, LockProvider, MemoryLock};
/// fn connect(config: &Config) -> Connecting<'_> {
///     Box::pin(async move {
///         let name = config.url.split_once("://").map_or("", |(_, rest)| rest);
///         Ok(Arc::new(MemoryLock::named(name)) as Arc<dyn LockProvider>)
///     })
/// }
/// let driver = Driver::new("scratch", &["scratch"], connect).form("scratch://[name]");
/// assert_eq!(driver.name, "scratch");
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Driver {
    /// The backend's name; for a registered backend also the name of its configuration section
    /// (`[etcd]` in `dlock.toml`, `DLOCK_ETCD__…` in the environment).
    pub name: &'static str,
    /// The URL schemes that name it (`etcd`, `etcds`), lower case.
    pub schemes: &'static [&'static str],
    /// How its URL looks, for error messages.
    pub form: &'static str,
    /// The port a host without one is reached on (`None`: no network, e.g. an embedded file).
    /// `dlock conformance` puts its fault proxies in front of each host only when this is set.
    pub default_port: Option<u16>,
    /// The backend offers only the exclusive lock: asking for a read-write lock or a semaphore
    /// is `Unsupported` before anything connects.
    pub exclusive_only: bool,
    /// The cargo feature of `dlock-rs` that compiles a shipped backend in (`None`: always there,
    /// or registered).
    pub feature: Option<&'static str>,
    /// Connects it; `None` when this build does not have the backend (see `feature`).
    pub connect: Option<ConnectFn>,
    pub(crate) scheme: Scheme,
}

impl Driver {
    /// A backend named `name`, reached by URLs with one of `schemes`, connected by `connect`.
    pub const fn new(name: &'static str, schemes: &'static [&'static str], connect: ConnectFn) -> Driver {
        Driver::row(name, schemes, Scheme::Registered(name), None, Some(connect))
    }

    /// A row with the defaults of the builder methods; shipped backends give their `scheme` and
    /// the cargo `feature` that compiles them in (`connect` is `None` in a build without it).
    pub(crate) const fn row(
        name: &'static str,
        schemes: &'static [&'static str],
        scheme: Scheme,
        feature: Option<&'static str>,
        connect: Option<ConnectFn>,
    ) -> Driver {
        Driver { name, schemes, form: name, default_port: None, exclusive_only: false, feature, connect, scheme }
    }

    /// How its URL looks (`etcd://h1:2379,h2:2379/prefix`), for error messages.
    pub const fn form(mut self, form: &'static str) -> Driver {
        self.form = form;
        self
    }

    /// The port of a host given without one.
    pub const fn default_port(mut self, port: u16) -> Driver {
        self.default_port = Some(port);
        self
    }

    /// Only the exclusive lock (see the field of that name).
    pub const fn exclusive_only(mut self) -> Driver {
        self.exclusive_only = true;
        self
    }

    /// The backend this row names.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The `Config` error for a backend this build does not have.
    pub(crate) fn not_compiled(&self) -> LockError {
        LockError::config(format!(
            "the {:?} backend is not compiled into this build; enable the cargo feature {:?} of dlock-rs",
            self.scheme,
            self.feature.unwrap_or("default")
        ))
    }
}
