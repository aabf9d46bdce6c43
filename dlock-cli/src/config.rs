//! `dlock config`: the effective configuration (defaults < file < `DLOCK_*` < `--url`) as TOML,
//! in the form `dlock.toml` takes, or as JSON. The URL is shown redacted and the whole text
//! passes the redactor, so no password reaches the terminal.

use clap::Args;
use dlock::LockError;
use serde_json::Value;

use super::redactor::Redactor;

/// Arguments of `dlock config`.
#[derive(Args)]
pub(crate) struct ConfigArgs {
    #[command(flatten)]
    target: crate::target::Target,
    /// Print JSON instead of TOML.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: ConfigArgs, out: &Redactor) -> Result<bool, LockError> {
    let config = args.target.load(out)?;
    let fail = |e: &dyn std::fmt::Display| LockError::backend("dlock", format!("cannot print the configuration: {e}"));
    let mut value = serde_json::to_value(&config).map_err(|e| fail(&e))?;
    if let Value::Object(map) = &mut value {
        map.insert("url".to_owned(), Value::String(config.redacted_url()));
    }
    strip_nulls(&mut value);
    let text = if args.json {
        serde_json::to_string_pretty(&value).map_err(|e| fail(&e))?
    } else {
        toml::to_string(&value).map_err(|e| fail(&e))?
    };
    out.println(text.trim_end());
    Ok(true)
}

/// TOML has no null: an unset option (`wait`, `tls_ca_file`) is left out, as in a config file.
fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_are_left_out_at_every_depth() {
        let mut v = serde_json::json!({"a": null, "b": {"c": null, "d": 1}, "e": [{"f": null}]});
        strip_nulls(&mut v);
        assert_eq!(v, serde_json::json!({"b": {"d": 1}, "e": [{}]}));
    }
}
