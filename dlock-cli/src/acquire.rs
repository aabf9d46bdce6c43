//! `dlock acquire NAME [--hold 1s]`: takes a lock, prints its fencing token, holds it, releases
//! it. While it waits it says why on stderr ([`waiting`]).

use std::time::Duration;

use clap::Args;

use crate::redactor::Redactor;
use crate::target::Target;
use crate::waiting;
use dlock::{LockError, LockName};

#[derive(Args)]
pub(crate) struct AcquireArgs {
    #[command(flatten)]
    target: Target,
    /// The lock name.
    name: String,
    /// How long to hold the lock before releasing it.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    hold: Duration,
}

/// Takes, holds and releases the lock.
pub(crate) async fn run(args: AcquireArgs, out: &Redactor) -> Result<bool, LockError> {
    let config = args.target.load(out)?;
    let lock = dlock::connect_with(&config).await?;
    let name = LockName::new(&args.name)?;
    let lease = waiting::acquire_saying(&*lock, &config, &name, &config.acquire_options(), out).await?;
    out.println(&format!("acquired {:?} on {} with fencing token {}", name.as_str(), lock.backend(), lease.token()));
    tokio::select! {
        _ = tokio::time::sleep(args.hold) => {}
        _ = lease.lost().fired() => {
            out.eprintln(&format!("lease lost: {}", lease.lost().reason().unwrap_or("unknown")));
            return Err(LockError::Lost { name: name.as_str().to_owned() });
        }
    }
    lease.release().await?;
    out.println("released");
    Ok(true)
}
