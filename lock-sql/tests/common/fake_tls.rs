//! An impostor database for the TLS tests: it listens on 127.0.0.1, speaks
//! just enough PostgreSQL or MySQL to be asked for TLS, completes the TLS handshake with a
//! certificate signed by a throw-away CA (made with the `openssl` tool), and then plays the
//! attacker. The PostgreSQL impostor asks for the password in clear and records it; the MySQL one
//! reads the handshake response. Both then end the session with an error of their own whose
//! message says how far the client came, so a test can tell "refused the certificate" from
//! "trusted the server".

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What the PostgreSQL impostor says once it holds the password.
pub const PG_GOT_PASSWORD: &str = "impostor: password received";
/// What the MySQL impostor says once the TLS handshake and the handshake response came through.
pub const MY_GOT_HANDSHAKE: &str = "impostor: handshake response received";

/// Which protocol the impostor speaks before TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Postgres,
    Mysql,
}

/// A running impostor: its port, its CA's certificate file, and what clients sent it.
pub struct FakeTlsServer {
    pub port: u16,
    /// PEM of the CA that signed the server's certificate (for `sslrootcert=` / `ssl-ca=`).
    pub ca: PathBuf,
    /// Passwords (PostgreSQL) or handshake responses (MySQL, as a marker) received.
    received: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl FakeTlsServer {
    /// Starts an impostor on a free port (a thread that serves connections until the test ends).
    pub fn start(wire: Wire) -> FakeTlsServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let (ca, cert, key) = make_certs(dir.path());
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(&cert).expect("cert file").map(|c| c.expect("cert")).collect();
        let key = PrivateKeyDer::from_pem_file(&key).expect("key file");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server certificate");
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (config, seen) = (Arc::clone(&config), Arc::clone(&seen));
                std::thread::spawn(move || {
                    // A client that refuses the certificate hangs up mid-handshake: not our error.
                    let _ = serve(wire, stream, config, &seen);
                });
            }
        });
        FakeTlsServer { port, ca, received, _dir: dir }
    }

    /// What clients sent after the TLS handshake (passwords, or MySQL handshake markers).
    pub fn received(&self) -> Vec<String> {
        self.received.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A CA (self-signed) and a server certificate it signed for 127.0.0.1 and localhost.
fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    std::fs::write(
        p("ext.cnf"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n\
         subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("ext file");
    let ec: &[&str] = &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let (ca_key, ca, key, csr) = (p("ca.key"), p("ca.pem"), p("server.key"), p("server.csr"));
    openssl(&[
        &["req", "-x509", "-days", "2", "-subj", "/CN=dlock impostor CA"],
        ec,
        &["-keyout", &ca_key, "-out", &ca],
    ]);
    openssl(&[&["req", "-subj", "/CN=127.0.0.1"], ec, &["-keyout", &key, "-out", &csr]]);
    openssl(&[&[
        "x509",
        "-req",
        "-days",
        "2",
        "-set_serial",
        "2",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-extfile",
        &p("ext.cnf"),
        "-out",
        &p("server.pem"),
    ]]);
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"))
}

/// Runs the `openssl` tool with the concatenated argument lists.
fn openssl(parts: &[&[&str]]) {
    let args = parts.concat();
    let out = Command::new("openssl").args(&args).output().expect("the openssl tool runs (the TLS tests need it)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn serve(
    wire: Wire,
    mut tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    seen: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    match wire {
        Wire::Postgres => {
            // SSLRequest: length 8, code 80877103.
            let mut req = [0u8; 8];
            tcp.read_exact(&mut req)?;
            if req != [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f] {
                return Ok(());
            }
            tcp.write_all(b"S")?;
        }
        Wire::Mysql => {
            tcp.write_all(&mysql_greeting())?;
            // The SSLRequest packet (capabilities, max packet, charset, filler).
            read_mysql_packet(&mut tcp)?;
        }
    }
    let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    match wire {
        Wire::Postgres => {
            // StartupMessage: length, then the rest.
            let mut len = [0u8; 4];
            tls.read_exact(&mut len)?;
            let mut rest = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
            tls.read_exact(&mut rest)?;
            // AuthenticationCleartextPassword: what an impostor asks for.
            tls.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3])?;
            tls.flush()?;
            let mut head = [0u8; 5];
            tls.read_exact(&mut head)?;
            let mut body =
                vec![0u8; (u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize).saturating_sub(4)];
            tls.read_exact(&mut body)?;
            let password = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body)).into_owned();
            seen.lock().unwrap_or_else(|e| e.into_inner()).push(password);
            let mut fields = Vec::new();
            for (tag, value) in [(b'S', "FATAL"), (b'V', "FATAL"), (b'C', "28P01"), (b'M', PG_GOT_PASSWORD)] {
                fields.push(tag);
                fields.extend_from_slice(value.as_bytes());
                fields.push(0);
            }
            fields.push(0);
            let mut msg = vec![b'E'];
            msg.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
            msg.extend_from_slice(&fields);
            tls.write_all(&msg)?;
        }
        Wire::Mysql => {
            let seq = read_mysql_packet(&mut tls)?;
            seen.lock().unwrap_or_else(|e| e.into_inner()).push("handshake response".into());
            // ERR_Packet: 0xff, code 1045, '#', SQLSTATE, message.
            let mut payload = vec![0xff, 0x15, 0x04, b'#'];
            payload.extend_from_slice(b"28000");
            payload.extend_from_slice(MY_GOT_HANDSHAKE.as_bytes());
            let mut packet = (payload.len() as u32).to_le_bytes()[..3].to_vec();
            packet.push(seq.wrapping_add(1));
            packet.extend_from_slice(&payload);
            tls.write_all(&packet)?;
        }
    }
    tls.flush()?;
    tls.conn.send_close_notify();
    let _ = tls.flush();
    Ok(())
}

/// A MySQL protocol-10 greeting that offers TLS (CLIENT_SSL) and mysql_native_password.
fn mysql_greeting() -> Vec<u8> {
    // LONG_PASSWORD(MYSQL) FOUND_ROWS LONG_FLAG CONNECT_WITH_DB PROTOCOL_41 SSL TRANSACTIONS
    // SECURE_CONNECTION | MULTI_STATEMENTS MULTI_RESULTS PLUGIN_AUTH PLUGIN_AUTH_LENENC DEPRECATE_EOF
    let (low, high): (u16, u16) = (0xAA0F, 0x012B);
    let mut p = vec![0x0a];
    p.extend_from_slice(b"5.7.99-impostor\0");
    p.extend_from_slice(&1u32.to_le_bytes());
    p.extend_from_slice(b"abcdefgh");
    p.push(0);
    p.extend_from_slice(&low.to_le_bytes());
    p.push(0x21);
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&high.to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(b"ijklmnopqrst\0");
    p.extend_from_slice(b"mysql_native_password\0");
    let mut packet = (p.len() as u32).to_le_bytes()[..3].to_vec();
    packet.push(0);
    packet.extend_from_slice(&p);
    packet
}

/// Reads one MySQL packet; returns its sequence number.
fn read_mysql_packet(s: &mut impl Read) -> std::io::Result<u8> {
    let mut head = [0u8; 4];
    s.read_exact(&mut head)?;
    let mut body = vec![0u8; u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize];
    s.read_exact(&mut body)?;
    Ok(head[3])
}

/// The verifying TLS modes refuse the impostor's certificate (the error says so, and the impostor
/// receives nothing) and accept it once the URL names its CA; `require` / `prefer` (PostgreSQL)
/// and `REQUIRED` / `PREFERRED` (MySQL) hand the impostor the session (on PostgreSQL the
/// password in clear) — the weak modes the facade warns about at connect.
pub async fn check_tls_modes(wire: Wire) {
    let fake = FakeTlsServer::start(wire);
    let (port, ca) = (fake.port, fake.ca.display().to_string());
    let (base, ca_param, got) = match wire {
        Wire::Postgres => (format!("postgres://app:Sup3rSecret@127.0.0.1:{port}/db"), "sslrootcert", PG_GOT_PASSWORD),
        Wire::Mysql => (format!("mysql://app:Sup3rSecret@127.0.0.1:{port}/db"), "ssl-ca", MY_GOT_HANDSHAKE),
    };
    // (PostgreSQL mode, the MySQL mode that means the same, with the CA, trusted)
    let modes = [
        ("verify-full", "VERIFY_IDENTITY", false, false),
        ("verify-ca", "VERIFY_CA", false, false),
        ("verify-full", "VERIFY_IDENTITY", true, true),
        ("verify-ca", "VERIFY_CA", true, true),
        ("require", "REQUIRED", false, true),
        ("prefer", "PREFERRED", false, true),
    ];
    let options = lock_sql::SqlOptions {
        connect_timeout: std::time::Duration::from_secs(5),
        request_timeout: std::time::Duration::from_secs(5),
        ..lock_sql::SqlOptions::default()
    };
    for (pg_mode, my_mode, with_ca, trusted) in modes {
        let mode = match wire {
            Wire::Postgres => format!("sslmode={pg_mode}"),
            Wire::Mysql => format!("ssl-mode={my_mode}"),
        };
        let url = if with_ca { format!("{base}?{mode}&{ca_param}={ca}") } else { format!("{base}?{mode}") };
        let before = fake.received().len();
        let Err(e) = lock_sql::connect(&url, options.clone()).await else {
            panic!("{url}: an impostor cannot serve locks")
        };
        let text = e.to_string();
        let received = fake.received();
        if trusted {
            assert!(text.contains(got), "{mode} (CA given: {with_ca}) should reach the impostor, got: {text}");
            assert!(!text.to_lowercase().contains("certificate"), "{mode}: {text}");
            assert_eq!(received.len(), before + 1, "{mode}: the impostor got the session");
            if wire == Wire::Postgres {
                assert_eq!(received.last().map(String::as_str), Some("Sup3rSecret"), "{mode}: the password in clear");
            }
        } else {
            assert!(text.to_lowercase().contains("certificate"), "{mode} should refuse the certificate, got: {text}");
            assert_eq!(received.len(), before, "{mode}: the impostor got nothing");
        }
    }
}
