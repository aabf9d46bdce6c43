//! `dlock list [--prefix P] [--limit N] [--json]`: the held locks whose names start with a
//! prefix (docs/contract.md §5.6), as a table or a JSON array of holder objects.

use std::fmt::Write;

use clap::Args;
use dlock::{HolderInfo, LockError};

use crate::cli::status::remaining;
use crate::Redactor;

/// Arguments of `dlock list`.
#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    target: crate::Target,
    /// Only names starting with this text (default: every name).
    #[arg(long, default_value = "")]
    prefix: String,
    /// At most this many locks (in name order).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Print a JSON array.
    #[arg(long)]
    json: bool,
}

/// Prints the held locks.
pub(crate) async fn run(args: ListArgs, out: &Redactor) -> Result<bool, LockError> {
    let config = args.target.load(out)?;
    let lock = dlock::connect_with(&config).await?;
    let held = lock.list(&args.prefix, args.limit).await?;
    if args.json {
        out.println(&serde_json::to_string_pretty(&held).map_err(|e| LockError::backend("dlock", e))?);
    } else {
        out.println(&table(&held));
        if held.len() >= args.limit && args.limit > 0 {
            out.eprintln(&format!("dlock list: stopped at --limit {}; there may be more", args.limit));
        }
    }
    Ok(true)
}

fn table(held: &[HolderInfo]) -> String {
    if held.is_empty() {
        return "no held locks".into();
    }
    let width = |f: &dyn Fn(&HolderInfo) -> usize, title: &str| held.iter().map(f).max().unwrap_or(0).max(title.len());
    let wn = width(&|h| h.name.len(), "NAME");
    let wh = width(&|h| h.holder.as_deref().map_or(1, str::len), "HOLDER");
    let wt = width(&|h| h.token.to_string().len(), "TOKEN");
    let mut text =
        format!("{:<wn$}  {:<wh$}  {:>wt$}  {:<9}  {:<12}  METADATA\n", "NAME", "HOLDER", "TOKEN", "KIND", "REMAINING");
    for h in held {
        let _ = writeln!(
            text,
            "{:<wn$}  {:<wh$}  {:>wt$}  {:<9}  {:<12}  {}",
            h.name,
            h.holder.as_deref().unwrap_or("-"),
            h.token.to_string(),
            h.kind.as_str(),
            remaining(h.remaining),
            h.metadata.as_deref().unwrap_or("-").escape_debug(),
        );
    }
    text.truncate(text.trim_end().len());
    text
}
