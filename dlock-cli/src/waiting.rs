//! What `dlock acquire` and `dlock run` say while they wait: nothing for the first two seconds,
//! then a line on stderr every five with the time waited and why the lock is not granted — who
//! holds it (`inspect`), or, when nobody does, the Redis restart quiet period and its time left
//! (read from the prefix's boot marker on a single server), so a first lock on a new deployment
//! never waits in silence.

use std::time::Duration;

use tokio::time::{sleep_until, timeout, Instant};

use crate::redactor::Redactor;
use dlock::{AcquireOptions, Config, DistributedLock, HolderInfo, Lease, LockError, LockName};

/// The first line after this much waiting: a lock that comes at once says nothing.
const FIRST: Duration = Duration::from_secs(2);
/// Then one line per this.
const EVERY: Duration = Duration::from_secs(5);
/// How long the line may take to find out why (it never holds the wait up).
const ASK: Duration = Duration::from_secs(2);

/// `lock.acquire(name, opts)`, with a progress line on stderr while it waits.
pub(crate) async fn acquire_saying(
    lock: &dyn DistributedLock,
    config: &Config,
    name: &LockName,
    opts: &AcquireOptions,
    out: &Redactor,
) -> Result<Lease, LockError> {
    let acquire = lock.acquire(name, opts);
    tokio::pin!(acquire);
    let started = Instant::now();
    let mut next = started + FIRST;
    loop {
        tokio::select! {
            granted = &mut acquire => return granted,
            _ = sleep_until(next) => {
                let why = timeout(ASK, why_waiting(lock, config, name)).await.unwrap_or_else(|_| "the backend did not say who holds it".to_owned());
                out.eprintln(&format!("dlock: waiting for {:?} ({} s so far): {why}", name.as_str(), started.elapsed().as_secs()));
                next = Instant::now() + EVERY;
            }
        }
    }
}

async fn why_waiting(lock: &dyn DistributedLock, config: &Config, name: &LockName) -> String {
    match lock.inspect(name).await {
        Ok(Some(holder)) => held_by(&holder),
        Ok(None) => match quiet_said(config).await {
            Some(said) => said,
            None => {
                "nobody holds it now: a queued waiter is being served, or the backend refuses grants for a while (a \
                     Redis restart quiet period is logged as a warning with DLOCK_LOG=warn)"
                    .to_owned()
            }
        },
        Err(e) => format!("who holds it is unknown ({e})"),
    }
}

fn held_by(holder: &HolderInfo) -> String {
    let who = holder.holder.as_deref().unwrap_or("a holder without an id");
    match holder.remaining {
        Some(left) => format!("held by {who} (token {}, {} ms of its lease left)", holder.token, left.as_millis()),
        None => format!("held by {who} (token {})", holder.token),
    }
}

/// Why nobody is granted a free lock on a single Redis server (`redis://`, `rediss://`) in its
/// restart quiet period: its boot marker holds the server time (ms) the period ends. `None`
/// elsewhere, outside the period, or when it cannot tell.
#[cfg(feature = "redis")]
async fn quiet_said(config: &Config) -> Option<String> {
    use crate::raw::{redis, redis_query};
    let scheme = config.url.split_once("://")?.0.to_ascii_lowercase();
    if scheme != "redis" && scheme != "rediss" {
        return None;
    }
    let mut conn = redis(&config.url, &config.redis_options()).await.ok()?;
    let marker: Option<String> =
        redis_query(&mut conn, redis::cmd("GET").arg(format!("{}:boot", config.redis.key_prefix))).await.ok()?;
    let ends_ms: u64 = marker?.parse().ok()?;
    let (secs, micros): (u64, u64) = redis_query(&mut conn, &redis::cmd("TIME")).await.ok()?;
    let now_ms = secs * 1000 + micros / 1000;
    (ends_ms > now_ms).then(|| {
        format!(
            "nobody holds it, but the Redis server grants nothing for {} s more (its restart quiet period: it lost its \
             state, or key prefix {:?} is new there; mark a new deployment fresh with `dlock init`)",
            Duration::from_millis(ends_ms - now_ms).as_secs().max(1),
            config.redis.key_prefix
        )
    })
}

#[cfg(not(feature = "redis"))]
async fn quiet_said(_config: &Config) -> Option<String> {
    None
}
