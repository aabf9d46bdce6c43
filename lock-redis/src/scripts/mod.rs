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
use redis::{Script, ScriptInvocation};

use crate::boot::quiet_lua;
use queue::{queue_lua, token_lua, wake_lua};

/// Lua that replicates its effects rather than itself (`redis.replicate_commands`; always so
/// from Redis 5 on): a script that reads `TIME` may not be replayed on a replica. The parts
/// follow in order.
macro_rules! effects_lua {
    ($($part:tt)*) => {
        concat!("if redis.replicate_commands then pcall(redis.replicate_commands) end\n", $($part)*)
    };
}

/// Declares the keys of one key space: a struct of `String`s, each `<prefix>:{<escaped
/// name>}<space>:<suffix>`, so every key of one lock shares the hash tag (one Cluster slot).
/// `escaped()` is injective and never contains braces, so the tag is exactly the name.
macro_rules! key_space {
    ($(#[$doc:meta])* $keys:ident $space:literal { $($(#[$fdoc:meta])* $field:ident: $suffix:literal,)* }) => {
        $(#[$doc])*
        pub(crate) struct $keys {
            $($(#[$fdoc])* pub(crate) $field: String,)*
        }

        impl $keys {
            pub(crate) fn new(prefix: &str, name: &LockName) -> $keys {
                let tag = format!("{prefix}:{{{}}}{}", name.escaped(), $space);
                $keys { $($field: format!("{tag}:{}", $suffix),)* }
            }
        }
    };
}

key_space! {
    /// The keys and channel of one lock.
    Keys "" {
        /// Hash `{o: owner, f: fence}` with a `PX` expiry: the lease.
        lock: "lock",
        /// Integer, no expiry: the highest token issued.
        fence: "fence",
        /// Redlock: the attempt id that stored `fence`, so that only that attempt counts an equal
        /// counter as its own store.
        fence_by: "fence-by",
        /// Pub/sub channel that a release publishes to.
        channel: "released",
        /// String: the owners waiting, in arrival order (single instance; see [`queue`]).
        queue: "queue",
        /// String: the owners waiting, in ticket order (one Redlock master; see [`redlock`]).
        redlock_queue: "rl-queue",
    }
}

impl Keys {
    /// A call of a script that may hand the lock to the queue's head (release, abandon), ready
    /// to invoke: KEYS lock, queue, fence (a grant to the head issues a token); ARGV owner,
    /// channel, reserve ms, the caller's wake channel (`""`: none; only abandon reads it), the
    /// claim window of a grant to the head in ms ([`crate::handoff::CLAIM_MS`]).
    pub(crate) fn hand_off<'a>(
        &self,
        script: &'a Script,
        owner: &str,
        reserve_ms: u64,
        wake_channel: &str,
    ) -> ScriptInvocation<'a> {
        let mut call = script.prepare_invoke();
        call.key(&self.lock).key(&self.queue).key(&self.fence);
        call.arg(owner).arg(&self.channel).arg(reserve_ms).arg(wake_channel).arg(crate::handoff::CLAIM_MS);
        call
    }
}

/// Single instance acquire. KEYS: lock, fence, boot marker, queue (optional: without it there
/// is no queue). ARGV: owner, ttl ms, quiet ms, holder id (`''`: none), metadata (`'+'`
/// followed by it; `''`: none), fence expiry ms (`'0'`: none), registration ms (`'0'`: a single
/// try, which does not queue), channel, reserve ms, the caller's wake channel (optional; `''`
/// or absent: woken on `channel`; [`queue`]), grant terms (optional; `'<ttl ms>'`: a release
/// may grant this waiter the lock provisionally, and this script, finding the lock its own,
/// claims it: [`queue`], `crate::handoff`). A grant stores holder and metadata in the
/// lease hash as `h` and `m` (docs/contract.md §5.6), so they expire with it, and lets the fence
/// key expire after the given time (`idle_gc_after`, §5.7): tokens are floored by the server
/// clock, so none goes back without it. A free lock goes only to the queue's head or, with an
/// empty queue, to anyone ([`queue`]). With a queue key, a grant publishes `+` on the channel
/// (for election observers; no waiter acts on it).
/// Returns `{1, token}` when granted (or already ours: the stored token, lease refreshed to
/// `ttl`, which is also how a waiter claims a grant in the release: the first branch, kept short),
/// `{0, ms}` when someone else holds it (ms: its PTTL), a queued waiter is ahead (ms: until the
/// head's reservation ends) or the server is in its quiet period after losing its state (ms: the
/// quiet time left; see `crate::boot`).
const ACQUIRE_SRC: &str = effects_lua!(
    quiet_lua!(),
    token_lua!(),
    r#"
local holder = redis.call('HGET', KEYS[1], 'o')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'f'))}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local qk = KEYS[4]
local qs = false
if qk then qs = redis.call('GET', qk) end
local function grant()
  -- The holder changed: observers of other processes (crate::pubsub) hear `+`; waiters ignore it.
  if qk then redis.call('PUBLISH', ARGV[8], '+') end
  local token = grant_token(KEYS[2], t)
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'f', string.format('%d', token))
  if ARGV[4] and ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'h', ARGV[4]) end
  if ARGV[5] and ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'm', ARGV[5]) end
  if ARGV[6] and tonumber(ARGV[6]) > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[6]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
-- The common case, free with nobody queued, is granted before the queue's helpers are even
-- defined: they are most of this script's cost (issue 11's profile).
local quiet = -1
if not holder and not qs then
  quiet = quiet_left(KEYS[3], ARGV[3], now)
  if quiet == 0 then return grant() end
end
"#,
    wake_lua!(),
    queue_lua!(),
    r#"
local reg = tonumber(ARGV[7] or '0') or 0
local me = entry_of(ARGV[1], ARGV[10], ARGV[11])
local q, had = {}, false
if qk then q, had = queue_load(qk, now, qs) end
-- Refused: register (or push the registration forward, as this attempt) when waiting, and
-- keep the queue. Entries are the owner's whatever their attempt number.
local function busy(ms)
  if qk and reg > 0 then
    local found = false
    for _, x in ipairs(q) do
      if entry_parts(x[1]) == ARGV[1] then
        x[1], x[2] = me, now + reg
        found = true
      end
    end
    if not found then q[#q + 1] = {me, now + reg} end
  end
  if qk then queue_save(qk, q, now, had) end
  return {0, ms}
end
if holder then return busy(redis.call('PTTL', KEYS[1])) end
if quiet < 0 then quiet = quiet_left(KEYS[3], ARGV[3], now) end
if quiet > 0 then return busy(quiet) end
local head = q[1]
if head and entry_parts(head[1]) ~= ARGV[1] then
  reserve_head(q, now, tonumber(ARGV[9]), ARGV[8], false)
  return busy(math.max(1, head[2] - now))
end
if head then table.remove(q, 1) end
if qk then queue_save(qk, q, now, had) end
return grant()
"#
);
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

/// Owner-checked release that hands off. KEYS: lock, and (single instance) queue and fence.
/// ARGV: owner, channel, reserve ms, (unused), claim window ms. With a queue, its head is granted
/// the lock provisionally (when its entry takes grants, [`queue`]) or reserved and woken alone, and an empty queue publishes `-`, which
/// wakes no waiter (every waiter registers before it waits), only election observers; without
/// one (Redlock) `released` wakes one waiter per client. Returns 1 released, 0 not ours.
const RELEASE_SRC: &str = effects_lua!(
    r#"
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if not KEYS[2] then
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
-- Nobody queued, the common case: `-` for the observers, without defining the queue's helpers.
local s = redis.call('GET', KEYS[2])
if not s then
  redis.call('PUBLISH', ARGV[2], '-')
  return 1
end
"#,
    wake_lua!(),
    token_lua!(),
    queue_lua!(),
    r#"
freed(KEYS[2], tonumber(ARGV[3]), ARGV[2], KEYS[1], KEYS[3], s, tonumber(ARGV[5]))
return 1
"#
);
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SRC));

/// A wait that ended without a grant leaves the queue. KEYS: lock, queue, fence. ARGV: owner,
/// channel, reserve ms, the caller's wake channel, claim window ms. A lease the owner holds is
/// a release's grant it never claimed: it is released and handed on like a release. When it was the head and the lock is free, the next
/// head is reserved and woken. Returns 1.
const ABANDON_SRC: &str = effects_lua!(
    wake_lua!(),
    token_lua!(),
    queue_lua!(),
    r#"
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  freed(KEYS[2], tonumber(ARGV[3]), ARGV[2], KEYS[1], KEYS[3], nil, tonumber(ARGV[5]))
end
local now = queue_now()
local q, had = queue_load(KEYS[2], now)
local was_head = q[1] ~= nil and entry_parts(q[1][1]) == ARGV[1]
for i, x in ipairs(q) do
  if entry_parts(x[1]) == ARGV[1] then
    table.remove(q, i)
    break
  end
end
if was_head and not redis.call('HGET', KEYS[1], 'o') then
  reserve_head(q, now, tonumber(ARGV[3]), ARGV[2], true)
end
queue_save(KEYS[2], q, now, had)
return 1
"#
);
pub(crate) static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(ABANDON_SRC));

/// Redlock, per master: store a token if it is greater (set-if-greater). KEYS: fence, fence-by.
/// ARGV: token (decimal string), attempt id. Returns `{1, token}` when this attempt stored it
/// (now, or on an earlier delivery of the same call), `{0, counter}` otherwise. A counter that
/// already *equals* the token was stored by another grant: that token is taken, so counting it
/// as stored would hand out the same token twice.
const REDLOCK_FENCE_SRC: &str = r#"
local want = tonumber(ARGV[1])
local have = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if want > have then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], ARGV[2])
  return {1, want}
end
if want == have and redis.call('GET', KEYS[2]) == ARGV[2] then
  return {1, want}
end
return {0, have}
"#;
pub(crate) static REDLOCK_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(REDLOCK_FENCE_SRC));

/// Read one lease (docs/contract.md §5.6). KEYS: lock. Returns `{}` when nobody holds it, else
/// `{token, pttl, holder, metadata}` as strings, holder and metadata `'+'`-prefixed when present
/// and `''` when not.
const INSPECT_SRC: &str = r#"
-- HGET, not HMGET: the commands the ACL check already asks for (crate::acl).
if not redis.call('HGET', KEYS[1], 'o') then return {} end
local f = redis.call('HGET', KEYS[1], 'f') or '0'
local h = redis.call('HGET', KEYS[1], 'h')
if h then h = '+' .. h else h = '' end
local m = redis.call('HGET', KEYS[1], 'm') or ''
return {f, tostring(redis.call('PTTL', KEYS[1])), h, m}
"#;
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT_SRC));

/// An operator's release (docs/contract.md §5.6), whoever the owner: deletes the lease hash but
/// not the fence counter, so the next grant's token is higher, and hands the lock to the queue's
/// head like a release. KEYS: lock, queue. ARGV: channel, reserve ms. Returns `{fence}` of the freed lease, `{}` when the lock was free.
const FORCE_RELEASE_SRC: &str = effects_lua!(
    wake_lua!(),
    token_lua!(),
    queue_lua!(),
    r#"
if not redis.call('HGET', KEYS[1], 'o') then return {} end
local f = redis.call('HGET', KEYS[1], 'f') or '0'
redis.call('DEL', KEYS[1])
freed(KEYS[2], tonumber(ARGV[2]), ARGV[1])
return {f}
"#
);
pub(crate) static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(FORCE_RELEASE_SRC));

/// Every script's source, loaded on each new connection (one pipelined round trip) so the
/// first call by SHA does not pay a `NOSCRIPT` round trip.
pub(crate) const ALL_SOURCES: [&str; 16] = [
    ACQUIRE_SRC,
    RENEW_SRC,
    RELEASE_SRC,
    ABANDON_SRC,
    REDLOCK_ACQUIRE_SRC,
    REDLOCK_FENCE_SRC,
    REDLOCK_ABANDON_SRC,
    RW_READ_SRC,
    RW_WRITE_SRC,
    RW_WRITE_RELEASE_SRC,
    SEM_ACQUIRE_SRC,
    ZSET_RENEW_SRC,
    RW_READ_RELEASE_SRC,
    SEM_RELEASE_SRC,
    INSPECT_SRC,
    FORCE_RELEASE_SRC,
];

mod kinds;
mod kinds_queue;
pub(crate) mod queue;
pub(crate) mod redlock;
pub(crate) use kinds::*;
pub(crate) use redlock::*;

#[cfg(test)]
mod tests;
