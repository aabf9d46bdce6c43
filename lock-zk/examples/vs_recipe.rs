//! Speed of lock-zk against zookeeper-client's own lock recipe (`Client::lock`) on the same
//! server, in the same process, one after the other: uncontended (one client, lock + unlock of
//! one name in a loop) and contended (`CLIENTS` clients, each with its own session, on one name,
//! each doing a read-yield-write of a shared counter while it holds the lock).
//!
//! ```text
//! cargo run --release -p lock-zk --example vs_recipe -- 127.0.0.1:2181 [seconds per case] [rounds]
//! ```
//!
//! The recipe's unlock is its guard's drop, which deletes the node in the background; its next
//! lock on the same session is sent behind that delete, so a loop iteration waits for the same
//! requests as lock-zk's `try_acquire` + `release` (create and listing, then the delete).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName};
use tokio::time::Instant;
use zookeeper_client::{Acls, Client, CreateMode, LockOptions, LockPrefix};

const CLIENTS: usize = 8;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let hosts = args.next().unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    let secs: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3);
    let rounds: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3);
    let duration = Duration::from_secs(secs);
    let run = std::process::id();
    for round in 1..=rounds {
        let dir = format!("/vs-recipe-{run}-{round}");
        let setup = Client::connect(&hosts).await?;
        let _ = setup.create(&dir, &[], &CreateMode::Persistent.with_acls(Acls::anyone_all())).await;
        let ru = recipe_uncontended(&hosts, &dir, duration).await?;
        let du = dlock_uncontended(&hosts, round, duration).await?;
        let rc = recipe_contended(&hosts, &dir, duration).await?;
        let dc = dlock_contended(&hosts, round, duration).await?;
        println!(
            "round {round}: uncontended ops/s recipe {ru:.0} lock-zk {du:.0} (lock-zk/recipe {:.2}); \
             contended grants/s recipe {rc:.0} lock-zk {dc:.0} (lock-zk/recipe {:.2})",
            du / ru,
            dc / rc
        );
    }
    Ok(())
}

async fn recipe_uncontended(hosts: &str, dir: &str, duration: Duration) -> Result<f64, Error> {
    let client = Client::connect(hosts).await?;
    let prefix_dir = format!("{dir}/u");
    let options = LockOptions::new(Acls::anyone_all())
        .with_ancestor_options(CreateMode::Persistent.with_acls(Acls::anyone_all()))?;
    let begun = Instant::now();
    let mut ops = 0u64;
    while begun.elapsed() < duration {
        let lock = client.lock(LockPrefix::new_curator(&prefix_dir, "lock-")?, b"", options.clone()).await?;
        drop(lock);
        ops += 1;
    }
    Ok(ops as f64 / begun.elapsed().as_secs_f64())
}

async fn connect(hosts: &str) -> Result<lock_zk::ZkLock, Error> {
    Ok(lock_zk::connect(&format!("zk://{hosts}/vs-recipe-dlock"), lock_zk::ZkOptions::default()).await?)
}

async fn dlock_uncontended(hosts: &str, round: usize, duration: Duration) -> Result<f64, Error> {
    let lock = connect(hosts).await?;
    let name = LockName::new(format!("{}/{round}/u", std::process::id()))?;
    let opts = AcquireOptions::new(Duration::from_secs(10));
    let begun = Instant::now();
    let mut ops = 0u64;
    while begun.elapsed() < duration {
        let lease = lock.try_acquire(&name, &opts).await?.ok_or("a free name was busy")?;
        lease.release().await?;
        ops += 1;
    }
    Ok(ops as f64 / begun.elapsed().as_secs_f64())
}

/// The work under the lock, as `dlock bench`'s contended case does it: a read-yield-write that
/// loses updates if two hold the lock at once.
#[derive(Default)]
struct Cell {
    counter: AtomicU64,
    inside: AtomicBool,
    overlaps: AtomicU64,
}

impl Cell {
    async fn work(&self) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let seen = self.counter.load(Ordering::SeqCst);
        tokio::task::yield_now().await;
        self.counter.store(seen + 1, Ordering::SeqCst);
        self.inside.store(false, Ordering::SeqCst);
    }

    fn check(&self, grants: u64) -> Result<(), Error> {
        if self.counter.load(Ordering::SeqCst) != grants || self.overlaps.load(Ordering::SeqCst) != 0 {
            return Err("exclusion violated".into());
        }
        Ok(())
    }
}

/// `CLIENTS` tasks, one per client, each taking `turn`s until `duration` has passed; the grants
/// per second. A turn is one grant, the work under it and its release: `Ok(false)` once `end`
/// came before the grant.
async fn contended<C, F, Fut>(clients: Vec<C>, duration: Duration, turn: F) -> Result<f64, Error>
where
    C: Send + Sync + 'static,
    F: Fn(Arc<C>, Arc<Cell>, Instant) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, Error>> + Send,
{
    let cell = Arc::new(Cell::default());
    let begun = Instant::now();
    let end = begun + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for client in clients {
        let (client, cell, turn) = (Arc::new(client), Arc::clone(&cell), turn.clone());
        tasks.spawn(async move {
            let mut grants = 0u64;
            while Instant::now() < end && turn(Arc::clone(&client), Arc::clone(&cell), end).await? {
                grants += 1;
            }
            Ok::<_, Error>(grants)
        });
    }
    let mut grants = 0;
    while let Some(joined) = tasks.join_next().await {
        grants += joined??;
    }
    let rate = grants as f64 / begun.elapsed().as_secs_f64();
    cell.check(grants)?;
    Ok(rate)
}

async fn recipe_contended(hosts: &str, dir: &str, duration: Duration) -> Result<f64, Error> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Client::connect(hosts).await?);
    }
    let dir = format!("{dir}/c");
    let options = LockOptions::new(Acls::anyone_all())
        .with_ancestor_options(CreateMode::Persistent.with_acls(Acls::anyone_all()))?;
    let turn = move |client: Arc<Client>, cell: Arc<Cell>, end: Instant| {
        let (dir, options) = (dir.clone(), options.clone());
        async move {
            let prefix = LockPrefix::new_curator(&dir, "lock-")?;
            let lock = tokio::select! {
                lock = client.lock(prefix, b"", options) => lock?,
                _ = tokio::time::sleep_until(end) => return Ok(false),
            };
            cell.work().await;
            drop(lock);
            Ok(true)
        }
    };
    contended(clients, duration, turn).await
}

async fn dlock_contended(hosts: &str, round: usize, duration: Duration) -> Result<f64, Error> {
    let name = LockName::new(format!("{}/{round}/c", std::process::id()))?;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(connect(hosts).await?);
    }
    let turn = move |lock: Arc<lock_zk::ZkLock>, cell: Arc<Cell>, end: Instant| {
        let name = name.clone();
        async move {
            let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(10));
            let lease = tokio::select! {
                lease = lock.acquire(&name, &opts) => lease?,
                _ = tokio::time::sleep_until(end) => return Ok(false),
            };
            cell.work().await;
            lease.release().await?;
            Ok(true)
        }
    };
    contended(clients, duration, turn).await
}
