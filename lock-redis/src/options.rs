//! Options shared by the single-instance and the Redlock backend.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use lock_core::{Capabilities, LeaseModel, LockError, WakeMethod};
use serde::Deserialize;

/// Options of a Redis or Redlock client. Credentials live in the URL, never here, so the
/// derived `Debug` prints nothing secret.
///
/// ```
/// let opts: lock_redis::RedisOptions =
///     serde_json::from_str(r#"{ "key_prefix": "app", "request_timeout": "200ms" }"#).unwrap();
/// assert_eq!(opts.request_timeout, std::time::Duration::from_millis(200));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisOptions {
    /// Prefix of every key and channel (`<prefix>:{<escaped name>}:…`): 1 to
    /// 64 ASCII letters, digits and `- _ . : /`, so that it is also a literal in ACL key and
    /// channel patterns (`~<prefix>:*`) and never changes the Redis Cluster hash tag. Default
    /// `dlock`.
    pub key_prefix: String,
    /// Bound on establishing one connection (TCP, TLS, AUTH, SELECT). Default 2 s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Bound on one command to one server. For Redlock this is the per-node timeout, and it is
    /// further capped at a third of the lease ttl so that a slow node costs little of the
    /// validity time. Keep it well below your ttls. Default 1 s.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// For TLS servers (`rediss://`, `rediss+sentinel://`, `redlock://…?tls=true`,
    /// `redis+cluster://…?tls=true`) whose certificates a private CA signed: that CA's
    /// certificate, a PEM file, which every node is verified against. Default: the webpki
    /// (Mozilla) roots.
    pub tls_ca_file: Option<PathBuf>,
    /// The longest lease ttl this client accepts (a longer one is `InvalidOptions`), and so the
    /// longest a forgotten lease may be believed after the server lost its state. Every client
    /// of one server should agree on it. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub max_ttl: Duration,
    /// After the server lost its state (a restart without persistence, `FLUSHALL`, a failover to
    /// an empty replica), or on the first use of a key prefix on a server, nothing is granted
    /// for this long, so that no lease the server forgot is still believed valid when the lock
    /// goes to someone else (docs/contract.md §3). Default (`None`): `max_ttl`. `0s` turns it off: only for a
    /// server that never loses acknowledged writes (AOF with `appendfsync always`). See the crate
    /// docs, "Restarts".
    #[serde(with = "humantime_serde")]
    pub restart_quiet_period: Option<Duration>,
    /// For a primary with replicas (Redis Sentinel): every grant and renewal is followed by
    /// `WAIT <n> <request_timeout / 2>`; a grant fewer than `n` replicas acknowledged in that
    /// time is released and answered `Unavailable`, a renewal likewise fails (the watchdog
    /// tries again while the lease is valid). Then a failover to an acknowledging replica keeps
    /// the lease. `0` (default) turns it off. Needs `+wait` in the user's ACL.
    pub min_replicas_ack: u32,
    /// Let a name's hash (lease and token counter) expire once the name has not been granted or
    /// renewed for `ttl` plus this long (docs/contract.md §5.7), so idle names cost no memory;
    /// `None` (default) keeps them forever. Tokens stay monotonic without the key: every token is at least the
    /// server's clock in µs. At least 1 s. Single-instance Redis only (Redlock keeps its keys).
    #[serde(with = "humantime_serde")]
    pub idle_gc_after: Option<Duration>,
    /// Redis Cluster only (`redis+cluster://`): where this client reaches a node whose announced
    /// address (`CLUSTER SLOTS`) it cannot reach directly, e.g. behind NAT, port forwarding or a
    /// proxy: `{ "10.0.0.5:6379" = "127.0.0.1:16379" }`. Nodes not listed are reached as
    /// announced. Empty by default.
    pub cluster_node_map: BTreeMap<String, String>,
    /// Redis Sentinel and Cluster only: how far the wall clocks of the nodes may disagree. After
    /// a failover the promoted replica judges every lease's expiry by its own clock (the
    /// exclusive lock's lease end is an absolute server time, and Redis ≥ 7 replicates `PEXPIRE`
    /// as an absolute `PEXPIREAT`), so a lease ends up to this much earlier
    /// than the old primary would have ended it; every lease's validity is shortened by it
    /// (`valid_until = t0 + ttl − (ttl/100 + 2ms) − max_clock_offset`, docs/contract.md §3) and a
    /// ttl must exceed that allowance. `dlock doctor` measures the nodes' offsets. Ignored on a
    /// single server and by Redlock (no failover: one clock judges each key). There the
    /// shortest ttl accepted is `2 × (max_clock_offset + 2 ms)` (at least 10 ms), which must not
    /// exceed `max_ttl`. Default 50 ms.
    #[serde(with = "humantime_serde")]
    pub max_clock_offset: Duration,
    /// The most waiters one exclusive lock name may have queued on the server (single instance,
    /// Sentinel and Cluster; each Redlock master). A waiting `acquire` that would be one more fails at once with
    /// `InvalidOptions` saying so (raise this, or let fewer clients wait on one name); the
    /// queue's work per attempt does not grow with its length, its memory does (about 450 bytes
    /// per waiter). Every client of a name should agree on it. At least 1. Default 10,000.
    pub max_waiters: u32,
    /// A release hands the lock to a waiting `acquire` of this client by pushing the grant onto a
    /// list that wait blocks on (`BLPOP` on a connection of its own), so the waiter holds one
    /// round trip sooner than when it is woken and claims (the crate docs, "Blocking delivery").
    /// Single server and Sentinel, without `min_replicas_ack`, and Redlock (the waiter holds on a
    /// majority of masters' pushes naming one token); a Cluster always wakes. Costs one
    /// connection per waiting `acquire` (per master on Redlock), at most 64 waits per client at
    /// once (the waits beyond are woken; idle connections are reused), and `+rpush +blpop` in the
    /// ACL. Default `true`.
    pub blocking_handoff: bool,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            key_prefix: "dlock".to_owned(),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(1),
            tls_ca_file: None,
            max_ttl: Duration::from_secs(60),
            restart_quiet_period: None,
            min_replicas_ack: 0,
            idle_gc_after: None,
            cluster_node_map: BTreeMap::new(),
            max_clock_offset: DEFAULT_MAX_CLOCK_OFFSET,
            max_waiters: DEFAULT_MAX_WAITERS,
            blocking_handoff: true,
        }
    }
}

impl RedisOptions {
    /// Checks the options; every problem is a `Config` error saying what to change.
    pub fn validate(&self) -> Result<(), LockError> {
        validate_prefix(&self.key_prefix)?;
        if self.idle_gc_after.is_some_and(|d| d < Duration::from_secs(1)) {
            return Err(LockError::config("redis idle_gc_after is under 1s; use e.g. \"1h\" (or leave it out)"));
        }
        if self.connect_timeout.is_zero() {
            return Err(LockError::config("redis connect_timeout is zero; use e.g. \"2s\""));
        }
        if self.request_timeout.is_zero() {
            return Err(LockError::config("redis request_timeout is zero; use e.g. \"1s\""));
        }
        if self.max_ttl.is_zero() || self.max_ttl > MAX_DURATION {
            return Err(LockError::config(format!(
                "redis max_ttl {:?} is out of range; use the longest lease ttl you need, e.g. \"60s\" (at most {} days)",
                self.max_ttl,
                MAX_DURATION.as_secs() / 86_400
            )));
        }
        if min_ttl(self.max_clock_offset) > self.max_ttl {
            return Err(LockError::config(format!(
                "redis max_clock_offset {:?} leaves no usable lease within max_ttl {:?} (a ttl must be at least twice \
                 the offset plus 2 ms); set it to how far the nodes' clocks may disagree (NTP keeps them within a \
                 few ms), e.g. \"50ms\"",
                self.max_clock_offset, self.max_ttl
            )));
        }
        if self.max_waiters == 0 {
            return Err(LockError::config(format!(
                "redis max_waiters is 0, so no acquire could wait; use the most waiters one name may have, e.g. \
                 {DEFAULT_MAX_WAITERS}"
            )));
        }
        if self.quiet_period() > MAX_DURATION {
            return Err(LockError::config(format!(
                "redis restart_quiet_period {:?} is out of range; leave it unset (= max_ttl) or at most {} days",
                self.quiet_period(),
                MAX_DURATION.as_secs() / 86_400
            )));
        }
        Ok(())
    }

    /// How long a server that lost its state grants nothing: `restart_quiet_period`, by
    /// default `max_ttl`.
    pub fn quiet_period(&self) -> Duration {
        self.restart_quiet_period.unwrap_or(self.max_ttl)
    }

    /// How long the server may wait for replica acknowledgements (`WAIT`), in ms.
    pub(crate) fn replica_ack_wait_ms(&self) -> u64 {
        u64::try_from((self.request_timeout / 2).as_millis()).unwrap_or(u64::MAX).max(1)
    }

    /// Reads `tls_ca_file`, if set.
    pub(crate) async fn read_ca(&self) -> Result<Option<Vec<u8>>, LockError> {
        let Some(path) = &self.tls_ca_file else { return Ok(None) };
        match tokio::fs::read(path).await {
            Ok(pem) => Ok(Some(pem)),
            Err(e) => Err(LockError::config(format!(
                "cannot read redis tls_ca_file {}: {e}; point it at the PEM certificate of the CA that signed \
                 the servers' certificates",
                path.display()
            ))),
        }
    }
}

/// The default [`RedisOptions::max_clock_offset`]: NTP (chrony, systemd-timesyncd) keeps the
/// hosts of one site within a few ms, so 50 ms leaves a wide margin and costs a 30 s lease
/// 0.17 % of its validity; clocks that disagree more are a fault `dlock doctor` reports.
pub const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_millis(50);

/// The default [`RedisOptions::max_waiters`]: far more waiters on one name than a sane design
/// has, and a few MB of server memory at most.
pub const DEFAULT_MAX_WAITERS: u32 = 10_000;

/// The shortest ttl worth granting where the leases allow `max_clock_offset`: 10 ms, or twice
/// the fixed part of the allowance (`2 ms + max_clock_offset`), so that about half of the
/// shortest lease is still valid (and a ttl within the allowance is refused as below it).
pub(crate) fn min_ttl(max_clock_offset: Duration) -> Duration {
    (max_clock_offset.saturating_add(Duration::from_millis(2)).saturating_mul(2)).max(Duration::from_millis(10))
}

/// What one Redis server and Redlock's masters both promise: waiters queued on the server in
/// arrival order and woken by `PUBLISH`, a lease per lock that a restart loses, and tokens that
/// stay monotonic across a restart (never below the server's clock, `crate::scripts::queue`).
/// Each deployment adds what it offers beyond that.
pub(crate) fn queued_capabilities(min_ttl: Duration, max_ttl: Duration) -> Capabilities {
    let mut caps = Capabilities::new();
    caps.fifo = true;
    caps.wake = WakeMethod::Notify;
    caps.lease_model = LeaseModel::PerLock;
    caps.durable_fencing = true;
    caps.durable_leases = false;
    caps.min_ttl = min_ttl;
    caps.max_ttl = max_ttl;
    caps
}

/// The longest `max_ttl` and quiet period accepted: the scripts compute with them in Lua
/// numbers (doubles), exact far beyond this.
const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// The longest key prefix accepted.
const MAX_PREFIX: usize = 64;

/// A key prefix is validated like a table name: it ends up in every key, in ACL patterns (where
/// `* ? [ ] \` are glob syntax) and next to the hash tag (where `{ }` would change the slot).
fn validate_prefix(prefix: &str) -> Result<(), LockError> {
    let shown: String = prefix.chars().take(MAX_PREFIX).flat_map(char::escape_default).collect();
    if prefix.is_empty() || prefix.len() > MAX_PREFIX {
        return Err(LockError::config(format!(
            "redis key_prefix must be 1 to {MAX_PREFIX} bytes long (it is {}); choose e.g. \"dlock\" or \"myapp-locks\"",
            prefix.len()
        )));
    }
    if let Some(bad) = prefix.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/')))
    {
        return Err(LockError::config(format!(
            "redis key_prefix \"{shown}\" contains {:?}; use only ASCII letters, digits and - _ . : / (glob characters \
             would widen ACL patterns, braces would change the Redis Cluster hash tag), e.g. \"myapp-locks\"",
            bad
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_serde() {
        let d = RedisOptions::default();
        assert!(d.validate().is_ok());
        let o: RedisOptions = serde_json::from_str(r#"{"connect_timeout":"3s"}"#).unwrap();
        assert_eq!(o.connect_timeout, Duration::from_secs(3));
        assert_eq!(o.key_prefix, "dlock");
        assert!(serde_json::from_str::<RedisOptions>(r#"{"bogus":1}"#).is_err());
        assert_eq!(d.quiet_period(), d.max_ttl, "the quiet period defaults to the longest ttl");
        let o: RedisOptions = serde_json::from_str(r#"{"max_ttl":"2m","restart_quiet_period":"0s"}"#).unwrap();
        assert_eq!((o.max_ttl, o.quiet_period()), (Duration::from_secs(120), Duration::ZERO));
        for bad in ["", "a{b", "a}", "lock*", "a?b", "x[ab]", "a b", "a\tb", "a\\b", "é", &"p".repeat(65)] {
            let o = RedisOptions { key_prefix: bad.into(), ..RedisOptions::default() };
            assert!(matches!(o.validate(), Err(LockError::Config { .. })), "{bad:?} must be refused");
        }
        for bad in [
            RedisOptions { max_ttl: Duration::ZERO, ..RedisOptions::default() },
            RedisOptions { max_ttl: Duration::MAX, ..RedisOptions::default() },
            RedisOptions { restart_quiet_period: Some(Duration::MAX), ..RedisOptions::default() },
        ] {
            assert!(matches!(bad.validate(), Err(LockError::Config { .. })), "{bad:?}");
        }
        let o: RedisOptions = serde_json::from_str(r#"{"max_waiters":50}"#).unwrap();
        assert_eq!((o.max_waiters, d.max_waiters), (50, DEFAULT_MAX_WAITERS));
        let none = RedisOptions { max_waiters: 0, ..RedisOptions::default() };
        assert!(matches!(none.validate(), Err(LockError::Config { .. })), "no waiter at all is refused");
        let huge = RedisOptions { key_prefix: "x".repeat(100_000), ..RedisOptions::default() };
        let e = huge.validate().unwrap_err().to_string();
        assert!(e.len() < 400, "the error does not echo a huge prefix: {} bytes", e.len());
        for good in ["dlock", "myapp-locks", "a.b_c:d/e", &"p".repeat(64)] {
            let o = RedisOptions { key_prefix: good.into(), ..RedisOptions::default() };
            assert!(o.validate().is_ok(), "{good:?} must be accepted");
        }
    }

    #[test]
    fn max_clock_offset_is_typed_and_below_max_ttl() {
        assert_eq!(RedisOptions::default().max_clock_offset, DEFAULT_MAX_CLOCK_OFFSET);
        let o: RedisOptions = serde_json::from_str(r#"{"max_clock_offset":"5ms"}"#).expect("a duration");
        assert_eq!(o.max_clock_offset, Duration::from_millis(5));
        assert!(o.validate().is_ok());
        assert!(serde_json::from_str::<RedisOptions>(r#"{"max_clock_offset":"fast"}"#).is_err());
        assert!(serde_json::from_str::<RedisOptions>(r#"{"max_clock_offset":"-5ms"}"#).is_err());
        let o = RedisOptions { max_clock_offset: Duration::from_secs(30), ..RedisOptions::default() };
        let e = o.validate().expect_err("no lease would be valid");
        assert!(matches!(e, LockError::Config { .. }) && e.to_string().contains("max_clock_offset"), "{e}");
    }
}
