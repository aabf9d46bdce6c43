//! `dlock list [--prefix P] [--limit N] [--json]`: the held locks whose names start with a
//! prefix (docs/contract.md §5.6), as a table or a JSON array of holder objects.

use std::fmt::Write;

use clap::Args;
use dlock::{HolderInfo, LockError};

use crate::redactor::Redactor;
use crate::status::{json_printable, printable, remaining};

/// Arguments of `dlock list`.
#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    target: crate::target::Target,
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
        let text = serde_json::to_string_pretty(&held).map_err(|e| LockError::backend("dlock", e))?;
        out.println(&json_printable(text));
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
    // Names and holder ids come from the server: escaped before they are measured or printed.
    let names: Vec<_> = held.iter().map(|h| printable(&h.name)).collect();
    let holders: Vec<_> = held.iter().map(|h| printable(h.holder.as_deref().unwrap_or("-"))).collect();
    let width = |f: &dyn Fn(&HolderInfo) -> usize, title: &str| held.iter().map(f).max().unwrap_or(0).max(title.len());
    let wn = names.iter().map(|n| n.len()).max().unwrap_or(0).max("NAME".len());
    let wh = holders.iter().map(|h| h.len()).max().unwrap_or(0).max("HOLDER".len());
    let wt = width(&|h| h.token.to_string().len(), "TOKEN");
    let mut text =
        format!("{:<wn$}  {:<wh$}  {:>wt$}  {:<9}  {:<12}  METADATA\n", "NAME", "HOLDER", "TOKEN", "KIND", "REMAINING");
    for ((h, name), holder) in held.iter().zip(&names).zip(&holders) {
        let _ = writeln!(
            text,
            "{:<wn$}  {:<wh$}  {:>wt$}  {:<9}  {:<12}  {}",
            name,
            holder,
            h.token.to_string(),
            h.kind.as_str(),
            remaining(h.remaining),
            h.metadata.as_deref().unwrap_or("-").escape_debug(),
        );
    }
    text.truncate(text.trim_end().len());
    text
}
