//! The `dlock` tool shows the warning that a SQL URL's TLS mode does not verify the server (at its
//! default log level, whatever set the mode) and honours `[sql] tls = "verify"`; the library's
//! side is the workspace's `tests/tls_warning.rs`.

/// The `dlock` tool shows the warning at its default log level, including for a mode from
/// `PGSSLMODE`, and `DLOCK_SQL__TLS=verify` makes it refuse the mode.
#[cfg(feature = "postgres")]
#[test]
fn the_cli_shows_the_warning_and_honours_tls_verify() {
    let run_cmd = |args: &[&str], url: &str, env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"));
        cmd.args(args)
            .args(["--url", url])
            .env_remove("DLOCK_URL")
            .env_remove("DLOCK_LOG")
            .env_remove("RUST_LOG")
            .env_remove("PGSSLMODE")
            .env("DLOCK_SQL__CONNECT_TIMEOUT", "500ms");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("the dlock binary runs");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    let run = |url: &str, env: &[(&str, &str)]| run_cmd(&["status", "tls-warning"], url, env);
    let weak = "postgres://app:Hunter2word@127.0.0.2:1/test?sslmode=require";
    let text = run(weak, &[]);
    assert!(text.contains("does not verify the server") && !text.contains("Hunter2word"), "{text}");
    // A local URL without a mode is quiet, unless PGSSLMODE asks for a weak one.
    let local = "postgres://app:Hunter2word@127.0.0.2:1/test";
    let text = run(local, &[]);
    assert!(!text.contains("does not verify the server"), "{text}");
    let text = run(local, &[("PGSSLMODE", "require")]);
    assert!(text.contains("does not verify the server") && text.contains("PGSSLMODE"), "{text}");
    // tls = verify: refused, whether the mode is in the URL, the default, or PGSSLMODE's.
    for (url, env) in [(weak, None), (local, None), (local, Some("require"))] {
        let mut vars = vec![("DLOCK_SQL__TLS", "verify")];
        vars.extend(env.map(|m| ("PGSSLMODE", m)));
        let text = run(url, &vars);
        assert!(text.contains("tls = \"verify\" refuses"), "{url} {env:?}: {text}");
    }
    // PGSSLMODE=verify-full satisfies it (the connection then fails: nothing listens there).
    let text = run(local, &[("DLOCK_SQL__TLS", "verify"), ("PGSSLMODE", "verify-full")]);
    assert!(!text.contains("refuses") && !text.contains("does not verify"), "{text}");
    // `dlock doctor` opens a connection of its own for its checks: it is held to the same rule,
    // so against a live server (which would accept the unverified session) it checks nothing.
    let live =
        std::env::var("DLOCK_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let text = run_cmd(&["doctor"], &live, &[("DLOCK_SQL__TLS", "verify")]);
    assert!(text.contains("tls = \"verify\" refuses") && !text.contains("synchronous_commit"), "{text}");
}
