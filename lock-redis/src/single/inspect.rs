//! Who holds a lock on Redis (docs/contract.md §5.6): the holder id and metadata live in the
//! name's hash (fields `h`, `m`, written by the acquire script in the same call and gone with
//! the lease); `RedisStore::read_holder` reads the hash and the time its lease has left in one
//! script, `scan_holders` walks the key space with `SCAN` over the prefix's name hashes (held or
//! not: the read says); `free_whoever_holds` ends the lease (never the token counter).

use lock_core::{backend::escape_prefix, FencingToken, HolderInfo, LockError, LockKind, LockName};

use super::store::{RedisStore, BACKEND, RESERVE_MS};
use crate::reply::{remaining_from, token_from};
use crate::scripts::{ForceRelease, Inspect};

/// Most `SCAN` calls one `list` makes (each looks at about [`SCAN_COUNT`] keys).
const MAX_SCANS: usize = 10_000;
/// The `COUNT` hint of each `SCAN`.
const SCAN_COUNT: usize = 1_000;

/// The lock name of an exclusive lease key `<prefix>:{<escaped>}:lock`.
fn name_of(key_prefix: &str, key: &str) -> Option<LockName> {
    let inner = key.strip_prefix(key_prefix)?.strip_prefix(":{")?.strip_suffix("}:lock")?;
    LockName::from_escaped(inner)
}

fn strip(field: &str) -> Option<String> {
    field.strip_prefix('+').map(str::to_owned)
}

impl RedisStore {
    /// The holder of `name`, read in one script (token, time left, holder id and metadata).
    pub(super) async fn read_holder(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        let keys = self.keys(name);
        let call = Inspect { keys: &keys };
        let reply = self
            .node
            .run_idempotent(self.node.request_timeout(), |mut c| async move { call.invoke(&mut c).await })
            .await?;
        let [token, pttl, holder, metadata] = reply.as_slice() else {
            if reply.is_empty() {
                return Ok(None);
            }
            return Err(LockError::backend(BACKEND, format!("unexpected reply from the inspect script: {reply:?}")));
        };
        let token = token_from(BACKEND, token.parse::<i64>().unwrap_or(0))?;
        let remaining = remaining_from(pttl.parse::<i64>().unwrap_or(-1));
        Ok(Some(
            HolderInfo::new(name.as_str(), token, LockKind::Exclusive)
                .with_holder(strip(holder), strip(metadata))
                .with_remaining(remaining),
        ))
    }

    /// Frees `name` whoever holds it, keeping the fence counter (one script); the freed token.
    pub(super) async fn free_whoever_holds(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        let keys = self.keys(name);
        let call = ForceRelease { keys: &keys, reserve_ms: RESERVE_MS };
        let reply =
            self.node.run(self.node.request_timeout(), |mut c| async move { call.invoke(&mut c).await }).await?;
        match reply.as_slice() {
            [] => Ok(None),
            [token] => Ok(Some(token_from(BACKEND, token.parse::<i64>().unwrap_or(0))?)),
            _ => Err(LockError::backend(BACKEND, format!("unexpected reply from the force-release script: {reply:?}"))),
        }
    }

    /// The holders of the names under `prefix`, in name order, at most `limit`.
    pub(super) async fn scan_holders(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        let pattern = format!("{}:{{{}*}}:lock", self.prefix, escape_prefix(prefix));
        let pattern = &pattern;
        let mut names =
            if self.node.is_cluster() { self.scan_cluster(pattern).await? } else { self.scan(pattern).await? };
        // SCAN may return a key twice; the order is the contract's (name order).
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup();
        let mut held = Vec::new();
        for name in names {
            if held.len() >= limit {
                break;
            }
            // Released or expired since the scan: not held.
            if let Some(info) = self.read_holder(&name).await? {
                held.push(info);
            }
        }
        Ok(held)
    }

    /// Every key matching `pattern` on a single server.
    async fn scan(&self, pattern: &str) -> Result<Vec<LockName>, LockError> {
        let mut names = Vec::new();
        let mut cursor: u64 = 0;
        for _ in 0..MAX_SCANS {
            let (next, keys): (u64, Vec<String>) = self
                .node
                .run_idempotent(self.node.request_timeout(), |mut c| async move {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(SCAN_COUNT)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            names.extend(keys.iter().filter_map(|k| name_of(&self.prefix, k)));
            cursor = next;
            if cursor == 0 {
                return Ok(names);
            }
        }
        Err(too_many_keys(pattern))
    }

    /// Every key matching `pattern` on every master of a cluster (each master scanned to its end).
    async fn scan_cluster(&self, pattern: &str) -> Result<Vec<LockName>, LockError> {
        let mut names = Vec::new();
        let mut pending: Vec<(String, u64)> = Vec::new();
        let mut at: Option<(String, u64)> = None;
        for _ in 0..MAX_SCANS {
            let step = at.as_ref().map(|(n, c)| (n.as_str(), *c));
            let replies = self
                .node
                .run_idempotent(self.node.request_timeout(), |mut c| async move {
                    crate::cluster::scan_step(&mut c, step, pattern, SCAN_COUNT).await
                })
                .await?;
            for (node, cursor, keys) in replies {
                names.extend(keys.iter().filter_map(|k| name_of(&self.prefix, k)));
                if cursor != 0 {
                    pending.push((node, cursor));
                }
            }
            match pending.pop() {
                Some(next) => at = Some(next),
                None => return Ok(names),
            }
        }
        Err(too_many_keys(pattern))
    }
}

fn too_many_keys(pattern: &str) -> LockError {
    LockError::backend(
        BACKEND,
        format!(
            "listing {pattern:?} stopped after {MAX_SCANS} SCAN calls (about {} keys); use a longer prefix",
            MAX_SCANS * SCAN_COUNT
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_escape_like_names_and_keys_decode() {
        for (prefix, full) in [("jobs/", "jobs/a b"), (".x", ".x.y"), ("", "ünï/%"), ("a", "a")] {
            let name = LockName::new(full).expect("valid");
            assert!(name.escaped().starts_with(&escape_prefix(prefix)), "{prefix:?} vs {full:?}");
            let key = format!("dlock:{{{}}}:lock", name.escaped());
            assert_eq!(name_of("dlock", &key), Some(name));
        }
        assert_eq!(name_of("dlock", "dlock:{a}:fence"), None);
        assert_eq!(name_of("dlock", "other:{a}:lock"), None);
    }
}
