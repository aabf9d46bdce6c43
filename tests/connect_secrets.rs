//! Errors from `connect` never show a secret of the URL — neither in their message nor in their
//! `Debug` form — whatever special character the password holds: client libraries that cut a
//! pasted password at `/`, `?`, `#`, `@` or `,` quote the pieces, and the one redactor hides them.

use dlock::Config;

mod common;
use common::{secret_urls, specials, SECRET_PIECES};

#[tokio::test]
async fn connect_errors_hide_every_password() {
    let mut failures = 0;
    for c in specials() {
        // Nothing listens on port 1, so every URL that parses fails to connect.
        let postgres = format!("postgres://u:Hunter{c}2word@127.0.0.1:1/test?sslpassword=Kiwi{c}9Secret");
        for url in secret_urls(c, "dlock-facade-secrets").into_iter().chain([postgres]) {
            let mut config = Config::from_url(&url);
            config.zk.connect_timeout = std::time::Duration::from_millis(200);
            let Err(e) = dlock::connect_with(&config).await else { panic!("{url} cannot connect") };
            failures += 1;
            let shown = format!("{e} {e:?}");
            for piece in SECRET_PIECES {
                assert!(!shown.contains(piece), "{url}: the error shows {piece:?}: {shown}");
            }
        }
    }
    assert_eq!(failures, 32 * 5, "every URL was tried");
}
