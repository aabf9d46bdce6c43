//! The restart quiet period (docs/contract.md §3): a server that lost its state grants nothing while a lease
//! it forgot may still be believed valid by its holder.
//!
//! Every acquire script checks a boot marker key. A missing marker means the server lost its
//! data (a restart without persistence, `FLUSHALL`, a failover to an empty replica), or was never
//! used with this key prefix: the script that finds it missing writes it with "quiet until" =
//! server `TIME` + the quiet period, and every fresh grant is refused (answered like a held lock,
//! with the remaining quiet time) until then. Holders of forgotten leases learn of the loss at
//! their next renewal, and by then their lease has ended anyway.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::LockName;

/// Lua shared by every acquire script (each defines `quiet_left` from it). `now_ms` is the server
/// clock in ms; returns the quiet time left in ms (0: grants may go ahead).
macro_rules! quiet_lua {
    () => {
        r#"
-- After the server lost its state, nothing is granted until the longest lease it may have
-- forgotten has ended: the first script to find the boot marker missing starts the quiet period.
local function quiet_left(marker, quiet_ms, now_ms)
  local quiet_until = tonumber(redis.call('GET', marker) or '')
  if not quiet_until then
    quiet_until = now_ms + tonumber(quiet_ms)
    redis.call('SET', marker, string.format('%d', quiet_until))
  end
  return math.max(0, quiet_until - now_ms)
end
"#
    };
}
pub(crate) use quiet_lua;

/// Where a client keeps its boot marker and how long its quiet period is.
#[derive(Debug)]
pub(crate) struct Boot {
    prefix: String,
    quiet_ms: u64,
    /// Set for a `redis+cluster://` client, or once a server answered `CROSSSLOT` (a Redis
    /// Cluster node reached as one server): a script may then touch one slot only, so each
    /// slot carries its own marker (see [`slot_marker`]).
    per_slot: AtomicBool,
}

impl Boot {
    /// `per_name`: the client knows it talks to a Redis Cluster (`redis+cluster://`); a node
    /// reached as a single server is found out by its first `CROSSSLOT`.
    pub(crate) fn new(prefix: &str, quiet: Duration, per_name: bool) -> Boot {
        let quiet_ms = u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX);
        Boot { prefix: prefix.to_owned(), quiet_ms, per_slot: AtomicBool::new(per_name) }
    }

    /// The quiet period in ms, as the scripts take it.
    pub(crate) fn quiet_ms(&self) -> u64 {
        self.quiet_ms
    }

    fn key(&self, name: &LockName, per_slot: bool) -> String {
        if per_slot {
            slot_marker(&self.prefix, crate::cluster::slot(name.escaped().as_bytes()))
        } else {
            format!("{}:boot", self.prefix)
        }
    }

    /// Runs an acquire script given the marker key for `name`. One marker per server, unless the
    /// server is a Redis Cluster node (it refuses keys of two slots with `CROSSSLOT`): then one
    /// marker per hash slot, and the call is made again with it.
    pub(crate) async fn with_marker<T, F, Fut>(&self, name: &LockName, call: F) -> redis::RedisResult<T>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if self.per_slot.load(Ordering::Relaxed) {
            return call(self.key(name, true)).await;
        }
        match call(self.key(name, false)).await {
            Err(e) if e.code() == Some("CROSSSLOT") => {
                tracing::debug!("a Redis Cluster node: one boot marker per hash slot from now on");
                self.per_slot.store(true, Ordering::Relaxed);
                call(self.key(name, true)).await
            }
            other => other,
        }
    }
}

impl Boot {
    /// Says once per key prefix and process that nothing is granted for `left` more, and why: a
    /// wait in a quiet period must never be silent (a new prefix looks like a server that lost
    /// its state, and its first lock would otherwise wait `restart_quiet_period` without a word).
    pub(crate) fn announce_quiet(&self, left: Duration) {
        static ANNOUNCED: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
            std::sync::LazyLock::new(Default::default);
        let first = ANNOUNCED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(self.prefix.clone());
        if first {
            tracing::warn!(
                prefix = %self.prefix,
                left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                "Redis key prefix {:?}: nothing is granted for {left:?} more (the restart quiet period). The \
                 server lost its state, or this prefix was never used on it. If the deployment is new, \
                 mark it fresh with `dlock init --url …` (or `SET {}:boot 0`; on a Redis Cluster every \
                 key of lock_redis::cluster_boot_markers); `[redis] restart_quiet_period` sets the wait",
                self.prefix,
                self.prefix
            );
        }
    }
}

/// The boot marker of hash slot `slot` on a Redis Cluster: `<prefix>:{<tag>}:boot`, where `<tag>`
/// is the shortest decimal number whose hash slot is `slot`. One marker per slot, not per name:
/// a master that restarts empty loses exactly the markers of its slots, so the names of those
/// slots wait the quiet period once, while a name never used before on a healthy cluster is
/// granted at once. To mark a new cluster fresh, `SET` each of [`cluster_boot_markers`] to 0
/// (`dlock init --url redis+cluster://…` does).
pub(crate) fn slot_marker(prefix: &str, slot: u16) -> String {
    format!("{prefix}:{{{}}}:boot", slot_tags()[usize::from(slot)])
}

/// Every boot marker key of `prefix` on a Redis Cluster, one per hash slot (16384), in slot
/// order. An operator marks a new, empty cluster fresh (no lease can have been forgotten, so no
/// restart quiet period) by setting each to `0`.
pub fn cluster_boot_markers(prefix: &str) -> Vec<String> {
    (0..SLOTS).map(|slot| slot_marker(prefix, slot)).collect()
}

const SLOTS: u16 = 16384;

/// For each slot, the shortest decimal number hashing to it (found once, ~170 000 CRC16s).
fn slot_tags() -> &'static [u32] {
    static TAGS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; usize::from(SLOTS)];
        let mut left = usize::from(SLOTS);
        let mut n: u32 = 0;
        while left > 0 {
            let slot = usize::from(crate::cluster::slot(n.to_string().as_bytes()));
            if tags[slot] == u32::MAX {
                tags[slot] = n;
                left -= 1;
            }
            n += 1;
        }
        tags
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_marker_per_slot_in_that_slot() {
        let markers = cluster_boot_markers("dlock");
        assert_eq!(markers.len(), 16384);
        for (slot, key) in markers.iter().enumerate().step_by(97) {
            assert_eq!(usize::from(crate::cluster::slot(key.as_bytes())), slot, "{key}");
        }
        let name = LockName::new("orders/42").expect("valid");
        let lock_key = format!("dlock:{{{}}}:lock", name.escaped());
        let boot = Boot::new("dlock", Duration::ZERO, true);
        assert_eq!(crate::cluster::slot(boot.key(&name, true).as_bytes()), crate::cluster::slot(lock_key.as_bytes()));
    }
}
