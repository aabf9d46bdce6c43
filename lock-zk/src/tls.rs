//! TLS to ZooKeeper's `secureClientPort`: the CA file of [`ZkOptions::tls_ca_file`]
//! verifies the chain, and the host name (or IP) of the URL is checked against the certificate.

use lock_core::LockError;
use zookeeper_client::{Client, Connector};

use crate::config::ZkOptions;
use crate::session::ZkError;

/// How sessions connect: in the clear, or over TLS trusting the CA read once at `connect`.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    #[cfg(feature = "tls")]
    options: Option<zookeeper_client::TlsOptions>,
}

impl Tls {
    /// Reads and parses the CA file named by the options, if any.
    pub(crate) async fn load(options: &ZkOptions) -> Result<Tls, LockError> {
        let Some(path) = &options.tls_ca_file else { return Ok(Tls::default()) };
        // A file read: off the runtime's workers.
        let owned = path.clone();
        let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(owned)).await;
        let pem = read.map_err(|e| LockError::config(format!("reading the ZooKeeper CA file failed: {e}")))?.map_err(
            |e| {
                LockError::config(format!("cannot read the ZooKeeper CA file {}: {e}; give a PEM file", path.display()))
            },
        )?;
        Tls::with_ca(&pem)
    }

    #[cfg(feature = "tls")]
    fn with_ca(pem: &str) -> Result<Tls, LockError> {
        let options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(pem)
            .map_err(|e| LockError::config(format!("the ZooKeeper CA file holds no usable PEM certificate: {e}")))?;
        Ok(Tls { options: Some(options) })
    }

    #[cfg(not(feature = "tls"))]
    fn with_ca(_pem: &str) -> Result<Tls, LockError> {
        Err(LockError::config(
            "tls_ca_file is set but lock-zk was built without its `tls` feature; enable dlock-rs's `zk-tls` feature \
             (or lock-zk's `tls`)",
        ))
    }

    /// Whether connections use TLS.
    pub(crate) fn on(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.options.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// Opens a session to `hosts` (every host over TLS when it is on).
    #[cfg(feature = "tls")]
    pub(crate) async fn connect(&self, connector: Connector, hosts: &str) -> Result<Client, ZkError> {
        match &self.options {
            Some(options) => connector.with_tls(options.clone()).secure_connect(hosts).await,
            None => connector.connect(hosts).await,
        }
    }

    /// Opens a session to `hosts`.
    #[cfg(not(feature = "tls"))]
    pub(crate) async fn connect(&self, connector: Connector, hosts: &str) -> Result<Client, ZkError> {
        connector.connect(hosts).await
    }
}
