//! Errors from `connect` never show a secret of the URL — neither in their message nor in their
//! `Debug` form — whatever special character the password holds: client libraries that cut a
//! pasted password at `/`, `?`, `#`, `@` or `,` quote the pieces, and the one redactor hides them.

use dlock::Config;

/// Every printable ASCII character that is not a letter or digit.
fn specials() -> impl Iterator<Item = char> {
    (0x21u8..0x7f).map(char::from).filter(|c| !c.is_ascii_alphanumeric())
}

#[tokio::test]
async fn connect_errors_hide_every_password() {
    let mut failures = 0;
    for c in specials() {
        // Nothing listens on port 1, so every URL that parses fails to connect.
        for url in [
            format!("redlock://u:Hunter{c}2word@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"),
            format!("zk://u:Hunter{c}2word@127.0.0.1:1/dlock-facade-secrets"),
            format!("redis://u:Hunter{c}2word@127.0.0.1:1/0"),
            format!("mysql://u:Hunter{c}2word@127.0.0.1:1/test?ssl-key=Kiwi{c}9Secret"),
            format!("postgres://u:Hunter{c}2word@127.0.0.1:1/test?sslpassword=Kiwi{c}9Secret"),
        ] {
            let mut config = Config::from_url(&url);
            config.zk.connect_timeout = std::time::Duration::from_millis(200);
            let Err(e) = dlock::connect_with(&config).await else { panic!("{url} cannot connect") };
            failures += 1;
            let shown = format!("{e} {e:?}");
            for piece in ["Hunter", "2word", "Kiwi", "9Secret"] {
                assert!(!shown.contains(piece), "{url}: the error shows {piece:?}: {shown}");
            }
        }
    }
    assert_eq!(failures, 32 * 5, "every URL was tried");
}
