//! `dlock conformance --json` against every bundled backend: the report must list at least 15
//! cases with none failed or skipped, and the exit status must say so.

use std::process::Command;

use serde_json::Value;

fn run_conformance(url: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["conformance", "--json", "--url", url])
        .env_remove("DLOCK_URL")
        .output()
        .expect("the dlock binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("no JSON report for {url}: {e}\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    let count = |k: &str| report[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {report}"));
    let cases = report["cases"].as_array().expect("cases array");
    for case in cases {
        for key in ["name", "outcome", "ms", "detail"] {
            assert!(case.get(key).is_some(), "case without {key}: {case}");
        }
    }
    let failed: Vec<&Value> = cases.iter().filter(|c| c["outcome"] == "failed" || c["outcome"] == "skipped").collect();
    assert!(failed.is_empty(), "{url}: failed or skipped cases: {failed:#?}\nstderr:\n{stderr}");
    assert_eq!(count("failed"), 0);
    assert_eq!(count("skipped"), 0);
    assert!(count("passed") >= 15, "{url}: only {} cases passed", count("passed"));
    assert_eq!(
        count("passed") + count("not_applicable"),
        cases.len() as u64,
        "the counts must add up to the listed cases"
    );
    assert!(out.status.success(), "{url}: exit status {:?} with a clean report", out.status);
    eprintln!(
        "{url}: {} passed, {} not applicable",
        count("passed"),
        count("not_applicable")
    );
    report
}

#[test]
fn memory() {
    let report = run_conformance("memory://cli-test");
    assert_eq!(report["backend"], "memory");
}

#[test]
fn exit_status_is_nonzero_on_a_broken_url() {
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["conformance", "--json", "--url", "nope://x"])
        .output()
        .expect("the dlock binary runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown backend scheme"));
}
