//! The third-party backend example (`examples/custom_backend.rs`) does what its header says: the
//! whole suite passes on it with every fault hook; registered, `DLOCK_URL` chooses it and its
//! `[toy]` section of `dlock.toml` reaches it; and `dlock conformance` (the tool's entry point,
//! called in this process after registering, as the example's binary does) certifies it.

use std::process::ExitCode;
use std::time::Duration;

use dlock::{AcquireOptions, LockError, LockName};

#[path = "../examples/custom_backend.rs"]
#[allow(dead_code)]
mod custom_backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_custom_backend_example_passes_the_whole_suite() {
    let report = custom_backend::certify().await;
    let failed: Vec<_> = report
        .cases
        .iter()
        .filter(|c| {
            !matches!(
                c.outcome,
                lock_conformance::runner::Outcome::Passed | lock_conformance::runner::Outcome::NotApplicable
            )
        })
        .map(|c| format!("{}: {:?} {}", c.name, c.outcome, c.detail))
        .collect();
    assert!(report.ok() && failed.is_empty(), "cases that did not pass: {failed:#?}");
    assert!(report.passed >= 40, "only {} cases passed: {:#?}", report.passed, report.cases);
}

/// How many of the names `a`, `b`, `c` one client of the configured backend can hold at once.
fn held_at_once(config: &dlock::Config) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let client = dlock::Client::from_config(config).await.expect("connects");
        assert_eq!(client.backend(), "toy");
        let e = client.rw().await.err().expect("the toy has no read-write lock");
        assert!(matches!(e, LockError::Unsupported { .. }), "{e}");
        let opts = AcquireOptions::new(Duration::from_secs(5));
        let mut held = Vec::new();
        for name in ["a", "b", "c"] {
            match client.lock().try_acquire(&LockName::new(name).expect("valid"), &opts).await {
                Ok(lease) => held.push(lease.expect("free")),
                Err(LockError::Unavailable { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let count = held.len();
        for lease in held {
            lease.release().await.expect("released");
        }
        count
    })
}

#[test]
#[allow(clippy::result_large_err)] // figment::Jail closures return figment::Error
fn dlock_url_chooses_the_registered_backend_and_its_section_tunes_it() {
    custom_backend::register().expect("registers");
    figment::Jail::expect_with(|jail| {
        jail.set_env("DLOCK_URL", "toy://chosen");
        jail.create_file("dlock.toml", "[toy]\ncapacity = 1\n")?;
        let config = dlock::Config::load_required().expect("loads");
        assert_eq!(config.url, "toy://chosen");
        assert_eq!(held_at_once(&config), 1, "the file's capacity reaches the backend");
        jail.set_env("DLOCK_TOY__CAPACITY", "2");
        assert_eq!(held_at_once(&dlock::Config::load_required().expect("loads")), 2, "so does the environment's");
        jail.create_file("dlock.toml", "[tyo]\ncapacity = 1\n")?;
        let e = dlock::Config::load_required().expect_err("a section nobody registered");
        assert!(matches!(e, LockError::Config { .. }) && e.to_string().contains("[toy]"), "{e}");
        jail.set_env("DLOCK_URL", "tyo://x");
        jail.create_file("dlock.toml", "")?;
        let e = dlock::Config::load_required().expect_err("a scheme nobody registered");
        assert!(e.to_string().contains("toy://[server name]"), "the known schemes are named: {e}");
        Ok(())
    });
}

#[test]
fn the_dlock_tool_certifies_and_inspects_the_registered_backend() {
    custom_backend::register().expect("registers");
    let tool = |args: &[&str]| dlock_cli::main_from(std::iter::once("dlock").chain(args.iter().copied()));
    assert_eq!(tool(&["conformance", "--url", "toy://certified"]), ExitCode::SUCCESS);
    assert_eq!(tool(&["run", "--url", "toy://certified", "--name", "job", "--", "true"]), ExitCode::SUCCESS);
    // Held by another client of the same server while the tool inspects it.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let lease = runtime.block_on(async {
        let client = dlock::Client::connect("toy://certified").await.expect("connects");
        let opts = AcquireOptions::new(Duration::from_secs(30)).holder(dlock::Holder::new("web-7").expect("valid"));
        client.lock().acquire(&LockName::new("job").expect("valid"), &opts).await.expect("free")
    });
    assert_eq!(tool(&["status", "--url", "toy://certified", "job"]), ExitCode::SUCCESS);
    assert_eq!(tool(&["list", "--url", "toy://certified", "--json"]), ExitCode::SUCCESS);
    runtime.block_on(lease.release()).expect("released");
}
