//! [`Scheme`]: which backend a URL names. The backend table that maps URL schemes to it is in
//! `registry.rs`; this file only names the backends, so every module can speak of them.

/// The backend a URL names: one of the backends shipped with dlock, or one a third party
/// registered ([`crate::register_backend`]).
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
    /// `redis://` or `rediss://` (TLS), `redis[s]+sentinel://` (through Sentinels), `redis+cluster://`.
    Redis,
    /// `redlock://h1:p1,h2:p2,…`.
    Redlock,
    /// `zk://h1:p1,h2:p2/root`.
    ZooKeeper,
    /// A backend registered at run time, by its name ([`crate::Driver::name`]).
    Registered(&'static str),
}
