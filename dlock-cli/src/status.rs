//! `dlock status NAME [--json]`: who holds a lock now (docs/contract.md §5.6): holder, fencing
//! token, kind, lease time left and metadata, or "free". Exit status 0 either way (a script
//! reads the answer from the output, `"held"` in `--json`); 69 when the backend cannot be asked,
//! 78 when it cannot inspect (Redlock).

use std::time::Duration;

use clap::Args;
use dlock::{HolderInfo, LockError};

use crate::redactor::Redactor;

/// Arguments of `dlock status`.
#[derive(Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    lock: crate::target::NamedLock,
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
    serde_json::to_string(&value).map(json_printable).map_err(|e| LockError::backend("dlock", e))
}

/// `text` with every control character escaped (`\u{1b}`), for a terminal: holder ids, metadata
/// and names come from the server, where anyone who can write the lock's table or keys can
/// store an escape sequence that would clear or retitle the operator's screen.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return text.into();
    }
    text.chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect::<String>()
        .into()
}

/// JSON text from serde_json with the control characters it leaves raw (DEL and the C1 range,
/// U+007F to U+009F, which some terminals obey) written as `\u` escapes: the same JSON value,
/// printable. serde_json escapes the C0 range itself; outside strings JSON is ASCII.
pub(crate) fn json_printable(json: String) -> String {
    if !json.chars().any(|c| ('\u{7f}'..='\u{9f}').contains(&c)) {
        return json;
    }
    json.chars()
        .map(|c| if ('\u{7f}'..='\u{9f}').contains(&c) { format!("\\u{:04x}", c as u32) } else { c.to_string() })
        .collect()
}

/// The state of one lock as `key: value` lines.
pub(crate) fn human(name: &str, info: Option<&HolderInfo>) -> String {
    let Some(info) = info else { return format!("{name}: free") };
    format!(
        "name:      {}\nholder:    {}\ntoken:     {}\nkind:      {}\nremaining: {}\nmetadata:  {}",
        printable(&info.name),
        printable(info.holder.as_deref().unwrap_or("-")),
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
