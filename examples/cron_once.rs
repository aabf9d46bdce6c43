//! A scheduled job run once per period across many instances: ten instances whose timers are
//! skewed by up to 300 ms each fire every period and call `try_run_locked`. The first to fire
//! runs the job; `hold_at_least` keeps the lock taken for most of the period even though the job
//! takes a few milliseconds, so the instances whose timers fire late find it taken and skip.
//! Without `hold_at_least` a late timer would run the job a second time.
//!
//! ```text
//! cargo run --example cron_once
//! DLOCK_URL=postgres://postgres@127.0.0.1/test cargo run --example cron_once
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::{AcquireOptions, Config, DistributedLockExt, LockName};
use tokio::time::{sleep_until, Instant};

const INSTANCES: usize = 10;
const PERIODS: u32 = 3;
const PERIOD: Duration = Duration::from_millis(1000);
/// Longer than the skew between timers, shorter than the period minus that skew.
const HOLD_AT_LEAST: Duration = Duration::from_millis(700);

/// How many times the job ran in each period, and by whom.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) runs: Vec<(u32, usize)>,
}

impl Outcome {
    /// The number of runs in `period`.
    pub(crate) fn runs_in(&self, period: u32) -> usize {
        self.runs.iter().filter(|(p, _)| *p == period).count()
    }
}

pub(crate) async fn run(config: &Config) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
    let name = LockName::new(format!("examples/cron_once/{}", std::process::id()))?;
    let opts = AcquireOptions::new(Duration::from_secs(10)).hold_at_least(HOLD_AT_LEAST);
    let runs = Arc::new(Mutex::new(Vec::new()));
    // Every instance connects first, so that no timer starts late because of a slow connect.
    let mut locks = Vec::new();
    for _ in 0..INSTANCES {
        locks.push(dlock::connect_with(config).await?);
    }
    let start = Instant::now() + Duration::from_millis(200);
    let mut instances = Vec::new();
    for (i, lock) in locks.into_iter().enumerate() {
        let (name, opts, runs) = (name.clone(), opts.clone(), runs.clone());
        // This instance's clock is off by up to 300 ms.
        let skew = Duration::from_millis(rand_skew(i));
        instances.push(tokio::spawn(async move {
            for period in 0..PERIODS {
                sleep_until(start + PERIOD * period + skew).await;
                let ran = lock
                    .try_run_locked(&name, &opts, |lease| {
                        let runs = runs.clone();
                        async move {
                            // The job: a few milliseconds of work, fenced by the lease's token.
                            runs.lock().unwrap_or_else(|e| e.into_inner()).push((period, i));
                            println!("period {period}: instance {i} runs the job (token {})", lease.token());
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    })
                    .await?;
                if ran.is_none() {
                    println!("period {period}: instance {i} (timer {} ms late) finds it done", skew.as_millis());
                }
            }
            Ok::<_, dlock::LockError>(())
        }));
    }
    for t in instances {
        t.await??;
    }
    let runs = runs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(Outcome { runs })
}

/// A fixed spread of timer skews, 0 to 300 ms.
fn rand_skew(i: usize) -> u64 {
    (i as u64 * 137) % 301
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let config = Config::load()?;
    println!("backend: {}", config.redacted_url());
    let out = run(&config).await?;
    for p in 0..PERIODS {
        println!("period {p}: {} run(s)", out.runs_in(p));
        assert_eq!(out.runs_in(p), 1, "{out:?}");
    }
    Ok(())
}
