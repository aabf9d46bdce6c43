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
    let reason = || match tls_hint(&e) {
        Some(hint) => format!("{what}: {hint}"),
        None => what.to_owned(),
    };
    match &e {
        E::TransportError(_) | E::IoError(_) | E::WatchError(_) | E::LeaseKeepAliveError(_) => {
            LockError::unavailable_from(BACKEND, reason(), e)
        }
        E::GRpcStatus(status) if transient(status) => LockError::unavailable_from(BACKEND, reason(), e),
        _ => LockError::backend(BACKEND, e),
    }
}

/// What to do about a TLS failure somewhere in `e`'s chain of causes (`None`: not one): the
/// transport's own words end up deep inside a gRPC status, where `Display` of the error the
/// caller sees would not show them.
fn tls_hint(e: &etcd_client::Error) -> Option<String> {
    let causes = causes(e);
    let all = causes.join(": ");
    if !(all.contains("certificate") || all.contains("UnknownIssuer")) {
        return None;
    }
    let deepest = causes.last().map(String::as_str).unwrap_or_default();
    Some(format!(
        "the member's TLS certificate was refused ({deepest}); if a private CA signed it, give that CA's PEM as \
         tls_ca_file"
    ))
}

/// The messages of `e` and of every cause below it, outermost first. A gRPC status is walked
/// from the status itself: etcd-client's error names it but does not chain to it.
fn causes(e: &etcd_client::Error) -> Vec<String> {
    let mut causes = vec![e.to_string()];
    let mut next: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        other => std::error::Error::source(other),
    };
    while let Some(cause) = next {
        causes.push(cause.to_string());
        next = cause.source();
    }
    causes
}

/// `e`, from the first read of a plaintext (`etcd://`) client, with a hint when the member hung
/// up on it at once: what a TLS-only client port does to an HTTP/2 preface sent in the clear.
pub(crate) fn plaintext_hint(e: LockError) -> LockError {
    let LockError::Unavailable { backend, reason, source: Some(source) } = e else { return e };
    let Some(causes) = source.downcast_ref::<etcd_client::Error>().map(causes) else {
        return LockError::Unavailable { backend, reason, source: Some(source) };
    };
    let hung_up = ["broken pipe", "connection reset", "connection closed", "unexpected end of file"];
    let all = causes.join(": ").to_lowercase();
    if !hung_up.iter().any(|h| all.contains(h)) {
        return LockError::Unavailable { backend, reason, source: Some(source) };
    }
    let deepest = causes.last().cloned().unwrap_or_default();
    let reason = format!(
        "{reason}: the member hung up at once ({deepest}); if its client port speaks TLS, use etcds:// instead of \
         etcd://"
    );
    LockError::Unavailable { backend, reason, source: Some(source) }
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
