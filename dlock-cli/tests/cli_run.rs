//! `dlock run`: commands run one at a time with rising tokens, the lease's loss stops the command
//! with exit 3, signals are forwarded, and every documented exit code is what a script sees.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

mod support;
use support::{dlock, output};

/// A fresh temp dir and the URL of a SQLite database (`run.db`) in it.
fn sqlite_db() -> (TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("run.db").display());
    (dir, url)
}

/// Waits until the command has touched `marker`, at most 20 s after `begun`.
fn wait_until_started(marker: &Path, begun: Instant) {
    while !marker.exists() {
        assert!(begun.elapsed() < Duration::from_secs(20), "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn four_concurrent_runs_take_turns_with_rising_tokens() {
    let (dir, url) = sqlite_db();
    let log = dir.path().join("log");
    // Each command logs its start and end with its token; overlapping runs would interleave.
    let script = format!(
        "echo \"start $DLOCK_FENCING_TOKEN $DLOCK_LOCK_NAME\" >> {log}; sleep 0.3; echo \"end $DLOCK_FENCING_TOKEN\" >> {log}",
        log = log.display()
    );
    let children: Vec<_> = (0..4)
        .map(|_| {
            dlock(&["run", "--url", &url, "--name", "jobs/nightly", "--wait", "60s", "--", "sh", "-c", &script])
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn dlock run")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("dlock run ends");
        assert!(out.status.success(), "dlock run failed: {}", stderr(&out));
    }
    let text = std::fs::read_to_string(&log).expect("log written");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "four starts and four ends: {text}");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].split_whitespace().collect();
        let end: Vec<&str> = pair[1].split_whitespace().collect();
        assert_eq!((start[0], end[0]), ("start", "end"), "runs overlapped: {text}");
        assert_eq!(start[1], end[1], "an end of another run in between: {text}");
        assert_eq!(start[2], "jobs/nightly", "DLOCK_LOCK_NAME: {text}");
        let token: u64 = start[1].parse().expect("a numeric DLOCK_FENCING_TOKEN");
        assert!(token > last, "tokens must rise: {text}");
        last = token;
    }
}

#[test]
fn exit_status_of_the_command_is_passed_through() {
    let (_dir, url) = sqlite_db();
    let out = output(&["run", "--url", &url, "--name", "x", "--", "sh", "-c", "exit 7"]);
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    // Released: the next run gets it at once.
    let out = output(&["run", "--url", &url, "--name", "x", "--wait", "0s", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(&["run", "--url", &url, "--name", "x", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&out), 128 + 9, "a signal N is 128 + N: {}", stderr(&out));
}

#[test]
fn busy_is_exit_1() {
    let (_dir, url) = sqlite_db();
    let holder = dlock(&["run", "--url", &url, "--name", "busy", "--", "sleep", "3"]).spawn().expect("spawn holder");
    let begun = Instant::now();
    let mut out;
    // Wait until the holder has the lock, then a no-wait run must say busy.
    loop {
        out = output(&["run", "--url", &url, "--name", "busy", "--wait", "0s", "--", "true"]);
        if code(&out) != 0 || begun.elapsed() > Duration::from_secs(3) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let out = output(&["run", "--url", &url, "--name", "busy", "--wait", "200ms", "--", "true"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let held = holder.wait_with_output().expect("holder ends");
    assert!(held.status.success());
}

#[test]
fn usage_config_unavailable_and_missing_command_codes() {
    let out = output(&["run", "--url", "memory://", "--name", "x"]);
    assert_eq!(code(&out), 2, "no command is a usage error: {}", stderr(&out));
    let out = output(&["run", "--url", "memory://", "--name", "", "--", "true"]);
    assert_eq!(code(&out), 2, "an invalid name is a usage error: {}", stderr(&out));
    let out = output(&["run", "--url", "nope://x", "--name", "x", "--", "true"]);
    assert_eq!(code(&out), 78, "{}", stderr(&out));
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("dlock.toml");
    std::fs::write(&bad, "ttl = \"forty\"\n").expect("write config");
    let out = output(&["run", "--config", bad.to_str().expect("utf-8 path"), "--name", "x", "--", "true"]);
    assert_eq!(code(&out), 78, "a broken config file: {}", stderr(&out));
    // Nothing listens on port 1.
    let out = output(&["run", "--url", "redis://127.0.0.1:1", "--name", "x", "--wait", "1s", "--", "true"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let out = output(&["run", "--url", "memory://", "--name", "x", "--", "/nonexistent/dlock-test-cmd"]);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
}

#[test]
fn lease_deleted_behind_the_command_stops_it_with_exit_3() {
    let (dir, url) = sqlite_db();
    let marker = dir.path().join("started");
    let script = format!("touch {}; exec sleep 30", marker.display());
    let begun = Instant::now();
    let child = dlock(&[
        "run", "--url", &url, "--name", "doomed", "--ttl", "900ms", "--grace", "2s", "--", "sh", "-c", &script,
    ])
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn dlock run");
    wait_until_started(&marker, begun);
    // What an operator or a failing database does: the lease row now names another owner.
    let db = dir.path().join("run.db");
    let status = Command::new("sqlite3").arg(&db).arg("UPDATE dlock_leases SET owner = 'someone-else'").status();
    if !matches!(status, Ok(s) if s.success()) {
        // No sqlite3 tool: take the row over through the library's own table with sqlx instead.
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.expect("open db");
            sqlx::query("UPDATE dlock_leases SET owner = 'someone-else'").execute(&mut c).await.expect("update");
        });
    }
    let out = child.wait_with_output().expect("dlock run ends");
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
    assert!(
        begun.elapsed() < Duration::from_secs(15),
        "the command was stopped, not waited out: {:?}",
        begun.elapsed()
    );
}

#[test]
fn sigterm_is_forwarded_and_the_lock_released() {
    let (dir, url) = sqlite_db();
    let marker = dir.path().join("ready");
    let script = format!("sleep 30 & sp=$!; trap 'kill $sp; exit 42' TERM; touch {}; wait", marker.display());
    let child = dlock(&["run", "--url", &url, "--name", "sig", "--", "sh", "-c", &script]).spawn().expect("spawn");
    let begun = Instant::now();
    wait_until_started(&marker, begun);
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().expect("kill runs");
    assert!(status.success());
    let out = child.wait_with_output().expect("dlock run ends");
    assert_eq!(code(&out), 42, "the command's own answer to SIGTERM");
    let out = output(&["run", "--url", &url, "--name", "sig", "--wait", "0s", "--", "true"]);
    assert_eq!(code(&out), 0, "released after the command ended: {}", stderr(&out));
}

/// The command gets what it needs (lock name, token, holder) and the rest of dlock's caller's
/// environment, but none of dlock's own configuration: `DLOCK_URL` carries the password, and any
/// `DLOCK_*` variable (`DLOCK_CONFIG`, a deployment's `DLOCK_API_TOKEN`) may be a secret or point at one.
#[test]
fn the_command_gets_no_dlock_configuration() {
    let (dir, url) = sqlite_db();
    let seen = dir.path().join("env");
    let script = format!("env > '{}'", seen.display());
    let out = dlock(&["run", "--name", "jobs/env", "--holder", "cron@host-1", "--", "sh", "-c", &script])
        .env("DLOCK_URL", &url)
        .env("DLOCK_API_TOKEN", "Kiwi9Secret")
        .env("DLOCK_LOG", "warn")
        .env("APP_SETTING", "kept")
        .output()
        .expect("the dlock binary runs");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let env = std::fs::read_to_string(&seen).expect("the command wrote its environment");
    let vars: Vec<(&str, &str)> = env.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| vars.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    assert_eq!(get("DLOCK_LOCK_NAME"), Some("jobs/env"), "{env}");
    assert_eq!(get("DLOCK_HOLDER"), Some("cron@host-1"), "{env}");
    assert!(get("DLOCK_FENCING_TOKEN").is_some_and(|t| t.parse::<u64>().is_ok()), "{env}");
    assert_eq!(get("APP_SETTING"), Some("kept"), "the caller's own environment is passed on: {env}");
    assert!(get("PATH").is_some(), "{env}");
    let dlock_vars: Vec<&str> = vars.iter().map(|(k, _)| *k).filter(|k| k.starts_with("DLOCK_")).collect();
    assert_eq!(
        dlock_vars
            .iter()
            .copied()
            .filter(|k| !["DLOCK_LOCK_NAME", "DLOCK_HOLDER", "DLOCK_FENCING_TOKEN"].contains(k))
            .count(),
        0,
        "dlock's configuration reached the command: {dlock_vars:?}"
    );
    assert!(!env.contains("Kiwi9Secret") && !env.contains(&url), "{env}");
}
