//! Metrics in Prometheus text: wrap the lock client in `dlock::metrics::Metered`, install the
//! Prometheus recorder (no HTTP listener here: serve `handle.render()` from your own endpoint),
//! take and contend a few locks, and print what a scrape would see.
//!
//! ```text
//! cargo run --example prometheus --features metrics
//! DLOCK_URL=redis://127.0.0.1:6379 cargo run --example prometheus --features metrics
//! ```

use std::sync::Arc;
use std::time::Duration;

use dlock::metrics::Metered;
use dlock::{Config, DistributedLock, LockName};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let config = Config::load()?;
    let lock = Metered::new(dlock::connect_with(&config).await?);
    let other = Metered::new(dlock::connect_with(&config).await?);

    let name = LockName::new("examples/prometheus")?;
    let opts = config.acquire_options().wait(Duration::from_millis(200));
    let lease = lock.acquire(&name, &opts).await?;
    lease.renew().await?;
    // Someone else tries while we hold it: one busy try, one timed-out wait.
    assert!(other.try_acquire(&name, &opts).await?.is_none());
    assert!(other.acquire(&name, &opts).await.is_err());
    tokio::time::sleep(Duration::from_millis(50)).await;
    lease.release().await?;
    let shared: Arc<dyn DistributedLock> = Arc::new(other);
    shared.acquire(&name, &opts).await?.release().await?;

    print!("{}", handle.render());
    Ok(())
}
