//! Durations near `Duration::MAX` from `dlock.toml` or `DLOCK_*` variables are `Config` errors
//! naming the key, for every backend URL; the longest accepted ones connect (or fail with a
//! typed error) and lock without a panic.

#![allow(clippy::result_large_err)] // figment::Jail closures return figment::Error

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::config::{MAX_DURATION, MAX_TIMEOUT};
use dlock::{Config, LockError, LockName};
use figment::Jail;

mod common;
use common::{env_or, mysql_url, postgres_url};

/// Every duration key the file and the environment can set.
const KEYS: &[&str] = &[
    "ttl",
    "wait",
    "sql.connect_timeout",
    "sql.request_timeout",
    "redis.connect_timeout",
    "redis.request_timeout",
    "zk.session_timeout",
    "zk.connect_timeout",
    "zk.request_timeout",
];

/// `Duration::MAX` and its neighbours, as humantime writes them, and the first value past the bound.
const EXTREMES: &[&str] = &["18446744073709551615s 999999999ns", "18446744073709551615s", "584942417355y", "366days"];

fn urls() -> Vec<String> {
    let sqlite = std::env::temp_dir().join(format!("dlock-facade-durations-{}.db", std::process::id()));
    vec![
        format!("sqlite://{}", sqlite.display()),
        postgres_url(),
        mysql_url(),
        env_or("DLOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379"),
        // Nothing listens on port 1: connect fails as Unavailable, never by a panic.
        "zk://127.0.0.1:1/dlock-facade-durations".to_owned(),
    ]
}

/// A `dlock.toml` with private names, and each `key = value` given.
fn toml(url: &str, set: &[(&str, &str)]) -> String {
    let mut sections = vec![
        ("", format!("url = {url:?}")),
        ("sql", "table = \"dlock_facade_durations\"".to_owned()),
        ("redis", "key_prefix = \"dlock-facade-durations\"".to_owned()),
        ("zk", String::new()),
    ];
    for (key, value) in set {
        let (section, name) = key.split_once('.').unwrap_or(("", key));
        let entry = sections.iter_mut().find(|(s, _)| *s == section).expect("known section");
        entry.1.push_str(&format!("\n{name} = {value:?}"));
    }
    sections
        .into_iter()
        .map(|(s, body)| if s.is_empty() { format!("{body}\n") } else { format!("[{s}]\n{body}\n") })
        .collect()
}

fn assert_config_error(result: Result<Config, LockError>, key: &str, how: &str) {
    match result {
        Err(LockError::Config { reason }) => assert!(reason.contains(key), "{how}: the error names {key}: {reason}"),
        Err(other) => panic!("{how}: a Config error expected, got {other}"),
        Ok(_) => panic!("{how}: accepted"),
    }
}

#[test]
fn extremes_from_the_file_and_the_environment_are_config_errors() {
    for url in urls() {
        for key in KEYS {
            for value in EXTREMES {
                Jail::expect_with(|jail| {
                    jail.create_file("dlock.toml", &toml(&url, &[(key, value)]))?;
                    assert_config_error(Config::load(), key, &format!("{url} file {key} = {value}"));
                    jail.create_file("dlock.toml", &toml(&url, &[]))?;
                    let var = format!("DLOCK_{}", key.replace('.', "__").to_ascii_uppercase());
                    jail.set_env(&var, value);
                    assert_config_error(Config::load(), key, &format!("{url} {var}={value}"));
                    Ok(())
                });
            }
        }
    }
}

#[tokio::test]
async fn extremes_set_in_code_are_refused_by_connect() {
    for url in urls() {
        let mut config = Config::from_url(&url);
        config.ttl = Duration::MAX;
        let e = dlock::connect_with(&config).await.err().expect("refused");
        assert!(matches!(e, LockError::Config { .. }) && e.to_string().contains("ttl"), "{url}: {e}");
        let mut config = Config::from_url(&url);
        config.wait = Some(Duration::MAX);
        let e = dlock::connect_rw_with(&config).await.err().expect("refused");
        assert!(matches!(e, LockError::Config { .. }) && e.to_string().contains("wait"), "{url}: {e}");
    }
}

/// The longest accepted value for every key, one more at each step: connect, take and release a
/// lock. Errors are fine (nothing listens on ZooKeeper's port); a panic on any thread (client
/// libraries run their own) is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_accepted_durations_never_panic() {
    let panics = Arc::new(AtomicUsize::new(0));
    let default_hook = std::panic::take_hook();
    let counter = Arc::clone(&panics);
    std::panic::set_hook(Box::new(move |info| {
        counter.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let longest = |key: &str| {
        humantime::format_duration(if key.ends_with("timeout") { MAX_TIMEOUT } else { MAX_DURATION }).to_string()
    };
    let values: Vec<(&str, String)> = KEYS.iter().map(|k| (*k, longest(k))).collect();
    for url in urls() {
        let mut set: Vec<(&str, &str)> = Vec::new();
        for (key, longest) in &values {
            set.push((key, longest));
            let mut loaded = None;
            Jail::expect_with(|jail| {
                jail.create_file("dlock.toml", &toml(&url, &set))?;
                loaded = Some(Config::load());
                Ok(())
            });
            let config =
                loaded.expect("loaded").unwrap_or_else(|e| panic!("{url}: {longest} for {key} is accepted: {e}"));
            let task = tokio::spawn(async move {
                let lock = dlock::connect_with(&config).await?;
                let name = LockName::new("dlock-facade-durations")?;
                if let Some(lease) = lock.try_acquire(&name, &config.acquire_options()).await? {
                    lease.release().await?;
                }
                Ok::<_, LockError>(())
            });
            match tokio::time::timeout(Duration::from_secs(2), task).await {
                Ok(Err(join)) => panic!("{url} with {key} = {longest}: panicked: {join}"),
                Ok(Ok(result)) => eprintln!("{url} with {key} = {longest}: {result:?}"),
                Err(_) => eprintln!("{url} with {key} = {longest}: still connecting after 2 s (no panic)"),
            }
            assert_eq!(panics.load(Ordering::SeqCst), 0, "{url} with {key} = {longest}: a thread panicked");
        }
    }
}
