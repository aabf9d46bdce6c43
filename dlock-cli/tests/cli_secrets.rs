//! The CLI at trace level never prints a secret of its URL: `dlock config` and `dlock
//! conformance` run with passwords holding every special printable ASCII character (in the
//! userinfo and in `sslpassword`), and their whole stdout and stderr are searched for them.

use std::process::{Command, Output};

// The workspace tests' shared helpers (test servers, URLs), not a copy of them.
#[path = "../../tests/common/mod.rs"]
mod common;
use common::{secret_urls, specials, SECRET_PIECES};

fn run(args: &[&str]) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(args)
        .env_remove("DLOCK_URL")
        // Nothing listens on port 1; do not wait the default 5 s for a ZooKeeper session.
        .env("DLOCK_ZK__CONNECT_TIMEOUT", "200ms")
        .env("RUST_LOG", "trace")
        .env("DLOCK_LOG", "trace")
        .output()
        .expect("the dlock binary runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out, text)
}

fn assert_no_secret(text: &str, what: &str) {
    for piece in SECRET_PIECES {
        assert!(!text.contains(piece), "{what} shows {piece:?}:\n{text}");
    }
}

#[test]
fn config_never_prints_a_secret() {
    for c in specials() {
        let url = format!(
            "postgres://app:Hunter{c}2word@db.example:5432/test?sslmode=verify-full&sslpassword=Kiwi{c}9Secret"
        );
        let (out, text) = run(&["config", "--url", &url]);
        assert!(out.status.success(), "dlock config {url:?} failed:\n{text}");
        assert!(text.contains("db.example"), "the URL is shown, redacted:\n{text}");
        assert_no_secret(&text, &format!("dlock config --url {url:?}"));
    }
}

#[test]
fn failing_connects_never_print_a_secret() {
    // Nothing listens on port 1: each backend fails, and its message may quote the URL.
    for c in specials() {
        for url in secret_urls(c, "dlock-cli-secrets") {
            let (out, text) = run(&["conformance", "--filter", "lease_validity", "--url", &url]);
            assert!(!out.status.success(), "{url:?} cannot pass with no server:\n{text}");
            assert_no_secret(&text, &format!("dlock conformance --url {url:?}"));
        }
    }
}

#[test]
fn a_conformance_run_at_trace_level_never_prints_a_secret() {
    // The server trusts local connections, so the passwords (in the userinfo and in the
    // `password` parameter, which sqlx reads and which wins) are carried but not checked.
    let url = "postgres://postgres:Hunter%2F%3F%23%40%3A2word@127.0.0.1:5432/test?password=Kiwi%26%3D9Secret";
    let (out, text) = run(&["conformance", "--filter", "lease_validity", "--url", url]);
    assert!(out.status.success(), "the run passes:\n{text}");
    assert!(text.contains("TRACE") || text.contains("DEBUG"), "the run logged at trace level:\n{text}");
    assert!(text.contains("postgres: 1 passed"), "{text}");
    assert_no_secret(&text, url);
    let (out, text) = run(&["conformance", "--url", "memory://u:Hunter?2word@cli-secrets"]);
    assert!(out.status.success(), "the memory run passes:\n{text}");
    assert_no_secret(&text, "memory://u:Hunter?2word@cli-secrets");
}
