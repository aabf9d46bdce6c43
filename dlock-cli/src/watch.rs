//! `dlock watch NAME [--json] [--interval 200ms] [--count N]`: prints the lock's state, then a
//! line each time its holder changes (a new grant, a release, an expiry), until Ctrl-C or `--count`
//! changes. It polls `inspect` every `--interval`, and where the backend notifies changes
//! (`Capabilities::notify_changes`, contract §5.8) it also reads at once after each one: a holder
//! that comes and goes between two reads is not seen.

use std::time::Duration;

use clap::Args;
use dlock::{FencingToken, HolderInfo, LockError};

use crate::redactor::Redactor;
use crate::status;

/// Arguments of `dlock watch`.
#[derive(Args)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    lock: crate::target::NamedLock,
    /// How often to ask the backend (it is polled: a holder shorter than this may be missed).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "200ms")]
    interval: Duration,
    /// Stop after this many changes (default: run until Ctrl-C).
    #[arg(long)]
    count: Option<u64>,
    /// One JSON object per line (as `dlock status --json`).
    #[arg(long)]
    json: bool,
}

/// What tells one grant from the next: its token (and the holder id with it).
fn key(info: Option<&HolderInfo>) -> Option<(FencingToken, Option<String>)> {
    info.map(|i| (i.token, i.holder.clone()))
}

/// Polls until Ctrl-C or `--count` changes.
pub(crate) async fn run(args: WatchArgs, out: &Redactor) -> Result<bool, LockError> {
    let (config, name) = args.lock.load(out)?;
    if args.interval.is_zero() {
        return Err(LockError::invalid_options("--interval must be above zero"));
    }
    let lock = dlock::connect_with(&config).await?;
    let print = |info: Option<&HolderInfo>| -> Result<(), LockError> {
        if args.json {
            out.println(&status::json(name.as_str(), info)?);
        } else {
            out.println(&line(name.as_str(), info));
        }
        Ok(())
    };
    // Registered before the first read, so that no change after it is missed.
    let mut feed = match lock.watch_changes(&name).await {
        Ok(feed) => feed,
        Err(e) => {
            out.eprintln(&format!("dlock watch: {e} (polling every {:?} instead)", args.interval));
            None
        }
    };
    let first = lock.inspect(&name).await?;
    print(first.as_ref())?;
    let mut last = key(first.as_ref());
    let mut changes = 0u64;
    let mut failing = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        if args.count.is_some_and(|n| changes >= n) {
            return Ok(true);
        }
        let notified = async {
            match feed.as_mut() {
                Some(f) => f.changed().await,
                None => std::future::pending().await,
            }
        };
        let feed_ended = tokio::select! {
            _ = &mut ctrl_c => return Ok(true),
            _ = tokio::time::sleep(args.interval) => false,
            alive = notified => !alive,
        };
        if feed_ended {
            feed = None;
        }
        if let Some(f) = feed.as_mut() {
            f.mark_seen();
        }
        let now = match lock.inspect(&name).await {
            Ok(now) => now,
            Err(e @ (LockError::Unsupported { .. } | LockError::Config { .. })) => return Err(e),
            Err(e) => {
                // Keep watching through an outage; say so once.
                if !failing {
                    out.eprintln(&format!("dlock watch: {e} (still trying)"));
                }
                failing = true;
                continue;
            }
        };
        failing = false;
        if key(now.as_ref()) != last {
            last = key(now.as_ref());
            changes += 1;
            print(now.as_ref())?;
        }
    }
}

/// One line per state.
fn line(name: &str, info: Option<&HolderInfo>) -> String {
    match info {
        None => format!("{}: free", status::printable(name)),
        Some(i) => format!(
            "{}: held by {} with token {} ({}, {} left)",
            status::printable(name),
            status::printable(i.holder.as_deref().unwrap_or("-")),
            i.token,
            i.kind.as_str(),
            status::remaining(i.remaining)
        ),
    }
}
