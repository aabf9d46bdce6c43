//! Fencing a SQL table: every write carries the writer's fencing token and the row accepts it
//! only if no higher token wrote before (`UPDATE … WHERE fence <= $token`). A holder that stalls
//! past its lease comes back and writes late: the row has seen a higher token by then, so the
//! late write changes nothing. `FencingToken` binds directly as an sqlx parameter (feature
//! `sqlx`, on with `sql`).
//!
//! The lock comes from `dlock.toml` / `DLOCK_URL` (default: an embedded SQLite file); the
//! protected table lives in an in-memory SQLite database, so the example runs on every backend.
//!
//! ```text
//! cargo run --example fenced_update
//! DLOCK_URL=postgres://postgres@127.0.0.1/test cargo run --example fenced_update
//! ```

use std::time::Duration;

use dlock::{AcquireOptions, Config, LeaseModel, LockName};
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::SqlitePool;

/// What happened: each holder's write, and the balance left.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) stalled: Write,
    pub(crate) successor: Write,
    pub(crate) balance: i64,
}

/// One holder's write: the token it carried and whether the row applied it.
#[derive(Debug)]
pub(crate) struct Write {
    pub(crate) token: u64,
    pub(crate) applied: bool,
}

/// Adds `amount` to the account if `token` is not below every token that wrote before.
async fn fenced_add(db: &SqlitePool, token: dlock::FencingToken, amount: i64) -> Result<Write, sqlx::Error> {
    let done = sqlx::query("UPDATE accounts SET balance = balance + ?1, fence = ?2 WHERE id = 1 AND fence <= ?2")
        .bind(amount)
        .bind(token)
        .execute(db)
        .await?;
    Ok(Write { token: token.get(), applied: done.rows_affected() == 1 })
}

pub(crate) async fn run(config: &Config) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
    let db = SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    sqlx::query("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL)")
        .execute(&db)
        .await?;
    sqlx::query("INSERT INTO accounts VALUES (1, 100, 0)").execute(&db).await?;

    let stalled = dlock::connect_with(config).await?;
    let successor = dlock::connect_with(config).await?;
    let name = LockName::new(format!("examples/fenced_update/{}", std::process::id()))?;
    let ttl = Duration::from_millis(500);

    // The first holder stops renewing: a process paused by GC, swapping, a debugger.
    let lease = stalled.acquire(&name, &AcquireOptions::new(ttl).auto_renew(false)).await?;
    let old_token = lease.token();
    println!("holder 1 has token {old_token}, reads the balance, and stalls");
    // Per-lock backends (Redis, SQL): the unrenewed lease runs out on the server after the ttl.
    // ZooKeeper keeps a lock while the session lives, and a stalled process loses it when its
    // session expires; letting go of the lease here stands for that expiry.
    let lease = if stalled.capabilities().lease_model == LeaseModel::PerSession {
        drop(lease);
        None
    } else {
        Some(lease)
    };

    // The lock is taken over once the stalled holder's lease has run out.
    let next = successor.acquire(&name, &AcquireOptions::new(Duration::from_secs(5)).wait(ttl * 10)).await?;
    let new_token = next.token();
    let successor = fenced_add(&db, new_token, -30).await?;
    println!("holder 2 has token {new_token}; its write applied: {}", successor.applied);
    next.release().await?;

    // The stalled holder wakes up and writes with its old token: rejected by the row.
    let stalled = fenced_add(&db, old_token, -30).await?;
    println!("holder 1 wakes and writes with token {old_token}; applied: {}", stalled.applied);
    if let Some(lease) = lease {
        println!("holder 1's lease says: valid = {}, lost = {}", lease.is_valid(), lease.lost().is_fired());
    }
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 1").fetch_one(&db).await?;
    println!("balance {balance} (100 − 30 once)");
    Ok(Outcome { stalled, successor, balance })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let config = Config::load()?;
    println!("backend: {}", config.redacted_url());
    let out = run(&config).await?;
    assert!(out.successor.token > out.stalled.token, "{out:?}");
    assert!(!out.stalled.applied && out.successor.applied && out.balance == 70, "{out:?}");
    Ok(())
}
