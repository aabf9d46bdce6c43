//! TLS servers for the tests: certificates made with `openssl`, `redis-server`s (or Sentinels)
//! with TLS-only settings, and an administrator's verified connection.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use dlock_testkit::process::{find_binary, wait_for_port, ChildServer};

pub fn sh(dir: &Path, script: &str) {
    let out = std::process::Command::new("/bin/sh").arg("-c").arg(script).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `ca.pem` signs `server.pem` (127.0.0.1); `ca2.pem`, another CA, signs `impostor.pem` for the
/// same address.
pub fn make_certs(d: &Path) {
    assert!(find_binary("openssl", &[]).is_some(), "this test needs the openssl command (apt-get install openssl)");
    sh(d, "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\n' > ext.cnf");
    for (ca, leaf) in [("ca", "server"), ("ca2", "impostor")] {
        sh(
            d,
            &format!("openssl req -x509 -newkey rsa:2048 -nodes -keyout {ca}.key -out {ca}.pem -days 2 -subj /CN={ca}"),
        );
        sh(d, &format!("openssl req -newkey rsa:2048 -nodes -keyout {leaf}.key -out {leaf}.csr -subj /CN=localhost"));
        sh(
            d,
            &format!(
                "openssl x509 -req -in {leaf}.csr -CA {ca}.pem -CAkey {ca}.key -CAcreateserial -out {leaf}.pem -days 2 \
                 -extfile ext.cnf"
            ),
        );
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
