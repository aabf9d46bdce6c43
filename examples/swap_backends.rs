//! The same code on every backend: the URL alone picks it. Runs one exclusive-lock session on
//! each URL given on the command line, or on `DLOCK_URL` / `dlock.toml` (default: an embedded
//! SQLite file) and the in-memory backend.
//!
//! ```text
//! cargo run --example swap_backends
//! cargo run --example swap_backends -- sqlite://swap.db redis://127.0.0.1:6379 zk://127.0.0.1:2181
//! ```

use std::sync::Arc;
use std::time::Duration;

use dlock::{AcquireOptions, Config, DistributedLock, DistributedLockExt, LockName};

/// The application's code: written once against `dyn DistributedLock`.
async fn nightly_report(lock: Arc<dyn DistributedLock>) -> Result<u64, dlock::LockError> {
    let name = LockName::new(format!("examples/swap_backends/{}", std::process::id()))?;
    let opts = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
    let lease = lock.acquire(&name, &opts).await?;
    let busy = lock.try_acquire(&name, &opts).await?;
    assert!(busy.is_none(), "a held lock was granted twice");
    let first = lease.token();
    lease.release().await?;
    let second = lock.run_locked(&name, &opts, |lease| async move { lease.token() }).await?;
    assert!(second > first, "tokens must rise");
    Ok(second.get())
}

/// Runs the same code on each config; returns (backend label, last token) per config.
pub(crate) async fn run(configs: &[Config]) -> Result<Vec<(String, u64)>, Box<dyn std::error::Error + Send + Sync>> {
    let mut out = Vec::new();
    for config in configs {
        let lock = dlock::connect_with(config).await?;
        let backend = lock.backend().to_owned();
        let caps = lock.capabilities();
        let token = nightly_report(lock).await?;
        println!(
            "{:<10} {:<40} token {token:<20} wake {:?}, lease {:?}, fifo {}",
            backend,
            config.redacted_url(),
            caps.wake,
            caps.lease_model,
            caps.fifo
        );
        out.push((backend, token));
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let urls: Vec<String> = std::env::args().skip(1).collect();
    let configs = if urls.is_empty() {
        vec![Config::load()?, Config::from_url("memory://swap_backends")]
    } else {
        urls.iter().map(|u| Config::from_url(u)).collect()
    };
    run(&configs).await?;
    Ok(())
}
