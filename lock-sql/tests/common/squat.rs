//! Table squatting: a lock table someone else created first — other columns,
//! a trigger, another owner — is refused with a `Config` error that says why; a schema-qualified
//! table name works.

use std::time::Duration;

use lock_core::{DistributedLock, LockError};
use lock_sql::SqlOptions;

use super::{Admin, Dialect, SqlFixture};

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

fn options(table: &str) -> SqlOptions {
    SqlOptions {
        table: table.to_owned(),
        connect_timeout: Duration::from_secs(3),
        request_timeout: Duration::from_secs(3),
        ..SqlOptions::default()
    }
}

/// `connect` to `table` must fail with a `Config` error containing every piece of `says`.
async fn refused(url: &str, table: &str, says: &[&str]) {
    match lock_sql::connect(url, options(table)).await {
        Err(LockError::Config { reason }) => {
            for piece in says {
                assert!(reason.contains(piece), "the refusal should say {piece:?}: {reason}");
            }
        }
        Err(e) => panic!("table {table}: expected a Config error, got {e}"),
        Ok(_) => panic!("table {table}: a squatted table was adopted"),
    }
}

/// The same URL with another user and no password.
fn as_user(url: &str, user: &str) -> String {
    let mut url = url::Url::parse(url).expect("test URL");
    url.set_username(user).expect("user");
    url.set_password(None).expect("password");
    url.to_string()
}

/// Drops what a check made: `tables` (quoted as a statement names them), then on PostgreSQL
/// `pg_only` (the function or schema they used, as `DROP` names it).
async fn drop_made(admin: &mut Admin, tables: impl IntoIterator<Item = String>, pg_only: String) {
    for t in tables {
        admin.run(&format!("DROP TABLE {t}")).await;
    }
    if matches!(admin, Admin::Postgres(_)) {
        admin.run(&format!("DROP {pg_only}")).await;
    }
}

/// Wrong columns and an added trigger are refused (PostgreSQL and MySQL/MariaDB).
pub async fn check_squatted_tables(fx: &SqlFixture) -> Result<(), LockError> {
    let mut admin = Admin::connect(fx).await;
    let (wrong, trig) = (unique("dlock_sq_cols"), unique("dlock_sq_trig"));
    let text = if fx.dialect() == Dialect::Postgres { "TEXT" } else { "VARBINARY(255)" };
    // fence as text: every comparison of tokens goes wrong.
    admin
        .run(&format!(
            "CREATE TABLE \"{wrong}\" (name {text} NOT NULL PRIMARY KEY, owner {text}, fence {text} NOT NULL, \
             expires_at BIGINT NOT NULL)"
        ))
        .await;
    // dlock's own table, then a trigger that hands every grant token 1.
    drop(lock_sql::connect(fx.url(), options(&trig)).await?);
    match fx.dialect() {
        Dialect::Postgres => {
            admin
                .run(&format!(
                    "CREATE FUNCTION \"{trig}_fn\"() RETURNS trigger LANGUAGE plpgsql AS \
                     $$ BEGIN NEW.fence := 1; RETURN NEW; END $$"
                ))
                .await;
            admin
                .run(&format!(
                    "CREATE TRIGGER \"{trig}_t\" BEFORE INSERT OR UPDATE ON \"{trig}\" FOR EACH ROW \
                     EXECUTE FUNCTION \"{trig}_fn\"()"
                ))
                .await;
        }
        _ => {
            admin
                .run(&format!("CREATE TRIGGER \"{trig}_t\" BEFORE UPDATE ON \"{trig}\" FOR EACH ROW SET NEW.fence = 1"))
                .await
        }
    }
    refused(fx.url(), &wrong, &["its columns are", "fence", "squatting"]).await;
    refused(fx.url(), &trig, &[&format!("trigger {trig}_t"), "squatting"]).await;
    // The read-write lock's tables are checked too.
    let kinds = unique("dlock_sq_kinds");
    drop(lock_sql::connect_rw(fx.url(), options(&kinds)).await?);
    admin.run(&format!("ALTER TABLE \"{kinds}_holders\" ADD COLUMN extra BIGINT")).await;
    match lock_sql::connect_rw(fx.url(), options(&kinds)).await {
        Err(LockError::Config { reason }) => assert!(reason.contains("extra"), "{reason}"),
        Err(e) => panic!("expected a Config error, got {e}"),
        Ok(_) => panic!("a holders table with an extra column was adopted"),
    }
    let made = [
        wrong,
        trig.clone(),
        format!("{trig}_waiters"),
        kinds.clone(),
        format!("{kinds}_waiters"),
        format!("{kinds}_holders"),
        format!("{kinds}_counters"),
    ];
    drop_made(&mut admin, made.map(|t| format!("\"{t}\"")), format!("FUNCTION \"{trig}_fn\"()")).await;
    Ok(())
}

/// A schema-qualified table works, for every kind, and lands in that schema (PostgreSQL: a new
/// schema; MySQL/MariaDB: the URL's database named explicitly).
pub async fn check_qualified_table(fx: &SqlFixture) -> Result<(), LockError> {
    let mut admin = Admin::connect(fx).await;
    let schema = match fx.dialect() {
        Dialect::Postgres => {
            let s = unique("dlock_sq_schema");
            admin.run(&format!("CREATE SCHEMA \"{s}\"")).await;
            s
        }
        _ => url::Url::parse(fx.url()).expect("test URL").path().trim_start_matches('/').to_owned(),
    };
    let name = unique("t");
    let table = format!("{schema}.{name}");
    let lock = lock_sql::connect(fx.url(), options(&table)).await?;
    let lease = lock.acquire(&lock_core::LockName::new("qualified")?, &Default::default()).await?;
    assert!(lease.token().0 >= 1);
    lease.release().await?;
    drop(lock_sql::connect_rw(fx.url(), options(&table)).await?);
    drop(lock_sql::connect_semaphore(fx.url(), options(&table)).await?);
    let made = ["", "_waiters", "_counters", "_holders"].map(|suffix| format!("\"{schema}\".\"{name}{suffix}\""));
    drop_made(&mut admin, made, format!("SCHEMA \"{schema}\"")).await;
    Ok(())
}

/// PostgreSQL: a table owned by a role that is neither the connecting user, one it belongs to,
/// nor a superuser is refused; once the user owns it, it is used.
pub async fn check_foreign_owner(fx: &SqlFixture) -> Result<(), LockError> {
    let mut admin = Admin::connect(fx).await;
    let (user, mallory, table) = (unique("dlock_sq_user"), unique("dlock_sq_mallory"), unique("dlock_sq_owned"));
    admin.run(&format!("CREATE ROLE {user} LOGIN")).await;
    admin.run(&format!("CREATE ROLE {mallory} NOLOGIN")).await;
    drop(lock_sql::connect(fx.url(), options(&table)).await?);
    admin.run(&format!("ALTER TABLE \"{table}\" OWNER TO {mallory}")).await;
    admin.run(&format!("GRANT SELECT, INSERT, UPDATE ON \"{table}\" TO {user}")).await;
    let url = as_user(fx.url(), &user);
    refused(&url, &table, &["owned by role", &mallory, "squatting"]).await;
    admin.run(&format!("ALTER TABLE \"{table}\" OWNER TO {user}")).await;
    let result = lock_sql::connect(&url, options(&table)).await.map(drop);
    admin.run(&format!("DROP TABLE \"{table}\", \"{table}_waiters\"")).await;
    for role in [user, mallory] {
        admin.run(&format!("DROP OWNED BY {role}")).await;
        admin.run(&format!("DROP ROLE {role}")).await;
    }
    result
}
