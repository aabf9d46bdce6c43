//! The client: an etcd connection, its key layout and options, and what the backend promises.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
use lock_core::{Capabilities, LeaseModel, LockError, WakeMethod};

use crate::config::{EtcdOptions, EtcdUrl};
use crate::error::{plaintext_hint, timed, BACKEND};
use crate::keys::Keys;
use crate::spare::Spares;

/// A lock client of an etcd cluster; cheap to clone (clones share the connection). Implements
/// [`DistributedLock`](lock_core::DistributedLock).
#[derive(Clone)]
pub struct EtcdLock {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) options: EtcdOptions,
    /// Leases released grants left for the next acquisitions (`crate::spare`).
    pub(crate) spares: Arc<Spares>,
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock").field("keys", &self.inner.keys).field("options", &self.inner.options).finish()
    }
}

/// Connects to the cluster of `url` (`etcd://[user:pass@]h1:2379,h2:2379/prefix`; the prefix
/// defaults to `dlock`). `etcds://` speaks TLS to every member (rustls), verifying each against
/// `options.tls_ca_file` or else the webpki roots, and offers the client certificate of
/// `options.tls_cert_file`/`tls_key_file` when set (members with `--client-cert-auth`). With
/// `user:password` the client authenticates (etcd's auth must be on for that user). A malformed
/// URL, or a TLS file with `etcd://` or not readable, is `LockError::Config`; a cluster that does not answer a read within
/// `options.connect_timeout` (or whose certificate does not verify) is `LockError::Unavailable`.
pub async fn connect(url: &str, options: EtcdOptions) -> Result<EtcdLock, LockError> {
    options.validate()?;
    let url = EtcdUrl::parse(url)?;
    let tls = tls_options(&url, &options).await?;
    let mut connect = ConnectOptions::new()
        .with_connect_timeout(options.connect_timeout)
        .with_timeout(options.request_timeout)
        .with_keep_alive(options.keep_alive, options.keep_alive)
        .with_keep_alive_while_idle(true)
        // A member cut off from the leader refuses requests and ends its watches instead of
        // serving stale state or stalling them: the waiter then reads again through another.
        .with_require_leader(true);
    if let Some(tls) = tls {
        connect = connect.with_tls(tls);
    }
    if let Some((user, password)) = &url.user {
        connect = connect.with_user(user.clone(), password.clone()).with_auto_token_refresh(true);
    }
    let client =
        timed(options.connect_timeout, "connecting to etcd", Client::connect(&url.endpoints, Some(connect))).await?;
    let probed = Box::pin(from_client(client, &url.prefix, options)).await;
    if url.tls {
        probed
    } else {
        probed.map_err(plaintext_hint)
    }
}

/// The TLS settings of an `etcds://` URL (`None` for `etcd://`): the members verified against
/// the CA file or the webpki roots, and the client certificate offered when one is configured.
async fn tls_options(url: &EtcdUrl, options: &EtcdOptions) -> Result<Option<TlsOptions>, LockError> {
    if !url.tls {
        let set = [("tls_ca_file", options.tls_ca_file.is_some()), ("tls_cert_file", options.tls_cert_file.is_some())];
        if let Some((what, _)) = set.iter().find(|(_, on)| *on) {
            return Err(LockError::config(format!(
                "etcd {what} is set but the URL is etcd:// (plaintext); use etcds:// to speak TLS to the members"
            )));
        }
        return Ok(None);
    }
    let tls = match options.read_ca().await? {
        Some(pem) => TlsOptions::new().ca_certificate(Certificate::from_pem(pem)),
        None => TlsOptions::new().with_webpki_roots(),
    };
    Ok(Some(match options.read_identity().await? {
        Some((cert, key)) => tls.identity(Identity::from_pem(cert, key)),
        None => tls,
    }))
}

/// A lock client over the application's own etcd [`Client`] (its endpoints, credentials and TLS);
/// keys live under `prefix` (empty: `dlock`). Checks within `options.connect_timeout` that the
/// cluster answers a read.
pub async fn from_client(client: Client, prefix: &str, options: EtcdOptions) -> Result<EtcdLock, LockError> {
    options.validate()?;
    let prefix = prefix.trim_matches('/');
    let prefix = if prefix.is_empty() { "dlock" } else { prefix };
    let keys = Keys::new(prefix);
    let mut probe = client.clone();
    let read = probe.get(keys.all_locks(), Some(GetOptions::new().with_prefix().with_count_only()));
    timed(options.connect_timeout, "reading from etcd", read).await?;
    Ok(EtcdLock { inner: Arc::new(Inner { client, keys, options, spares: Arc::default() }) })
}

impl EtcdLock {
    /// The etcd connection this lock client uses (its endpoints, TLS, credentials), for an
    /// application's own requests next to the locks — `dlock bench` times its floor with it.
    pub fn etcd_client(&self) -> Client {
        self.client()
    }

    /// `<prefix>/`: every key this client writes starts with it (the grant of an etcd role
    /// limited to the prefix covers them all).
    pub fn key_root(&self) -> &str {
        self.inner.keys.root()
    }

    /// A handle of the connection for one request (tonic clients are clones of one channel).
    pub(crate) fn client(&self) -> Client {
        self.inner.client.clone()
    }

    pub(crate) fn spares(&self) -> &Spares {
        &self.inner.spares
    }

    pub(crate) fn spares_handle(&self) -> Arc<Spares> {
        Arc::clone(&self.inner.spares)
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.options.request_timeout
    }
}

/// The backend's promises (each checked by the conformance suite).
pub(crate) fn capabilities() -> Capabilities {
    let mut caps = Capabilities::new();
    caps.rw_lock = true;
    caps.semaphore = true;
    caps.fifo = true;
    caps.wake = WakeMethod::Watch;
    caps.lease_model = LeaseModel::PerLock;
    // Revisions are persisted with the data and only grow, on every member, across restarts.
    caps.durable_fencing = true;
    // Leases and keys are persisted; a restart keeps them (etcd extends every lease when a
    // leader takes over, so a holder that renews keeps its lock).
    caps.durable_leases = true;
    // etcd leases count whole seconds, and the server refuses none shorter than about 1.5
    // election ticks (1 s with the defaults' rounding up); a shorter ttl would be a lease the
    // server keeps longer than asked, which only delays others, but the suite's timing cases
    // need the server to free a vanished holder's lock close to its ttl.
    // The holder id and metadata are the value of the holder's key (crate::inspect).
    caps.inspect = true;
    // Election observers: a watch on the lock's queue (crate::observe).
    caps.notify_changes = true;
    caps.list = true;
    caps.min_ttl = Duration::from_secs(1);
    // etcd's own maximum lease TTL.
    caps.max_ttl = Duration::from_secs(9_000_000_000);
    caps
}

/// The label.
pub(crate) fn backend() -> &'static str {
    BACKEND
}
