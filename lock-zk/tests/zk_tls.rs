//! ZooKeeper over TLS, against a local server listening on `secureClientPort` with
//! a certificate signed by a CA made for it. Needs lock-zk's `tls` feature:
//! `cargo nextest run -p lock-zk --features tls --test zk_tls`.
#![cfg(feature = "tls")]

use std::time::Duration;

use dlock_testkit::servers::zookeeper::{ZkServer, TICK};
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName};
use lock_zk::ZkOptions;

fn options(ca: Option<std::path::PathBuf>) -> ZkOptions {
    ZkOptions {
        session_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(3),
        request_timeout: Duration::from_secs(3),
        tls_ca_file: ca,
        tick_time: TICK,
    }
}

#[tokio::test]
async fn tls_verifies_the_server_and_carries_the_locks() {
    let server = ZkServer::start_local_tls().await.unwrap();
    let (secure, ca) = server.tls().expect("a TLS server");
    let plain = server.addr().expect("a local server");

    // Trusting the server's CA: sessions, digest auth and locks work over TLS, by IP and by name.
    for host in [secure.to_string(), format!("localhost:{}", secure.port())] {
        let url = format!("zk://alice:s3cret@{host}/dlock-tls");
        let lock = lock_zk::connect(&url, options(Some(ca.clone()))).await.unwrap();
        let name = LockName::new("over-tls").unwrap();
        let lease = lock.acquire(&name, &AcquireOptions::new(Duration::from_secs(2))).await.unwrap();
        assert!(lease.is_valid());
        lease.release().await.unwrap();
    }

    // A CA that did not sign the server's certificate (the system's public CAs): no session.
    let public = std::path::PathBuf::from("/etc/ssl/certs/ca-certificates.crt");
    if public.is_file() {
        let err = lock_zk::connect(&format!("zk://{secure}/dlock-tls"), options(Some(public))).await.unwrap_err();
        assert!(matches!(err, LockError::Unavailable { .. }) && err.to_string().contains("tls_ca_file"), "{err}");
    }
    // Plaintext to the TLS port, and TLS to the plaintext port: no session either.
    let err = lock_zk::connect(&format!("zk://{secure}/dlock-tls"), options(None)).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err}");
    let err = lock_zk::connect(&format!("zk://{plain}/dlock-tls"), options(Some(ca.clone()))).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err}");

    // A CA file that is not PEM is a Config error that names the problem.
    let not_pem = std::env::temp_dir().join(format!("dlock-not-a-ca-{}.pem", std::process::id()));
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let err = lock_zk::connect(&format!("zk://{secure}/dlock-tls"), options(Some(not_pem.clone()))).await.unwrap_err();
    let _ = std::fs::remove_file(&not_pem);
    assert!(matches!(err, LockError::Config { .. }), "{err}");
}
