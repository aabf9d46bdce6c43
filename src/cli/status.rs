//! `dlock status NAME [--json]`: who holds a lock now (docs/contract.md §5.6): holder, fencing
//! token, kind, lease time left and metadata, or "free". Exit status 0 either way (a script
//! reads the answer from the output, `"held"` in `--json`); 69 when the backend cannot be asked,
//! 78 when it cannot inspect (Redlock).

use std::time::Duration;

use clap::Args;
use dlock::{HolderInfo, LockError};

use crate::Redactor;

/// Arguments of `dlock status`.
#[derive(Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    lock: crate::NamedLock,
    /// Print one JSON object (`"held": false` when free).
    #[arg(long)]
    json: bool,
}

/// Prints the holder of the lock.
pub(crate) async fn run(args: StatusArgs, out: &Redactor) -> Result<bool, LockError> {
    let (_, name, lock) = args.lock.open(out).await?;
    let info = lock.inspect(&name).await?;
    if args.json {
        out.println(&json(name.as_str(), info.as_ref())?);
    } else {
        out.println(&human(name.as_str(), info.as_ref()));
    }
    Ok(true)
}

/// The JSON object of one lock's state: the [`HolderInfo`] fields and `"held": true`, or
/// `{"name": …, "held": false}`.
pub(crate) fn json(name: &str, info: Option<&HolderInfo>) -> Result<String, LockError> {
    let value = match info {
        Some(info) => {
            let mut v = serde_json::to_value(info).map_err(|e| LockError::backend("dlock", e))?;
            if let Some(map) = v.as_object_mut() {
                map.insert("held".into(), serde_json::Value::Bool(true));
            }
            v
        }
        None => serde_json::json!({ "name": name, "held": false }),
    };
    serde_json::to_string(&value).map_err(|e| LockError::backend("dlock", e))
}

/// The state of one lock as `key: value` lines.
pub(crate) fn human(name: &str, info: Option<&HolderInfo>) -> String {
    let Some(info) = info else { return format!("{name}: free") };
    format!(
        "name:      {}\nholder:    {}\ntoken:     {}\nkind:      {}\nremaining: {}\nmetadata:  {}",
        info.name,
        info.holder.as_deref().unwrap_or("-"),
        info.token,
        info.kind.as_str(),
        remaining(info.remaining),
        info.metadata.as_deref().unwrap_or("-").escape_debug(),
    )
}

/// A lease time left, to the millisecond (`session` where the lease is the holder's session).
pub(crate) fn remaining(d: Option<Duration>) -> String {
    match d {
        Some(d) => humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string(),
        None => "session".into(),
    }
}
