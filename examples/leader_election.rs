//! Leader election: three candidates in one process, each with its own client, campaign for the
//! same name. The leader's task is killed; a candidate that was waiting takes over with a higher
//! epoch (the epoch is the lease's fencing token).
//!
//! ```text
//! cargo run --example leader_election
//! DLOCK_URL=redis://127.0.0.1:6379 cargo run --example leader_election
//! ```

use std::time::Duration;

use dlock::{AcquireOptions, Config, Election, Holder, LockError, LockName};
use tokio::sync::mpsc;

/// Who led, in order, with their epochs.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) terms: Vec<(String, u64)>,
}

pub(crate) async fn run(config: &Config) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
    let name = LockName::new(format!("examples/leader_election/{}", std::process::id()))?;
    let opts = AcquireOptions::new(Duration::from_secs(2));
    let (elected_tx, mut elected) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for id in ["alpha", "bravo", "charlie"] {
        let lock = dlock::connect_with(config).await?;
        let election = Election::new(lock, name.clone(), Holder::new(id)?, opts.clone());
        let elected_tx = elected_tx.clone();
        tasks.push(tokio::spawn(async move {
            let leadership = election.campaign().await?;
            println!("{id} leads with epoch {}", leadership.epoch());
            let _ = elected_tx.send((id.to_owned(), leadership.epoch().get()));
            // Lead until deposed (or killed): do the leader's work here, passing the epoch
            // with every write.
            leadership.lost().fired().await;
            println!("{id} lost leadership");
            Ok::<_, LockError>(id)
        }));
    }
    let mut terms = Vec::new();
    for round in 0..2 {
        let (id, epoch) = elected.recv().await.ok_or("every candidate stopped")?;
        terms.push((id.clone(), epoch));
        if round == 0 {
            // Kill the leader's task. Its `Leadership` is dropped, which resigns in the
            // background; a crashed process would hand over when its lease runs out instead.
            let i = ["alpha", "bravo", "charlie"].iter().position(|c| *c == id).ok_or("unknown leader")?;
            tasks[i].abort();
            println!("killed {id}'s task");
        }
    }
    // Anyone can ask who leads, where the backend reports holders (`Capabilities::inspect`).
    let observer = Election::new(dlock::connect_with(config).await?, name.clone(), Holder::new("observer")?, opts);
    match observer.leader().await {
        Ok(Some(l)) => println!("leader() says: {} (epoch {})", l.holder.unwrap_or_default(), l.token),
        Ok(None) => println!("leader() says: nobody leads"),
        Err(LockError::Unsupported { .. }) => println!("this backend cannot report who leads (no inspect)"),
        Err(e) => return Err(e.into()),
    }
    for t in &tasks {
        t.abort();
    }
    let (first, second) = (&terms[0], &terms[1]);
    println!("{} (epoch {}) took over from {} (epoch {})", second.0, second.1, first.0, first.1);
    Ok(Outcome { terms })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let config = Config::load()?;
    println!("backend: {}", config.redacted_url());
    let out = run(&config).await?;
    assert!(out.terms[1].1 > out.terms[0].1 && out.terms[1].0 != out.terms[0].0, "{out:?}");
    Ok(())
}
