//! Key layout and the Lua scripts. Every key a script touches is passed in `KEYS` and all keys
//! of one lock share the hash tag `{<escaped name>}`, so each script runs on one Redis Cluster
//! slot.
//!
//! Numbers: Lua 5.1 numbers are doubles, exact below 2^53; tokens are microsecond timestamps
//! (≈ 2^51 today) plus small increments. Numbers are passed *to* Redis as strings made with
//! `string.format('%d')`, because Redis formats a Lua number argument in a way that may lose
//! digits.

use std::sync::LazyLock;

use lock_core::LockName;
use redis::Script;

/// The keys and channel of one lock.
pub(crate) struct Keys {
    /// Hash `{o: owner, f: fence}` with a `PX` expiry: the lease.
    pub(crate) lock: String,
    /// Integer, no expiry: the highest token issued.
    pub(crate) fence: String,
    /// Pub/sub channel that a release publishes to.
    pub(crate) channel: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &LockName) -> Keys {
        // `escaped()` is injective and never contains braces, so the tag is exactly the name.
        let tag = format!("{prefix}:{{{}}}", name.escaped());
        Keys { lock: format!("{tag}:lock"), fence: format!("{tag}:fence"), channel: format!("{tag}:released") }
    }
}

/// Single instance acquire. KEYS: lock, fence. ARGV: owner, ttl ms.
/// Returns `{1, token}` when granted (or already ours: the stored token, lease refreshed),
/// `{0, pttl}` when someone else holds it.
const ACQUIRE_SRC: &str = r#"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local holder = redis.call('HGET', KEYS[1], 'o')
if holder then
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(redis.call('HGET', KEYS[1], 'f'))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
-- Never issue less than the server clock in microseconds: a restart without persistence or an
-- evicted counter then still continues above every token issued before.
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = redis.call('INCR', KEYS[2])
if token < floor then
  token = floor
  redis.call('SET', KEYS[2], string.format('%d', token))
end
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'f', string.format('%d', token))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}
"#;
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SRC));

/// Owner-checked renew. KEYS: lock. ARGV: owner, ttl ms. Returns 1 renewed, 0 not ours.
const RENEW_SRC: &str = r#"
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_SRC));

/// Owner-checked release that wakes waiters. KEYS: lock. ARGV: owner, channel.
/// Returns 1 released, 0 not ours.
const RELEASE_SRC: &str = r#"
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
"#;
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SRC));

/// Redlock, per master: take the lease and read the fence floor. KEYS: lock, fence.
/// ARGV: owner, ttl ms, attempt id. Returns `{1, floor}` (floor = max(counter, server TIME in
/// µs)) when granted or already ours, `{0, pttl}` when held by another owner. The attempt id
/// lets [`REDLOCK_ABANDON`] free exactly one failed attempt.
const REDLOCK_ACQUIRE_SRC: &str = r#"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local holder = redis.call('HGET', KEYS[1], 'o')
if holder and holder ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'a', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local counter = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if counter > floor then floor = counter end
return {1, floor}
"#;
pub(crate) static REDLOCK_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(REDLOCK_ACQUIRE_SRC));

/// Redlock, per master: store a token if it is greater (set-if-greater). KEYS: fence.
/// ARGV: token (decimal string). Returns the stored value afterwards.
const REDLOCK_FENCE_SRC: &str = r#"
local want = tonumber(ARGV[1])
local have = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if want > have then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return have
"#;
pub(crate) static REDLOCK_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(REDLOCK_FENCE_SRC));

/// Redlock, per master: undo one failed attempt. KEYS: lock. ARGV: owner, attempt id, channel.
/// Deletes the entry only if it still belongs to this owner **and** this attempt: a late
/// undo of an earlier attempt (delayed on a slow link or a reconnected socket) must not free
/// the grant of a later attempt by the same owner. Returns 1 deleted, 0 not.
const REDLOCK_ABANDON_SRC: &str = r#"
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] and redis.call('HGET', KEYS[1], 'a') == ARGV[2] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], 'released')
  return 1
end
return 0
"#;
pub(crate) static REDLOCK_ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(REDLOCK_ABANDON_SRC));

/// Lua shared by the scripts of the read-write lock and the semaphore (prepended to each):
/// the server clock, the TIME-floored fence counter, and sorted sets of holders scored by the
/// server time (ms) at which each holder's lease ends.
macro_rules! kinds_prelude {
    () => {
        r#"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Numbers go to Redis as decimal strings (a Lua number argument may be cut to 14 digits).
local function ms(n) return string.format('%d', n) end
-- The next fencing token: never less than the server clock in microseconds.
local function next_token(key)
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = redis.call('INCR', key)
  if token < floor then
    token = floor
    redis.call('SET', key, string.format('%d', token))
  end
  return token
end
-- Drops holders whose lease ended (and their tokens, when `tokens` is given).
local function purge(zset, tokens)
  local gone = redis.call('ZRANGEBYSCORE', zset, '-inf', ms(now))
  for _, member in ipairs(gone) do
    if tokens then redis.call('HDEL', tokens, member) end
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', zset, '-inf', ms(now)) end
end
-- Gives `keys` the expiry of the longest lease in `zset`, or deletes them when it is empty.
local function expire_with(zset, keys)
  local last = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES')
  for _, k in ipairs(keys) do
    if last[2] then
      redis.call('PEXPIRE', k, ms(math.max(1, tonumber(last[2]) - now)))
    else
      redis.call('DEL', k)
    end
  end
end
-- Milliseconds until the earliest (first = true) or latest lease in `zset` ends, or -1.
local function left(zset, first)
  local r
  if first then r = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  else r = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES') end
  if r[2] then return math.max(0, tonumber(r[2]) - now) end
  return -1
end
"#
    };
}

/// The keys and channels of one read-write lock (a key space of its own: `…:rw:*`).
pub(crate) struct RwKeys {
    /// Sorted set: reader owner → server time (ms) its lease ends.
    pub(crate) readers: String,
    /// Hash: reader owner → its fencing token.
    pub(crate) tokens: String,
    /// Hash `{o: owner, f: token}` with `PX ttl`: the writer.
    pub(crate) writer: String,
    /// Sorted set: waiting writer owner → server time (ms) its claim ends. While it is not
    /// empty, new readers are refused (writers are not starved).
    pub(crate) waiting: String,
    /// Integer: the highest token issued for this read-write lock.
    pub(crate) fence: String,
    /// Channel: wakes waiting readers (all of them, per client).
    pub(crate) to_readers: String,
    /// Channel: wakes waiting writers (one per client).
    pub(crate) to_writers: String,
}

impl RwKeys {
    pub(crate) fn new(prefix: &str, name: &LockName) -> RwKeys {
        let tag = format!("{prefix}:{{{}}}:rw", name.escaped());
        RwKeys {
            readers: format!("{tag}:readers"),
            tokens: format!("{tag}:tokens"),
            writer: format!("{tag}:writer"),
            waiting: format!("{tag}:waiting"),
            fence: format!("{tag}:fence"),
            to_readers: format!("{tag}:to-readers"),
            to_writers: format!("{tag}:to-writers"),
        }
    }
}

/// The keys and channel of one semaphore (a key space of its own: `…:sem:*`).
pub(crate) struct SemKeys {
    /// Sorted set: holder owner → server time (ms) its lease ends.
    pub(crate) holders: String,
    /// Hash: holder owner → its fencing token.
    pub(crate) tokens: String,
    /// String: the number of permits every user must agree on (expires with the last holder).
    pub(crate) permits: String,
    /// Integer: the highest token issued for this semaphore.
    pub(crate) fence: String,
    /// Channel: a release wakes one waiter per client.
    pub(crate) channel: String,
}

impl SemKeys {
    pub(crate) fn new(prefix: &str, name: &LockName) -> SemKeys {
        let tag = format!("{prefix}:{{{}}}:sem", name.escaped());
        SemKeys {
            holders: format!("{tag}:holders"),
            tokens: format!("{tag}:tokens"),
            permits: format!("{tag}:permits"),
            fence: format!("{tag}:fence"),
            channel: format!("{tag}:released"),
        }
    }
}

/// Read acquire. KEYS: readers, tokens, writer, waiting, fence. ARGV: owner, ttl ms.
/// `{1, token}` granted (or already ours: lease refreshed, same token); `{0, ms}` refused
/// because a writer holds (ms = its PTTL) or writers wait (ms = until the first claim ends).
const RW_READ_SRC: &str = concat!(
    kinds_prelude!(),
    r#"
purge(KEYS[1], KEYS[2])
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local token = redis.call('HGET', KEYS[2], ARGV[1])
if mine and token then
  redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), ARGV[1])
  expire_with(KEYS[1], {KEYS[1], KEYS[2]})
  return {1, tonumber(token)}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, redis.call('PTTL', KEYS[3])}
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ms(now))
if redis.call('ZCARD', KEYS[4]) > 0 then
  return {0, left(KEYS[4], true)}
end
token = next_token(KEYS[5])
redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', token))
expire_with(KEYS[1], {KEYS[1], KEYS[2]})
return {1, token}
"#
);
pub(crate) static RW_READ: LazyLock<Script> = LazyLock::new(|| Script::new(RW_READ_SRC));

/// Write acquire. KEYS: readers, tokens, writer, waiting, fence. ARGV: owner, ttl ms, claim ms.
/// `{1, token}` granted (or already ours; its claim is dropped); `{0, ms}` refused: then, unless
/// `claim ms` is 0 (a single try), the writer's claim in `waiting` is (re)set to end in `claim
/// ms`, which holds back new readers; ms is how long the current holders' leases last at most.
const RW_WRITE_SRC: &str = concat!(
    kinds_prelude!(),
    r#"
purge(KEYS[1], KEYS[2])
local holder = redis.call('HGET', KEYS[3], 'o')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {1, tonumber(redis.call('HGET', KEYS[3], 'f'))}
end
local busy = -2
if holder then
  busy = redis.call('PTTL', KEYS[3])
elseif redis.call('ZCARD', KEYS[1]) > 0 then
  busy = left(KEYS[1], false)
end
if busy ~= -2 then
  if tonumber(ARGV[3]) > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ms(now))
    redis.call('ZADD', KEYS[4], ms(now + tonumber(ARGV[3])), ARGV[1])
    expire_with(KEYS[4], {KEYS[4]})
  end
  return {0, busy}
end
local token = next_token(KEYS[5])
redis.call('HSET', KEYS[3], 'o', ARGV[1], 'f', string.format('%d', token))
redis.call('PEXPIRE', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[1])
return {1, token}
"#
);
pub(crate) static RW_WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_WRITE_SRC));

/// Writer release. KEYS: writer, waiting. ARGV: owner, readers channel, writers channel.
/// Also drops the owner's claim (a waiting writer that gave up). Wakes one writer per client
/// when writers wait, else every reader. Returns 1 released, 0 not ours.
const RW_WRITE_RELEASE_SRC: &str = concat!(
    kinds_prelude!(),
    r#"
local mine = redis.call('HGET', KEYS[1], 'o') == ARGV[1]
local claimed = redis.call('ZREM', KEYS[2], ARGV[1]) == 1
if mine then redis.call('DEL', KEYS[1]) end
if mine or claimed then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ms(now))
  if redis.call('ZCARD', KEYS[2]) > 0 then
    if mine then redis.call('PUBLISH', ARGV[3], 'one') end
  elseif redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('PUBLISH', ARGV[2], 'all')
  end
end
if mine then return 1 end
return 0
"#
);
pub(crate) static RW_WRITE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_WRITE_RELEASE_SRC));

/// Semaphore acquire. KEYS: holders, tokens, permits, fence. ARGV: owner, ttl ms, permits.
/// `{1, token}` granted (or already ours); `{0, ms}` all permits taken (ms until the first
/// lease ends); `{-1, n}` the semaphore is in use with `n` permits, not `permits`.
const SEM_ACQUIRE_SRC: &str = concat!(
    kinds_prelude!(),
    r#"
purge(KEYS[1], KEYS[2])
local n = tonumber(ARGV[3])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[3])
else
  local have = tonumber(redis.call('GET', KEYS[3]) or '')
  if have and have ~= n then return {-1, have} end
end
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local token = redis.call('HGET', KEYS[2], ARGV[1])
if mine and token then
  redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), ARGV[1])
  expire_with(KEYS[1], {KEYS[1], KEYS[2], KEYS[3]})
  return {1, tonumber(token)}
end
if redis.call('ZCARD', KEYS[1]) >= n then
  return {0, left(KEYS[1], true)}
end
token = next_token(KEYS[4])
redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', token))
redis.call('SET', KEYS[3], ARGV[3])
expire_with(KEYS[1], {KEYS[1], KEYS[2], KEYS[3]})
return {1, token}
"#
);
pub(crate) static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_ACQUIRE_SRC));

/// Renew of a sorted-set holder (reader, permit). KEYS: holders, tokens[, permits].
/// ARGV: owner, ttl ms. Returns 1 renewed, 0 not ours (or its lease already ended).
const ZSET_RENEW_SRC: &str = concat!(
    kinds_prelude!(),
    r#"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now then
  redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), ARGV[1])
  expire_with(KEYS[1], KEYS)
  return 1
end
return 0
"#
);
pub(crate) static ZSET_RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(ZSET_RENEW_SRC));

/// Release of a sorted-set holder (reader, permit). KEYS: holders, tokens[, permits].
/// ARGV: owner, channel, `last` (`1`: publish only when no holder is left, as the last reader
/// wakes a writer; `0`: always, as a freed permit does). Returns 1 released, 0 not ours.
const ZSET_RELEASE_SRC: &str = concat!(
    kinds_prelude!(),
    r#"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
purge(KEYS[1], KEYS[2])
expire_with(KEYS[1], KEYS)
if ARGV[3] ~= '1' or redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('PUBLISH', ARGV[2], 'one')
end
return 1
"#
);
pub(crate) static ZSET_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(ZSET_RELEASE_SRC));

/// Every script's source, loaded on each new connection (one pipelined round trip) so the
/// first call by SHA does not pay a `NOSCRIPT` round trip.
pub(crate) const ALL_SOURCES: [&str; 12] = [
    ACQUIRE_SRC,
    RENEW_SRC,
    RELEASE_SRC,
    REDLOCK_ACQUIRE_SRC,
    REDLOCK_FENCE_SRC,
    REDLOCK_ABANDON_SRC,
    RW_READ_SRC,
    RW_WRITE_SRC,
    RW_WRITE_RELEASE_SRC,
    SEM_ACQUIRE_SRC,
    ZSET_RENEW_SRC,
    ZSET_RELEASE_SRC,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_tag_and_never_collide() {
        let a = Keys::new("p", &LockName::new("a/b").unwrap());
        let b = Keys::new("p", &LockName::new("a%2Fb").unwrap());
        assert_ne!(a.lock, b.lock);
        assert_eq!(a.lock, "p:{a%2Fb}:lock");
        assert_eq!(a.fence, "p:{a%2Fb}:fence");
        let braces = Keys::new("p", &LockName::new("x}{y").unwrap());
        assert_eq!(braces.lock.matches('{').count(), 1);
        assert_eq!(a.channel, "p:{a%2Fb}:released");
    }

    /// The scripts themselves, against a fresh local server.
    #[tokio::test]
    async fn scripts_against_a_server() {
        let server = lock_conformance::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let k = Keys::new("t", &LockName::new("s").unwrap());

        // Single instance: same owner re-attempt returns the stored token; others see the PTTL.
        let first: Vec<i64> =
            ACQUIRE.key(&k.lock).key(&k.fence).arg("o1").arg(5000).invoke_async(&mut c).await.unwrap();
        let again: Vec<i64> =
            ACQUIRE.key(&k.lock).key(&k.fence).arg("o1").arg(5000).invoke_async(&mut c).await.unwrap();
        assert_eq!(first[0], 1);
        assert_eq!(first, again, "a re-attempt by the same owner returns the same grant");
        let other: Vec<i64> =
            ACQUIRE.key(&k.lock).key(&k.fence).arg("o2").arg(5000).invoke_async(&mut c).await.unwrap();
        assert_eq!(other[0], 0);
        assert!(other[1] > 4000 && other[1] <= 5000, "PTTL {}", other[1]);
        let not_ours: i64 = RELEASE.key(&k.lock).arg("o2").arg(&k.channel).invoke_async(&mut c).await.unwrap();
        assert_eq!(not_ours, 0);
        let renewed: i64 = RENEW.key(&k.lock).arg("o2").arg(5000).invoke_async(&mut c).await.unwrap();
        assert_eq!(renewed, 0);
        let released: i64 = RELEASE.key(&k.lock).arg("o1").arg(&k.channel).invoke_async(&mut c).await.unwrap();
        assert_eq!(released, 1);
        let next: Vec<i64> = ACQUIRE.key(&k.lock).key(&k.fence).arg("o2").arg(5000).invoke_async(&mut c).await.unwrap();
        assert!(next[1] > first[1]);

        // Read-write lock: a reader's re-attempt returns its token; a refused waiting writer's
        // claim holds new readers back (not the readers already in); the writer's token is
        // above the readers'; a single try (claim 0) leaves no claim.
        let rw = RwKeys::new("t", &LockName::new("s").unwrap());
        let conn = c.clone();
        let read = |owner: &'static str| {
            let mut c = conn.clone();
            let k = RwKeys::new("t", &LockName::new("s").unwrap());
            async move {
                let r: Vec<i64> = RW_READ
                    .key(&k.readers)
                    .key(&k.tokens)
                    .key(&k.writer)
                    .key(&k.waiting)
                    .key(&k.fence)
                    .arg(owner)
                    .arg(5000)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r
            }
        };
        let write = |owner: &'static str, claim: u64| {
            let mut c = conn.clone();
            let k = RwKeys::new("t", &LockName::new("s").unwrap());
            async move {
                let r: Vec<i64> = RW_WRITE
                    .key(&k.readers)
                    .key(&k.tokens)
                    .key(&k.writer)
                    .key(&k.waiting)
                    .key(&k.fence)
                    .arg(owner)
                    .arg(5000)
                    .arg(claim)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r
            }
        };
        let r1 = read("r1").await;
        assert_eq!(r1[0], 1);
        assert_eq!(read("r1").await, r1, "a reader's re-attempt returns the same grant");
        assert_eq!(write("w1", 0).await[0], 0);
        assert_eq!(read("r2").await[0], 1, "a single try leaves no claim");
        let refused = write("w1", 3000).await;
        assert_eq!(refused[0], 0);
        assert!(refused[1] > 4000 && refused[1] <= 5000, "the readers' remaining lease: {}", refused[1]);
        assert_eq!(read("r3").await[0], 0, "a waiting writer's claim holds new readers back");
        assert_eq!(read("r1").await, r1, "a reader already in keeps its grant");
        for owner in ["r1", "r2"] {
            let done: i64 = ZSET_RELEASE
                .key(&rw.readers)
                .key(&rw.tokens)
                .arg(owner)
                .arg(&rw.to_writers)
                .arg("1")
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(done, 1);
        }
        let w = write("w1", 3000).await;
        assert_eq!(w[0], 1);
        assert!(w[1] > r1[1]);
        assert_eq!(write("w1", 3000).await, w, "a writer's re-attempt returns the same grant");
        let claims: i64 = redis::cmd("EXISTS").arg(&rw.waiting).query_async(&mut c).await.unwrap();
        assert_eq!(claims, 0, "the granted writer's claim is gone");
        let not_ours: i64 = RW_WRITE_RELEASE
            .key(&rw.writer)
            .key(&rw.waiting)
            .arg("w2")
            .arg(&rw.to_readers)
            .arg(&rw.to_writers)
            .invoke_async(&mut c)
            .await
            .unwrap();
        assert_eq!(not_ours, 0);

        // Semaphore: permits must agree while held; an empty semaphore starts afresh.
        let sk = SemKeys::new("t", &LockName::new("s").unwrap());
        let permit = |owner: &'static str, n: u32| {
            let mut c = conn.clone();
            let k = SemKeys::new("t", &LockName::new("s").unwrap());
            async move {
                let r: Vec<i64> = SEM_ACQUIRE
                    .key(&k.holders)
                    .key(&k.tokens)
                    .key(&k.permits)
                    .key(&k.fence)
                    .arg(owner)
                    .arg(5000)
                    .arg(n)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r
            }
        };
        let p1 = permit("p1", 1).await;
        assert_eq!(p1[0], 1);
        assert_eq!(permit("p1", 1).await, p1, "a re-attempt returns the same grant");
        assert_eq!(permit("p2", 1).await[0], 0);
        assert_eq!(permit("p2", 2).await, vec![-1, 1], "in use with 1 permit");
        let done: i64 = ZSET_RELEASE
            .key(&sk.holders)
            .key(&sk.tokens)
            .key(&sk.permits)
            .arg("p1")
            .arg(&sk.channel)
            .arg("0")
            .invoke_async(&mut c)
            .await
            .unwrap();
        assert_eq!(done, 1);
        let p2 = permit("p2", 2).await;
        assert_eq!(p2[0], 1, "an empty semaphore takes a new number of permits");
        assert!(p2[1] > p1[1]);

        // Redlock: an undo of an earlier attempt leaves a later attempt's grant alone.
        let r = Keys::new("t", &LockName::new("r").unwrap());
        for attempt in ["a1", "a2"] {
            let g: Vec<i64> = REDLOCK_ACQUIRE
                .key(&r.lock)
                .key(&r.fence)
                .arg("o1")
                .arg(5000)
                .arg(attempt)
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(g[0], 1);
        }
        let stale: i64 =
            REDLOCK_ABANDON.key(&r.lock).arg("o1").arg("a1").arg(&r.channel).invoke_async(&mut c).await.unwrap();
        assert_eq!(stale, 0, "a stale undo must not free a later attempt's grant");
        let undone: i64 =
            REDLOCK_ABANDON.key(&r.lock).arg("o1").arg("a2").arg(&r.channel).invoke_async(&mut c).await.unwrap();
        assert_eq!(undone, 1);

        // Set-if-greater.
        let big = "9000000000000001";
        let v: i64 = REDLOCK_FENCE.key(&r.fence).arg(big).invoke_async(&mut c).await.unwrap();
        assert_eq!(v.to_string(), big);
        let v: i64 = REDLOCK_FENCE.key(&r.fence).arg("5").invoke_async(&mut c).await.unwrap();
        assert_eq!(v.to_string(), big, "a lower token never overwrites");
        let g: Vec<i64> =
            REDLOCK_ACQUIRE.key(&r.lock).key(&r.fence).arg("o3").arg(5000).arg("a").invoke_async(&mut c).await.unwrap();
        assert_eq!(g[1].to_string(), big, "the floor is the stored counter when it is ahead of the clock");
    }
}
