//! The seeds' worked example: 100 servers split a fixed red-envelope budget, each grabbing
//! random amounts under one lock, and the budget must never be overspent — even when a holder
//! stalls past its lease. The budget lives in a fenced register, so a stale holder's write is
//! rejected instead of overspending.
//!
//! ```text
//! cargo run --example red_envelope                      # dlock.toml / DLOCK_URL (default: SQLite file)
//! DLOCK_URL=memory:// cargo run --example red_envelope
//! ```

use std::sync::Arc;
use std::time::Duration;

use dlock::{AcquireOptions, Config, FencedRegister, LockName};

const SERVERS: usize = 100;
const BUDGET_CENTS: u64 = 100_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::load()?;
    println!("backend: {}", config.redacted_url());
    let budget = Arc::new(FencedRegister::new(BUDGET_CENTS));
    let name = LockName::new(format!("red-envelope/{}", std::process::id()))?;
    let opts = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(60));

    let mut servers = Vec::new();
    for server in 0..SERVERS {
        let lock = dlock::connect_with(&config).await?;
        let (budget, name, opts) = (Arc::clone(&budget), name.clone(), opts.clone());
        servers.push(tokio::spawn(async move {
            let mut grabbed = 0u64;
            loop {
                let lease = lock.acquire(&name, &opts).await?;
                let left = budget.read();
                if left == 0 {
                    lease.release().await?;
                    return Ok::<_, dlock::LockError>(grabbed);
                }
                // A grab is random, at most a fifth of what is left, at least one cent.
                let want = 1 + (server as u64 * 7919 + left) % (left / 5 + 1);
                let take = want.min(left);
                // Read-modify-write, as a real service would: only the lock keeps two servers
                // from both spending the same `left`, and the token rejects a stale holder.
                tokio::task::yield_now().await;
                if budget.write(lease.token(), |cents| *cents = left - take).is_ok() {
                    grabbed += take;
                }
                lease.release().await?;
            }
        }));
    }
    let mut total = 0;
    for s in servers {
        total += s.await??;
    }
    println!("{SERVERS} servers grabbed {total} of {BUDGET_CENTS} cents; left {}", budget.read());
    assert_eq!(total + budget.read(), BUDGET_CENTS, "money was created or lost");
    assert_eq!(budget.read(), 0);
    Ok(())
}
