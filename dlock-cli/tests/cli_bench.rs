//! `dlock bench --json` in its smoke form against every bundled backend: every case runs, the
//! report has the documented shape, the contended case proves exclusion, and the exit status is 0.
//! No ratio is asserted here: ratios are measured in release builds and go in BENCHMARKS.md.

use serde_json::Value;

// The workspace tests' shared helpers (test servers, URLs), not a copy of them.
#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

const CASES: [&str; 5] = ["baseline", "uncontended", "contended", "spread", "held"];

fn bench(url: &str) -> Value {
    let out = support::dlock(&["bench", "--json", "--duration", "800ms", "--clients", "3", "--held", "40"])
        .args(["--ttl", "3s", "--url", url])
        .output()
        .expect("the dlock binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{url}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("no JSON report for {url}: {e}\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    let cases = report["cases"].as_array().expect("cases array");
    let names: Vec<&str> = cases.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, CASES, "{url}: every case, in order");
    for case in cases {
        assert_eq!(case["errors"], 0, "{url}: a case had errors: {case}");
        assert!(case.get("ops_per_s").is_some_and(Value::is_number), "{url}: ops_per_s missing: {case}");
    }
    let case = |n: &str| cases.iter().find(|c| c["name"] == n).expect("case present");
    for n in ["uncontended", "contended", "spread", "held"] {
        assert!(case(n)["ops"].as_u64().unwrap_or(0) > 0, "{url}: {n} did nothing: {}", case(n));
    }
    let contended = case("contended");
    assert_eq!(contended["exclusion_ok"], true, "{url}: {contended}");
    // A hand-off needs two grants; a slow backend (Redlock's random retry delay) may manage one.
    if contended["ops"].as_u64().unwrap_or(0) >= 2 {
        for key in ["handoff_p50_us", "handoff_p99_us", "other_client_pct", "p50_us", "p99_us"] {
            assert!(contended[key].is_number(), "{url}: contended lacks {key}: {contended}");
        }
    }
    let held = case("held");
    assert_eq!(held["ops"], 40, "{url}: every held lease acquired: {held}");
    assert_eq!(held["leases_lost"], 0, "{url}: {held}");
    assert!(held["cpu_pct_of_one_core"].is_number() && held["bytes_per_lease"].is_number(), "{url}: {held}");
    eprintln!("{url}: {}", serde_json::to_string(&report["ratios"]).unwrap_or_default());
    report
}

fn with_baseline(url: &str) -> Value {
    let report = bench(url);
    let base = report["cases"].as_array().and_then(|c| c.first()).cloned().unwrap_or_default();
    assert!(base["ops"].as_u64().unwrap_or(0) > 0, "{url}: the baseline ran: {base}");
    assert!(report["ratios"]["uncontended_vs_baseline"].is_number(), "{url}: {}", report["ratios"]);
    // The two took turns (`--interleave`, on by default), so their ratio compares the same minutes.
    assert_eq!(base["interleaved_with"], "uncontended", "{url}: {base}");
    assert!(report["interleave_ms"].as_u64().unwrap_or(0) > 0, "{url}: {report}");
    report
}

#[test]
fn memory_has_no_baseline_and_says_why() {
    let report = bench("memory://bench-test");
    assert_eq!(report["backend"], "memory");
    let note = report["cases"][0]["note"].as_str().unwrap_or_default();
    assert!(note.contains("no server"), "the skipped baseline says why: {note}");
}

common::backends::backend_report_tests!("bench", 3, with_baseline; sqlite, postgres, mysql, redis, redlock, zookeeper);

#[test]
fn unknown_case_is_a_usage_error() {
    support::assert_refused(&["bench", "--url", "memory://x", "--cases", "nope"], "unknown bench case");
}

/// The SQL baseline measures in a table made for the run, never in one that exists: a table of
/// the old fixed name, made first by someone else with a trigger, would run their code as the
/// bench's user (here it only counts the rows it sees).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_baseline_never_uses_a_table_someone_else_made() {
    use sqlx::Connection;
    let url = common::postgres_url();
    let mut db = sqlx::PgConnection::connect(&url).await.expect("the PostgreSQL test server");
    let log = format!("dlock_bench_squat_log_{}", std::process::id());
    let run = |sql: String| sqlx::raw_sql(sqlx::AssertSqlSafe(sql));
    for sql in [
        "DROP TABLE IF EXISTS dlock_bench_baseline".to_owned(),
        format!("CREATE TABLE {log} (seen BIGINT)"),
        "CREATE TABLE dlock_bench_baseline (name TEXT PRIMARY KEY, owner TEXT, fence BIGINT NOT NULL, \
         expires_at BIGINT NOT NULL)"
            .to_owned(),
        format!(
            "CREATE FUNCTION {log}_fn() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO {log} VALUES (NEW.fence); RETURN NEW; END $$"
        ),
        format!(
            "CREATE TRIGGER {log}_t BEFORE INSERT OR UPDATE ON dlock_bench_baseline FOR EACH ROW \
             EXECUTE FUNCTION {log}_fn()"
        ),
    ] {
        run(sql.clone()).execute(&mut db).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let out = support::output(&["bench", "--json", "--cases", "baseline", "--duration", "300ms", "--url", &url]);
    let seen: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {log}")))
        .fetch_one(&mut db)
        .await
        .expect("count the trigger's rows");
    for sql in
        ["DROP TABLE dlock_bench_baseline".to_owned(), format!("DROP FUNCTION {log}_fn()"), format!("DROP TABLE {log}")]
    {
        run(sql.clone()).execute(&mut db).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert!(report["cases"][0]["ops"].as_u64().unwrap_or(0) > 0, "the baseline ran: {report}");
    assert_eq!(seen, 0, "the baseline wrote through the squatted table's trigger");
}

/// `--rtt` puts the round trip between the clients and the server: the baseline (two round
/// trips per acquire + release) cannot be faster than it, the report says it, and dlock's own
/// client went through the same proxies (its lock works through them). A URL whose servers it
/// cannot all proxy is a usage error that says why.
#[test]
fn rtt_puts_the_round_trip_in_front_of_baseline_and_client() {
    let url = common::postgres_url();
    let out =
        support::dlock(&["bench", "--json", "--cases", "baseline,uncontended", "--duration", "600ms", "--rtt", "2ms"])
            .args(["--url", &url])
            .output()
            .expect("the dlock binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(report["rtt_us"], 2000, "{report}");
    for case in report["cases"].as_array().expect("cases") {
        assert_eq!(case["errors"], 0, "{case}");
        assert!(case["ops"].as_u64().unwrap_or(0) > 0, "{case}");
        let p50 = case["p50_us"].as_f64().unwrap_or(0.0);
        assert!(p50 >= 2000.0, "{}: p50 {p50} µs with a 2 ms round trip added: {case}", case["name"]);
    }
    support::assert_refused(
        &["bench", "--rtt", "1ms", "--url", "redis+sentinel://127.0.0.1:26379/mymaster"],
        "--rtt cannot put a delay in front of redis+sentinel://",
    );
}
