//! MySQL/MariaDB table adoption on the real server: an existing lock table is
//! used only if it is a base table of dlock's engine with no trigger. A view over dlock's own
//! table, behind which a trigger hands every grant token 1, looks right column by column and was
//! adopted; so was a MyISAM table (no transactions, no row locks).

use std::time::Duration;

use dlock::{AcquireOptions, Config, LockError, LockName};
use sqlx::{Connection, MySqlConnection};

mod common;
use common::mysql_url;

fn config(table: &str) -> Config {
    let mut config = Config::from_url(&mysql_url());
    config.sql.table = table.to_owned();
    config.sql.connect_timeout = Duration::from_secs(10);
    config
}

fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("dlock_adopt_{tag}_{}_{}", std::process::id(), nanos % 1_000_000_000)
}

async fn run(db: &mut MySqlConnection, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(&mut *db).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Connecting to `table` must be a `Config` error that says each of `says`.
async fn refused(table: &str, says: &[&str]) {
    match dlock::connect_with(&config(table)).await {
        Err(LockError::Config { reason }) => {
            for piece in says {
                assert!(reason.contains(piece), "the refusal of {table} should say {piece:?}: {reason}");
            }
        }
        Err(e) => panic!("{table}: expected a Config error, got {e}"),
        Ok(_) => panic!("{table} was adopted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_base_innodb_tables_without_triggers_are_adopted() {
    let mut db = MySqlConnection::connect(&mysql_url()).await.expect("the MariaDB/MySQL test server");
    let (inner, view, trig, myisam, plain) =
        (unique("inner"), unique("view"), unique("trig"), unique("myisam"), unique("plain"));
    // dlock's own tables, made by dlock.
    for t in [&inner, &trig, &myisam, &plain] {
        drop(dlock::connect_with(&config(t)).await.expect("dlock creates its table"));
    }
    // A view over one of them, with the trigger hidden behind it on the real table.
    run(&mut db, &format!("CREATE TRIGGER `{inner}_t` BEFORE UPDATE ON `{inner}` FOR EACH ROW SET NEW.fence = 1"))
        .await;
    run(&mut db, &format!("CREATE VIEW `{view}` AS SELECT * FROM `{inner}`")).await;
    run(&mut db, &format!("CREATE TRIGGER `{trig}_t` BEFORE UPDATE ON `{trig}` FOR EACH ROW SET NEW.fence = 1")).await;
    run(&mut db, &format!("ALTER TABLE `{myisam}` ENGINE=MyISAM")).await;

    refused(&view, &["VIEW", "not a base table", "squatting"]).await;
    refused(&trig, &[&format!("trigger {trig}_t"), "squatting"]).await;
    refused(&myisam, &["engine \"MyISAM\"", "InnoDB", "squatting"]).await;
    // dlock's own table is still adopted, and works.
    let lock = dlock::connect_with(&config(&plain)).await.expect("dlock's own table is adopted");
    let name = LockName::new("adoption").expect("valid");
    let lease = lock.acquire(&name, &AcquireOptions::new(Duration::from_secs(10))).await.expect("granted");
    lease.release().await.expect("released");
    drop(lock);

    run(&mut db, &format!("DROP VIEW `{view}`")).await;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'dlock\\_adopt\\_%' AND TABLE_TYPE = 'BASE TABLE'",
    )
    .fetch_all(&mut db)
    .await
    .expect("list the test's tables");
    for t in tables.iter().filter(|t| [&inner, &view, &trig, &myisam, &plain].iter().any(|p| t.starts_with(p.as_str())))
    {
        run(&mut db, &format!("DROP TABLE `{t}`")).await;
    }
}
