//! `dlock doctor` runs its PostgreSQL checks on a connection of its own, under the lock role's
//! `search_path`: an operator or function planted in a schema ahead of `pg_catalog` there must
//! never run in them (it would run as the lock role, and make the clock check lie).

use std::process::Command;

use dlock_testkit::planted;
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};

fn admin_url() -> String {
    std::env::var("DLOCK_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// `url` with `user` instead of its userinfo (the test server trusts local connections).
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{user}@{host}")
}

/// Runs `dlock ARGS --url <role's URL>` as a fresh role whose `search_path` puts a hostile
/// schema ahead of `pg_catalog`, with `numeric * integer`, `clock_timestamp()` and
/// `has_table_privilege(text, text)` planted there, each recording its call. Returns whether
/// the command succeeded, its output, and the planted calls made; the role and schemas are
/// dropped before it returns.
fn run_with_planted_path(tag: &str, args: &[&str]) -> (bool, String, Vec<String>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let suffix = format!("{}_{}", std::process::id(), std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().as_nanos());
    let (role, hostile, home) = (
        format!("dlock_{tag}_role_{suffix}"),
        format!("dlock_{tag}_hostile_{suffix}"),
        format!("dlock_{tag}_home_{suffix}"),
    );
    let h = &hostile;
    let mut setup = vec![format!("CREATE ROLE {role} LOGIN")];
    setup.extend(planted::schema(h));
    setup.extend([
        planted::function(h, "mul(numeric, integer)", "numeric", "numeric * integer", "SELECT 0::numeric"),
        planted::operator(h, "*", "numeric", "integer", "mul"),
        planted::function(h, "clock_timestamp()", "timestamptz", "clock_timestamp()", "SELECT 'epoch'::timestamptz"),
        planted::function(
            h,
            "has_table_privilege(text, text)",
            "boolean",
            "has_table_privilege(text, text)",
            "SELECT true",
        ),
        format!("CREATE SCHEMA {home} AUTHORIZATION {role}"),
        format!("ALTER ROLE {role} SET search_path = {home}, {h}, pg_catalog"),
    ]);
    rt.block_on(async {
        let mut admin = PgConnection::connect(&admin_url()).await.expect("the PostgreSQL test server (superuser)");
        for sql in &setup {
            admin.execute(AssertSqlSafe(sql.clone())).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
            .args(args)
            .args(["--url", &as_user(&admin_url(), &role)])
            .env_remove("DLOCK_URL")
            .output()
            .expect("the dlock binary runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let calls = sqlx::query_scalar(AssertSqlSafe(format!("SELECT what FROM {h}.calls")))
            .fetch_all(&mut admin)
            .await
            .expect("read the calls");
        for sql in [
            format!("DROP SCHEMA {home} CASCADE"),
            format!("DROP SCHEMA {h} CASCADE"),
            format!("DROP OWNED BY {role}"),
            format!("DROP ROLE {role}"),
        ] {
            let _ = admin.execute(AssertSqlSafe(sql)).await;
        }
        (out.status.success(), text, calls)
    })
}

#[test]
fn doctor_never_runs_operators_planted_on_the_search_path() {
    let (_, text, calls) = run_with_planted_path("dsp", &["doctor"]);
    assert!(text.contains("clock skew") && text.contains("connection budget"), "doctor ran its checks:\n{text}");
    assert!(calls.is_empty(), "planted code ran in doctor's checks: {calls:?}");
}

/// `dlock bench`'s floor runs on a connection of its own too: pinned like the lock's sessions
/// (`lock_sql::pin_postgres`), its `extract(…) * 1000` and `clock_timestamp()` never reach
/// what a schema ahead of `pg_catalog` on the role's path plants.
#[test]
fn bench_floor_never_runs_operators_planted_on_the_search_path() {
    let (ok, text, calls) =
        run_with_planted_path("bsp", &["bench", "--json", "--cases", "baseline", "--duration", "300ms"]);
    assert!(ok && text.contains("\"baseline\""), "the floor ran:\n{text}");
    assert!(calls.is_empty(), "planted code ran in the bench floor: {calls:?}");
}
