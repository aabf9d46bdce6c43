//! How etcd's errors become [`LockError`]s, and the one way every request is bounded in time.

use std::future::Future;
use std::time::Duration;

use lock_core::LockError;

/// The backend label.
pub(crate) const BACKEND: &str = "etcd";

/// What the server answered that this crate cannot use (a reply without the parts it asked for).
#[derive(Debug, thiserror::Error)]
pub(crate) enum EtcdError {
    /// A transaction or range reply lacks the part the request asked for.
    #[error("etcd answered without {0}")]
    Malformed(&'static str),
}

/// `fut` within `bound`: a request that does not answer in time is `Unavailable` (its outcome
/// unknown), never a hang.
pub(crate) async fn timed<T>(
    bound: Duration,
    what: &str,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, LockError> {
    match tokio::time::timeout(bound, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(what, e)),
        Err(_) => Err(LockError::unavailable(BACKEND, format!("{what}: no answer within {bound:?}"))),
    }
}

/// Transport failures and the gRPC codes of an unreachable or leaderless cluster are
/// `Unavailable` (retried); anything else is a `Backend` error.
pub(crate) fn classify(what: &str, e: etcd_client::Error) -> LockError {
    use etcd_client::Error as E;
    use tonic_code::transient;
    match &e {
        E::TransportError(_) | E::IoError(_) | E::WatchError(_) | E::LeaseKeepAliveError(_) => {
            LockError::unavailable_from(BACKEND, what.to_owned(), e)
        }
        E::GRpcStatus(status) if transient(status) => LockError::unavailable_from(BACKEND, what.to_owned(), e),
        _ => LockError::backend(BACKEND, e),
    }
}

/// Whether the server said the lease does not exist (expired or revoked).
pub(crate) fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("requested lease not found"))
}

/// Whether `e` says the lease does not exist (after [`classify`]).
pub(crate) fn is_lease_gone(e: &LockError) -> bool {
    matches!(e, LockError::Backend { source, .. } if source.to_string().contains("requested lease not found"))
}

/// The gRPC codes that mean "not now" rather than "no".
mod tonic_code {
    pub(super) fn transient(status: &tonic::Status) -> bool {
        use tonic::Code;
        matches!(
            status.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::Aborted
                | Code::ResourceExhausted
        ) || status.message().contains("leader changed")
            || status.message().contains("no leader")
    }
}

/// A malformed reply as a `Backend` error.
pub(crate) fn malformed(what: &'static str) -> LockError {
    LockError::backend(BACKEND, EtcdError::Malformed(what))
}
