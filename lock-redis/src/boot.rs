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
    /// Set once a server answered `CROSSSLOT` (a Redis Cluster node): a script may then touch
    /// one slot only, so each lock name carries its own marker under its hash tag.
    per_name: AtomicBool,
}

impl Boot {
    pub(crate) fn new(prefix: &str, quiet: Duration) -> Boot {
        let quiet_ms = u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX);
        Boot { prefix: prefix.to_owned(), quiet_ms, per_name: AtomicBool::new(false) }
    }

    /// The quiet period in ms, as the scripts take it.
    pub(crate) fn quiet_ms(&self) -> u64 {
        self.quiet_ms
    }

    fn key(&self, name: &LockName, per_name: bool) -> String {
        if per_name {
            format!("{}:{{{}}}:boot", self.prefix, name.escaped())
        } else {
            format!("{}:boot", self.prefix)
        }
    }

    /// Runs an acquire script given the marker key for `name`. One marker per server, unless the
    /// server is a Redis Cluster node (it refuses keys of two slots with `CROSSSLOT`): then one
    /// marker per name, and the call is made again with it.
    pub(crate) async fn with_marker<T, F, Fut>(&self, name: &LockName, call: F) -> redis::RedisResult<T>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if self.per_name.load(Ordering::Relaxed) {
            return call(self.key(name, true)).await;
        }
        match call(self.key(name, false)).await {
            Err(e) if e.code() == Some("CROSSSLOT") => {
                tracing::debug!("a Redis Cluster node: one boot marker per lock name from now on");
                self.per_name.store(true, Ordering::Relaxed);
                call(self.key(name, true)).await
            }
            other => other,
        }
    }
}
