//! The scripts of the read-write lock and the semaphore (single instance).

use std::sync::LazyLock;

use lock_core::LockName;
use redis::Script;

use crate::boot::quiet_lua;

/// Lua shared by the scripts of the read-write lock and the semaphore (prepended to each):
/// the server clock, the TIME-floored fence counter, and sorted sets of holders scored by the
/// server time (ms) at which each holder's lease ends.
macro_rules! kinds_prelude {
    () => {
        effects_lua!(
            quiet_lua!(),
            r#"
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
        )
    };
}

key_space! {
    /// The keys and channels of one read-write lock (a key space of its own: `…:rw:*`).
    RwKeys ":rw" {
        /// Sorted set: reader owner → server time (ms) its lease ends.
        readers: "readers",
        /// Hash: reader owner → its fencing token.
        tokens: "tokens",
        /// Hash `{o: owner, f: token}` with `PX ttl`: the writer.
        writer: "writer",
        /// Sorted set: waiting writer owner → server time (ms) its claim ends. While it is not
        /// empty, new readers are refused (writers are not starved).
        waiting: "waiting",
        /// Integer: the highest token issued for this read-write lock.
        fence: "fence",
        /// Channel: wakes waiting readers (all of them, per client).
        to_readers: "to-readers",
        /// Channel: wakes waiting writers (one per client).
        to_writers: "to-writers",
    }
}

key_space! {
    /// The keys and channel of one semaphore (a key space of its own: `…:sem:*`).
    SemKeys ":sem" {
        /// Sorted set: holder owner → server time (ms) its lease ends.
        holders: "holders",
        /// Hash: holder owner → its fencing token.
        tokens: "tokens",
        /// String: the number of permits every user must agree on (expires with the last holder).
        permits: "permits",
        /// Integer: the highest token issued for this semaphore.
        fence: "fence",
        /// Channel: a release wakes one waiter per client.
        channel: "released",
    }
}

/// Read acquire. KEYS: readers, tokens, writer, waiting, fence, boot marker. ARGV: owner, ttl
/// ms, quiet ms (`{0, ms}` also in the quiet period after the server lost its state).
/// `{1, token}` granted (or already ours: lease refreshed, same token); `{0, ms}` refused
/// because a writer holds (ms = its PTTL) or writers wait (ms = until the first claim ends).
pub(super) const RW_READ_SRC: &str = concat!(
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
local quiet = quiet_left(KEYS[6], ARGV[3], now)
if quiet > 0 then return {0, quiet} end
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

/// Write acquire. KEYS: readers, tokens, writer, waiting, fence, boot marker. ARGV: owner, ttl
/// ms, claim ms, quiet ms (`{0, ms}` also in the quiet period after the server lost its state).
/// `{1, token}` granted (or already ours; its claim is dropped); `{0, ms}` refused: then, unless
/// `claim ms` is 0 (a single try), the writer's claim in `waiting` is (re)set to end in `claim
/// ms`, which holds back new readers; ms is how long the current holders' leases last at most.
pub(super) const RW_WRITE_SRC: &str = concat!(
    kinds_prelude!(),
    r#"
purge(KEYS[1], KEYS[2])
local holder = redis.call('HGET', KEYS[3], 'o')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {1, tonumber(redis.call('HGET', KEYS[3], 'f'))}
end
local quiet = quiet_left(KEYS[6], ARGV[4], now)
if quiet > 0 then return {0, quiet} end
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
pub(super) const RW_WRITE_RELEASE_SRC: &str = concat!(
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

/// Semaphore acquire. KEYS: holders, tokens, permits, fence, boot marker. ARGV: owner, ttl ms,
/// permits, quiet ms (`{0, ms}` also in the quiet period after the server lost its state).
/// `{1, token}` granted (or already ours); `{0, ms}` all permits taken (ms until the first
/// lease ends); `{-1, n}` the semaphore is in use with `n` permits, not `permits`.
pub(super) const SEM_ACQUIRE_SRC: &str = concat!(
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
local quiet = quiet_left(KEYS[5], ARGV[4], now)
if quiet > 0 then return {0, quiet} end
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
pub(super) const ZSET_RENEW_SRC: &str = concat!(
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
pub(super) const ZSET_RELEASE_SRC: &str = concat!(
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
