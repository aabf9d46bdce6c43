//! Quick start: connect to the backend named in `dlock.toml` (or `DLOCK_URL`; default: an
//! embedded SQLite file), acquire a lock, print its fencing token, renew, release.
//!
//! ```text
//! cargo run --example quickstart
//! DLOCK_URL=redis://127.0.0.1:6379 cargo run --example quickstart
//! ```

use dlock::{Config, LockName};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::load()?;
    println!("backend: {}", config.redacted_url());
    let lock = dlock::connect_with(&config).await?;

    let name = LockName::new("quickstart/report")?;
    let lease = lock.acquire(&name, &config.acquire_options()).await?;
    println!("acquired {name} with fencing token {}", lease.token());
    println!("valid for about {:?} (renewed in the background)", lease.valid_until() - tokio::time::Instant::now());

    // Pass the token with every write so the resource can reject a stale holder.
    lease.renew().await?;
    println!("renewed: still valid = {}", lease.is_valid());

    lease.release().await?;
    println!("released");

    // The next holder always gets a higher token, on every backend.
    let again = lock.acquire(&name, &config.acquire_options()).await?;
    assert!(again.token() > lease.token());
    println!("acquired again with token {} (> {})", again.token(), lease.token());
    again.release().await?;
    Ok(())
}
