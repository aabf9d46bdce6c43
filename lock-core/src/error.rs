//! The one error type every backend returns.

use std::time::Duration;

/// A boxed error from a backend's client library, kept as the `source` of [`LockError`].
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong when taking, renewing or releasing a lock.
///
/// Use [`LockError::outcome_unknown`] to tell "definitely not acquired" from "the server may have
/// granted it": dlock already releases such ambiguous grants in the background, so the caller
/// only needs to decide whether to retry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock name breaks the rules of docs/contract.md §2 (1..=255 bytes of UTF-8, no control characters).
    #[error("invalid lock name {name:?}: {reason}; use 1 to 255 bytes of UTF-8 without control characters")]
    InvalidName {
        /// The rejected name, shortened and escaped for display.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The options cannot be honoured (zero ttl, ttl beyond what the backend supports, …).
    #[error("invalid lock options: {reason}")]
    InvalidOptions {
        /// What is wrong, and how to fix it.
        reason: String,
    },
    /// The lock was not granted within the caller's wait.
    #[error("lock {name:?} was not granted within {waited:?}; {}", timeout_hint(*quiet_left))]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
        /// Set when the server was refusing every grant because it lost its state (or the
        /// deployment is new): how much of that quiet period was left when the wait ended.
        quiet_left: Option<Duration>,
    },
    /// The lease is no longer ours: it expired, another owner took it, or the session ended.
    #[error("lease on {name:?} was lost; stop using the protected resource and acquire again")]
    Lost {
        /// The lock's name.
        name: String,
    },
    /// The backend could not be reached or did not answer in time.
    #[error("{backend} is unavailable: {reason}; check that the server runs and the URL is right")]
    Unavailable {
        /// Which backend (`redis`, `postgres`, …).
        backend: String,
        /// What happened.
        reason: String,
        /// The client library's error, if there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The configuration is wrong: an unknown scheme, key, a backend not compiled in, …
    #[error("configuration error: {reason}")]
    Config {
        /// What is wrong, and how to fix it.
        reason: String,
    },
    /// The backend does not offer this kind of lock or feature.
    #[error("{backend} does not support {feature}; see its Capabilities")]
    Unsupported {
        /// Which backend.
        backend: String,
        /// What was asked for.
        feature: &'static str,
    },
    /// Any other error from the backend's client library or server.
    #[error("{backend} error: {source}")]
    Backend {
        /// Which backend.
        backend: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

impl LockError {
    /// An `Unavailable` error with no source.
    pub fn unavailable(backend: impl Into<String>, reason: impl Into<String>) -> Self {
        LockError::Unavailable { backend: backend.into(), reason: reason.into(), source: None }
    }

    /// An `Unavailable` error carrying the client library's error.
    pub fn unavailable_from(
        backend: impl Into<String>,
        reason: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        LockError::Unavailable { backend: backend.into(), reason: reason.into(), source: Some(source.into()) }
    }

    /// A `Backend` error wrapping the client library's error.
    pub fn backend(backend: impl Into<String>, source: impl Into<BoxError>) -> Self {
        LockError::Backend { backend: backend.into(), source: source.into() }
    }

    /// An `InvalidOptions` error.
    pub fn invalid_options(reason: impl Into<String>) -> Self {
        LockError::InvalidOptions { reason: reason.into() }
    }

    /// An `Unsupported` error: `backend` does not offer `feature`.
    pub fn unsupported(backend: impl Into<String>, feature: &'static str) -> Self {
        LockError::Unsupported { backend: backend.into(), feature }
    }

    /// A `Config` error.
    pub fn config(reason: impl Into<String>) -> Self {
        LockError::Config { reason: reason.into() }
    }

    /// True when the request may have reached the server and been applied (a lost reply, a
    /// timeout): the lock may have been granted. False when it certainly was not.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, LockError::Unavailable { .. } | LockError::Backend { .. })
    }

    /// True when retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, LockError::Unavailable { .. } | LockError::Timeout { .. })
    }
}

/// What a `Timeout` tells the caller to do: nobody may hold the lock when the server is in its
/// quiet period, so "check who holds it" would send them looking for a holder that is not there.
fn timeout_hint(quiet_left: Option<Duration>) -> String {
    match quiet_left {
        Some(left) => format!(
            "the server grants nothing for {left:?} more: it lost its state, or this deployment or key \
             prefix is new (mark a new deployment fresh so its first lock is granted at once: on Redis \
             `dlock init --url …`, or `SET <key_prefix>:boot 0`; docs/contract.md §3)"
        ),
        None => "wait longer or check who holds it".to_owned(),
    }
}
