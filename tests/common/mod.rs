//! Helpers the test binaries of the facade and of the tool (`dlock-cli/tests/`, by `#[path]`)
//! share. Each binary compiles this module and uses a part of it, hence the allowances.
#![allow(dead_code, unreachable_pub)]

use sqlx::Connection;

pub mod backends;

/// `key` from the environment when set and not blank, else `default`.
pub fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_owned())
}

/// The PostgreSQL server the tests share (`DLOCK_TEST_POSTGRES_URL`, else the local one).
pub fn postgres_url() -> String {
    env_or("DLOCK_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
}

/// The MySQL/MariaDB server the tests share (`DLOCK_TEST_MYSQL_URL`, else the local one).
pub fn mysql_url() -> String {
    env_or("DLOCK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
}

/// The tables a SQL backend configured with `table` creates.
pub fn sql_tables(table: &str) -> [String; 3] {
    [table.to_owned(), format!("{table}_counters"), format!("{table}_holders")]
}

/// Every printable ASCII character that is not a letter or digit.
pub fn specials() -> impl Iterator<Item = char> {
    (0x21u8..0x7f).map(char::from).filter(|c| !c.is_ascii_alphanumeric())
}

/// The distinctive pieces every password of [`secret_urls`] holds; no output may show one.
pub const SECRET_PIECES: [&str; 4] = ["Hunter", "2word", "Kiwi", "9Secret"];

/// URLs of servers that do not exist (port 1) whose passwords hold `c`, one per backend that
/// quotes its URL in errors; ZooKeeper's root is `zk_root`.
pub fn secret_urls(c: char, zk_root: &str) -> Vec<String> {
    vec![
        format!("redlock://u:Hunter{c}2word@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"),
        format!("zk://u:Hunter{c}2word@127.0.0.1:1/{zk_root}"),
        format!("redis://u:Hunter{c}2word@127.0.0.1:1/0"),
        format!("mysql://u:Hunter{c}2word@127.0.0.1:1/test?ssl-key=Kiwi{c}9Secret"),
    ]
}

/// A connection to the shared PostgreSQL or MySQL server, by the URL's scheme: for checking and
/// dropping what a test's private tables hold.
pub enum Sql {
    Postgres(sqlx::PgConnection),
    Mysql(sqlx::MySqlConnection),
}

impl Sql {
    pub async fn connect(url: &str) -> Sql {
        if url.starts_with("mysql:") {
            Sql::Mysql(sqlx::MySqlConnection::connect(url).await.expect("connect to mysql"))
        } else {
            Sql::Postgres(sqlx::PgConnection::connect(url).await.expect("connect to postgres"))
        }
    }

    /// How many rows `table` holds.
    pub async fn rows(&mut self, table: &str) -> i64 {
        let counted = match self {
            Sql::Postgres(c) => {
                let query = format!("SELECT count(*) FROM \"{table}\"");
                sqlx::query_scalar(sqlx::AssertSqlSafe(query)).fetch_one(c).await
            }
            Sql::Mysql(c) => {
                let query = format!("SELECT CAST(COUNT(*) AS SIGNED) FROM `{table}`");
                sqlx::query_scalar(sqlx::AssertSqlSafe(query)).fetch_one(c).await
            }
        };
        counted.unwrap_or_else(|e| panic!("count rows of {table}: {e}"))
    }

    /// Drops the tables of a SQL backend configured with `table` (those that exist), its waiter
    /// queue's too.
    pub async fn drop_tables(&mut self, table: &str) {
        let all: Vec<String> = sql_tables(table).into_iter().chain([format!("{table}_waiters")]).collect();
        let drop = sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {}", all.join(", ")));
        let dropped = match self {
            Sql::Postgres(c) => sqlx::raw_sql(drop).execute(c).await.map(|_| ()),
            Sql::Mysql(c) => sqlx::raw_sql(drop).execute(c).await.map(|_| ()),
        };
        dropped.unwrap_or_else(|e| panic!("drop the test tables of {table}: {e}"));
    }
}
