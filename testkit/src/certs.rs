//! Throwaway certificates for the TLS tests, made with the `openssl` command: a CA of their own,
//! a server certificate for `127.0.0.1`/`localhost` and a client certificate signed by it.

use std::path::Path;

use lock_core::LockError;

/// Makes in `dir`: `ca.pem` and `ca.key`, a CA for this test only, and `server.pem` and
/// `server.key`, a server certificate for `127.0.0.1` and `localhost` signed by it (valid two
/// days). Errors name the `openssl` step that failed.
pub fn server_certs(dir: &Path) -> Result<(), LockError> {
    let ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
               keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n";
    write(dir, "server.ext", ext)?;
    openssl(dir, "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=dlock-test-ca")?;
    openssl(dir, "req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost")?;
    openssl(
        dir,
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile server.ext",
    )
}

/// Makes `client.pem` and `client.key` in `dir`, a client certificate signed by the CA that
/// [`server_certs`] made there.
pub fn client_cert(dir: &Path) -> Result<(), LockError> {
    write(dir, "client.ext", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")?;
    openssl(dir, "req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=dlock-client")?;
    openssl(
        dir,
        "x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2 -extfile client.ext",
    )
}

/// Runs `openssl` with the space-separated `args` (no argument holds a space) in `dir`.
pub fn openssl(dir: &Path, args: &str) -> Result<(), LockError> {
    let out = std::process::Command::new("openssl").args(args.split(' ')).current_dir(dir).output().map_err(|e| {
        LockError::unavailable_from("test", "the TLS tests need the openssl command (apt-get install openssl)", e)
    })?;
    if !out.status.success() {
        return Err(LockError::unavailable(
            "test",
            format!("openssl {args} failed: {}", String::from_utf8_lossy(&out.stderr)),
        ));
    }
    Ok(())
}

fn write(dir: &Path, file: &str, text: &str) -> Result<(), LockError> {
    std::fs::write(dir.join(file), text)
        .map_err(|e| LockError::unavailable_from("test", format!("cannot write {file}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_and_client_certificates_verify_against_the_ca() {
        if crate::process::find_binary("openssl", &[]).is_none() {
            eprintln!("SKIPPED: no openssl command");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        server_certs(dir.path()).unwrap();
        client_cert(dir.path()).unwrap();
        openssl(dir.path(), "verify -CAfile ca.pem server.pem client.pem").unwrap();
        assert!(openssl(dir.path(), "verify -CAfile server.pem client.pem").is_err());
    }
}
