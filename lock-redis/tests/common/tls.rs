//! TLS servers for the tests: certificates (dlock-testkit's `certs`), `redis-server`s (or Sentinels)
//! with TLS-only settings, and an administrator's verified connection.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use dlock_testkit::process::{find_binary, wait_for_port, ChildServer};

/// `ca.pem` signs `server.pem` (127.0.0.1); `ca2.pem`, another CA, signs `impostor.pem` for the
/// same address.
pub fn make_certs(d: &Path) {
    dlock_testkit::certs::server_certs(d).expect("the test's certificates");
    let other = d.join("other-ca");
    std::fs::create_dir_all(&other).unwrap();
    dlock_testkit::certs::server_certs(&other).expect("another CA's certificates");
    for (from, to) in [("ca.pem", "ca2.pem"), ("server.pem", "impostor.pem"), ("server.key", "impostor.key")] {
        std::fs::copy(other.join(from), d.join(to)).unwrap();
    }
}

/// TLS-only settings of a server or Sentinel on `port`, with `leaf`'s certificate.
pub fn tls_lines(d: &Path, port: u16, leaf: &str, ca: &str) -> String {
    let p = |f: &str| d.join(f).to_string_lossy().into_owned();
    format!(
        "port 0\ntls-port {port}\nbind 127.0.0.1\nprotected-mode no\ntls-cert-file {}\ntls-key-file {}\n\
         tls-ca-cert-file {}\ntls-auth-clients no\nsave \"\"\nappendonly no\ndir {}\n",
        p(&format!("{leaf}.pem")),
        p(&format!("{leaf}.key")),
        p(&format!("{ca}.pem")),
        d.display()
    )
}

pub async fn start_server(d: &Path, name: &str, conf: String, port: u16, sentinel: bool) -> ChildServer {
    let sub = d.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    let path = sub.join(format!("{name}.conf"));
    std::fs::write(&path, conf.replace(&format!("dir {}\n", d.display()), &format!("dir {}\n", sub.display())))
        .unwrap();
    let mut args = vec![path.to_string_lossy().into_owned()];
    if sentinel {
        args.push("--sentinel".to_owned());
    }
    let program = find_binary("redis-server", &["/usr/local/bin", "/usr/bin"]).expect("redis-server on PATH");
    let child = ChildServer::new(program, args, &sub);
    child.start().unwrap();
    wait_for_port(SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(10)).await.unwrap();
    child
}

/// A TLS connection as `url` (`rediss://user:pw@host:port`) verified against `ca`.
pub async fn admin(url: &str, ca: &Path) -> redis::aio::MultiplexedConnection {
    let certs = redis::TlsCertificates { client_tls: None, root_cert: Some(std::fs::read(ca).unwrap()) };
    let client = redis::Client::build_with_tls(url, certs).unwrap();
    tokio::time::timeout(Duration::from_secs(5), client.get_multiplexed_async_connection()).await.unwrap().unwrap()
}
