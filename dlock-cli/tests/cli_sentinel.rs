//! `dlock` talks to the Sentinels of a `redis+sentinel://` URL (init, doctor, the conformance
//! clean-up) with the Sentinels' own credentials only: a fake Sentinel (testkit's, it records
//! every command) names a password-protected data node; `dlock init` marks that node and the
//! Sentinel never sees the data password.

use std::process::{Command, Output};

use dlock_testkit::servers::fake_sentinel::{protected_redis, FakeSentinel, MASTER_NAME};

const DATA_PASSWORD: &str = "data-secret-3f60";
const SENTINEL_PASSWORD: &str = "sentinel-secret-e1b9";

fn dlock(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlock"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("DLOCK_") && !k.starts_with("DLOCK_TEST_")) {
        cmd.env_remove(key);
    }
    cmd.args(args).current_dir(dir.path()).output().expect("the dlock binary runs")
}

#[tokio::test]
async fn init_through_a_sentinel_sends_it_only_its_own_password() {
    let (data, _server, _dir) = protected_redis(DATA_PASSWORD).await.expect("a redis-server with a password");
    let sentinel = FakeSentinel::start(data).await.expect("a fake Sentinel");
    let url = format!(
        "redis+sentinel://:{DATA_PASSWORD}@{}/{MASTER_NAME}?sentinel_password={SENTINEL_PASSWORD}",
        sentinel.addr
    );
    let out = tokio::task::spawn_blocking(move || dlock(&["init", "--url", &url])).await.expect("joined");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "init: {stdout}\n{stderr}");
    assert!(stdout.contains("marked fresh") && stdout.contains(&data.to_string()), "{stdout}");
    assert!(!stdout.contains(DATA_PASSWORD) && !stderr.contains(SENTINEL_PASSWORD), "{stdout}\n{stderr}");

    let seen = sentinel.commands();
    assert!(
        !seen.iter().flatten().any(|arg| arg.contains(DATA_PASSWORD)),
        "the data password reached the Sentinel: {seen:?}"
    );
    assert!(
        seen.iter().any(|c| c[0].eq_ignore_ascii_case("AUTH") && c[1..] == [SENTINEL_PASSWORD]),
        "dlock logged in to the Sentinel with its password: {seen:?}"
    );
}
