//! `etcds://` against a local etcd whose client port speaks only TLS, with a certificate from a
//! private CA made here with `openssl`: the lock works with the CA given, is a fast typed
//! `Unavailable` without it, and a plaintext `etcd://` URL against the TLS port fails clearly;
//! and a member that demands client certificates serves a client that offers one.

use std::time::{Duration, Instant};

use dlock_testkit::servers::etcd::EtcdServer;
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName};
use lock_etcd::EtcdOptions;

/// Connecting to `url` with the default options fails as a connection failure (`Unavailable`)
/// within `within`, with an error that says `says`: the certificate did not verify, or use
/// `etcds://`.
async fn refused(url: &str, within: Duration, says: &str) {
    let t = Instant::now();
    let e = lock_etcd::connect(url, options()).await.expect_err("the connection must be refused");
    eprintln!("{url}: {e}");
    assert!(matches!(e, LockError::Unavailable { .. }), "{e}");
    assert!(t.elapsed() < within, "took {:?}: {e}", t.elapsed());
    assert!(e.to_string().contains(says), "the error should say {says:?}: {e}");
}

fn options() -> EtcdOptions {
    EtcdOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(3),
        ..Default::default()
    }
}

#[tokio::test]
async fn tls_from_url() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    dlock_testkit::certs::server_certs(d).unwrap();
    let server = EtcdServer::start_local_tls(&d.join("server.pem"), &d.join("server.key"))
        .await
        .expect("a local etcd with TLS (apt-get install etcd-server)");
    let url = format!("{}/tls-test", server.url());
    assert!(url.starts_with("etcds://"), "{url}");

    let with_ca = EtcdOptions { tls_ca_file: Some(d.join("ca.pem")), ..options() };
    let lock = lock_etcd::connect(&url, with_ca).await.expect("etcds:// with the private CA");
    let name = LockName::new("tls").unwrap();
    let lease = lock.try_acquire(&name, &AcquireOptions::new(Duration::from_secs(5))).await.unwrap().expect("free");
    assert!(lease.token() > lock_core::FencingToken(0));
    lease.release().await.unwrap();

    // The webpki roots do not know the private CA: refused at the handshake, long before the
    // 5 s connect timeout, and typed as a connection failure.
    refused(&url, Duration::from_secs(3), "certificate").await;

    // A plaintext client on the TLS port: a clear, typed failure, not a hang.
    let plain = url.replacen("etcds://", "etcd://", 1);
    refused(&plain, Duration::from_secs(6), "etcds://").await;

    // A CA file that is not there, and a CA file with a plaintext URL: configuration errors.
    let missing = EtcdOptions { tls_ca_file: Some(d.join("nope.pem")), ..options() };
    assert!(matches!(lock_etcd::connect(&url, missing).await, Err(LockError::Config { .. })));
    let unused = EtcdOptions { tls_ca_file: Some(d.join("ca.pem")), ..options() };
    assert!(matches!(lock_etcd::connect(&plain, unused).await, Err(LockError::Config { .. })));
}

/// A member started with `--client-cert-auth`: the lock works with the client certificate from
/// the options, and without it no request is served; half a client identity, or one with a
/// plaintext URL, is a configuration error.
#[tokio::test]
async fn client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    dlock_testkit::certs::server_certs(d).unwrap();
    dlock_testkit::certs::client_cert(d).unwrap();
    let server = EtcdServer::start_local_mtls(&d.join("server.pem"), &d.join("server.key"), &d.join("ca.pem"))
        .await
        .expect("a local etcd demanding client certificates (apt-get install etcd-server)");
    let url = format!("{}/mtls-test", server.url());
    let ca = || EtcdOptions { tls_ca_file: Some(d.join("ca.pem")), ..options() };

    let with_cert =
        EtcdOptions { tls_cert_file: Some(d.join("client.pem")), tls_key_file: Some(d.join("client.key")), ..ca() };
    let lock = lock_etcd::connect(&url, with_cert.clone()).await.expect("etcds:// with a client certificate");
    let name = LockName::new("mtls").unwrap();
    let lease = lock.try_acquire(&name, &AcquireOptions::new(Duration::from_secs(5))).await.unwrap().expect("free");
    lease.release().await.unwrap();

    let e = lock_etcd::connect(&url, ca()).await.expect_err("a client without a certificate must be refused");
    eprintln!("without a client certificate: {e}");
    assert!(matches!(e, LockError::Unavailable { .. }), "{e}");

    let half = EtcdOptions { tls_key_file: None, ..with_cert.clone() };
    assert!(matches!(lock_etcd::connect(&url, half).await, Err(LockError::Config { .. })));
    let missing = EtcdOptions { tls_key_file: Some(d.join("nope.key")), ..with_cert.clone() };
    assert!(matches!(lock_etcd::connect(&url, missing).await, Err(LockError::Config { .. })));
    let plain = url.replacen("etcds://", "etcd://", 1);
    let e = lock_etcd::connect(&plain, EtcdOptions { tls_ca_file: None, ..with_cert }).await.unwrap_err();
    assert!(matches!(e, LockError::Config { .. }) && e.to_string().contains("tls_cert_file"), "{e}");
}
