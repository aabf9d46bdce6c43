//! `connect` warns when a SQL URL's TLS mode does not verify the server, and stays quiet when it
//! does; the warning never shows the password. Every way to set the mode counts (any spelling or
//! percent-encoding, `PGSSLMODE`), and `[sql] tls = "verify"` refuses such modes with a `Config`
//! error. The `dlock` tool's side is dlock-cli's `cli_tls_warning.rs`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use dlock::Config;

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn take(&self) -> String {
        let mut buf = self.0.lock().expect("not poisoned");
        String::from_utf8_lossy(&std::mem::take(&mut *buf)).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn config(url: &str) -> Config {
    let mut config = Config::from_url(url);
    config.sql.table = "dlock_facade_tls".into();
    config
}

#[tokio::test]
async fn connect_warns_when_tls_does_not_verify_the_server() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("dlock=warn,lock_sql=warn")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let pg =
        std::env::var("DLOCK_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let my = std::env::var("DLOCK_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
    let with = |url: &str, query: &str| format!("{url}{}{query}", if url.contains('?') { '&' } else { '?' });
    // The local servers may or may not offer TLS: whether connect succeeds does not matter here,
    // the warning is logged before the first byte is sent.
    for (url, warns) in [
        (with(&pg, "sslmode=prefer"), true),
        (with(&pg, "sslmode=require"), true),
        (with(&my, "ssl-mode=PREFERRED"), true),
        (with(&pg, "sslmode=%72equire"), true),
        (with(&pg, "ssl%2Dmode=REQUIRE"), true),
        (with(&my, "ssl-mode=%52EQUIRED"), true),
        (with(&pg, "sslmode=verify-full"), false),
        (with(&my, "ssl-mode=VERIFY_IDENTITY"), false),
        (pg.clone(), false),
    ] {
        let _ = dlock::connect_with(&config(&url)).await;
        let text = logs.take();
        assert_eq!(text.contains("WARN"), warns, "{url}: {text:?}");
        if warns {
            assert!(text.contains("does not verify the server"), "{text}");
        }
    }
    let _ = dlock::connect_rw_with(&config("postgres://app:Hunter2word@127.0.0.2:1/test?sslmode=require")).await;
    let text = logs.take();
    assert!(text.contains("WARN") && !text.contains("Hunter2word"), "{text}");
}

/// `[sql] tls = "verify"` refuses every mode that does not verify the server, before a byte is
/// sent (nothing listens on 127.0.0.2:1: a connection attempt would be `Unavailable` instead).
#[tokio::test]
async fn tls_verify_refuses_unverified_modes() {
    for (url, refused) in [
        ("postgres://app:Hunter2word@127.0.0.2:1/test?sslmode=require", true),
        ("postgres://app:Hunter2word@127.0.0.2:1/test?sslmode=%72equire", true),
        ("postgres://app:Hunter2word@127.0.0.2:1/test", true),
        ("postgres://app:Hunter2word@127.0.0.2:1/test?sslmode=disable", true),
        ("mysql://app:Hunter2word@127.0.0.2:1/test?ssl-mode=REQUIRED", true),
        ("mariadb://app:Hunter2word@127.0.0.2:1/test", true),
        ("postgres://app:Hunter2word@127.0.0.2:1/test?sslmode=verify-full", false),
        ("mysql://app:Hunter2word@127.0.0.2:1/test?ssl-mode=VERIFY_IDENTITY", false),
    ] {
        let mut c = config(url);
        c.sql.tls = dlock::sql::SqlTls::Verify;
        c.sql.connect_timeout = std::time::Duration::from_millis(500);
        let err = dlock::connect_with(&c).await.err().unwrap_or_else(|| panic!("{url} connected"));
        let text = err.to_string();
        assert!(!text.contains("Hunter2word"), "{text}");
        assert_eq!(
            matches!(err, dlock::LockError::Config { .. }) && text.contains("tls = \"verify\""),
            refused,
            "{url}: {text}"
        );
        if refused {
            assert!(text.contains("verify-full") || text.contains("VERIFY_IDENTITY"), "says what to do: {text}");
        }
    }
}
