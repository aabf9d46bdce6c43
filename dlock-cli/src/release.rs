//! `dlock release --force NAME [--json]`: an operator's override for a holder that is stuck or
//! gone (docs/contract.md §5.6). It frees the lock whoever holds it
//! ([`dlock::DistributedLock::force_release`]), then takes it over once (`try_acquire`) and
//! releases that, so a token higher than the old holder's has been issued: a fenced resource
//! that has seen it refuses the old holder's writes. Prints both tokens. The old holder's next
//! renewal fails and its lease reports itself lost.
//!
//! Evicting a live holder is asked for once more: at a terminal the tool shows the holder and
//! waits for `y`; elsewhere (a script, a pipe) it refuses unless `--yes` says the caller meant it.
//! The library logs the eviction on `dlock::audit` either way.

use std::io::IsTerminal;

use clap::Args;
use dlock::{FencingToken, Holder, HolderInfo, LockError};

use crate::redactor::Redactor;

/// Arguments of `dlock release`.
#[derive(Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    lock: crate::target::NamedLock,
    /// Required: free the lock whoever holds it (there is no owner-checked release from the
    /// command line; the holder's own process releases with its lease).
    #[arg(long, required = true)]
    force: bool,
    /// Evict a live holder without asking (needed where stdin is not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Frees the lock, takes it over and releases it.
pub(crate) async fn run(args: ReleaseArgs, out: &Redactor) -> Result<bool, LockError> {
    let (config, name, lock) = args.lock.open(out).await?;
    if !args.yes {
        if let Some(holder) = lock.inspect(&name).await? {
            confirm(&holder).await?;
        }
    }
    let old = lock.force_release(&name).await?;
    let opts = config.acquire_options().holder(Holder::new("dlock release --force")?);
    // A waiter may be granted first: then its token is the one above the old holder's.
    let (takeover, waiter) = match lock.try_acquire(&name, &opts).await? {
        Some(lease) => {
            let token = lease.token();
            lease.release().await?;
            (Some(token), None)
        }
        None => (None, lock.inspect(&name).await?.map(|i| i.token)),
    };
    if args.json {
        let value = serde_json::json!({
            "name": name.as_str(),
            "old_token": old.map(|t| t.get()),
            "takeover_token": takeover.map(|t| t.get()),
            "new_holder_token": waiter.map(|t| t.get()),
        });
        out.println(&value.to_string());
    } else {
        out.println(&human(name.as_str(), old, takeover, waiter));
    }
    Ok(true)
}

/// Asks at a terminal whether to evict `holder`; refuses where nobody can answer.
async fn confirm(holder: &HolderInfo) -> Result<(), LockError> {
    let who = format!(
        "{} is held by {} (token {}{})",
        holder.name,
        holder.holder.as_deref().unwrap_or("a holder without an id"),
        holder.token,
        holder.remaining.map(|d| format!(", {} ms left", d.as_millis())).unwrap_or_default()
    );
    if !std::io::stdin().is_terminal() {
        return Err(LockError::invalid_options(format!(
            "{who}; not released: add --yes to evict a live holder (its lease is lost and a fenced resource \
             refuses its writes)"
        )));
    }
    eprint!("{who}. Evict it? Its lease is lost. [y/N] ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| LockError::invalid_options(format!("no answer read: {e}")))?
    .map_err(|e| LockError::invalid_options(format!("no answer read from stdin: {e}")))?;
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" => Ok(()),
        _ => Err(LockError::invalid_options(format!("{who}; not released (answer y to evict, or pass --yes)"))),
    }
}

fn human(
    name: &str,
    old: Option<FencingToken>,
    takeover: Option<FencingToken>,
    waiter: Option<FencingToken>,
) -> String {
    let first = match old {
        Some(t) => format!("{name}: released by force; the old holder's token was {t}"),
        None => format!("{name}: nobody held it"),
    };
    let second = match (takeover, waiter) {
        (Some(t), _) => format!("taken over and released with token {t}: the next token is higher"),
        (None, Some(t)) => format!("a waiter took it at once with token {t}"),
        (None, None) => "someone took it at once (its token is higher)".to_owned(),
    };
    format!("{first}\n{second}")
}
