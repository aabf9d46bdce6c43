//! The exclusive lock's scripts on a single instance (acquire, renew, the hand-off of a release
//! or an abandon, inspect, the operator's release), each with its typed call: the keys and
//! arguments in the order the Lua reads them, written once, here.

use std::sync::LazyLock;

use redis::Script;

use super::keys::Keys;
use super::queue::{token_lua, wake_lua};
use super::waiters::waiters_lua;
use crate::boot::quiet_lua;

/// Single instance acquire. KEYS: lock, fence, boot marker, and the queue's keys (optional:
/// without them there is no queue): waiters, waiter ends, waiter entries ([`super::waiters`]).
/// ARGV: owner, ttl ms, quiet ms, holder id (`''`: none), metadata (`'+'` followed by it; `''`:
/// none), fence expiry ms (`'0'`: none), registration ms (`'0'`: a single try, which does not
/// queue), channel, reserve ms, the caller's wake channel (`''`: woken on `channel`;
/// [`super::queue`]), grant terms (`'<ttl ms>'`: a release may grant this waiter the lock
/// provisionally, and this script, finding the lock its own, claims it: [`super::queue`],
/// `crate::handoff`; `''`: none), the most waiters the name may have. A grant stores holder and
/// metadata in the lease hash as `h` and `m` (docs/contract.md §5.6), so they expire with it,
/// and lets the fence key expire after the given time (`idle_gc_after`, §5.7): tokens are
/// floored by the server clock, so none goes back without it. A free lock goes only to the
/// queue's head or, with an empty queue, to anyone ([`super::queue`]). With a queue, a grant
/// publishes `+` on the channel (for election observers; no waiter acts on it). A lease that
/// someone is queued behind carries `q` (set by a registration while it is held and by a grant
/// that leaves others queued), so that its release reads the queue only then. The calls of each
/// path, and why no fewer: the crate docs, "The free path".
/// Returns `{1, token}` when granted (or already ours: the stored token, lease refreshed to
/// `ttl`, which is also how a waiter claims a grant in the release: the branch after the free path),
/// `{0, ms}` when someone else holds it (ms: its PTTL) or a queued waiter is ahead (ms: until the
/// head's reservation ends), `{2, ms}` when the server is in its quiet period after losing its
/// state (ms: the quiet time left; see `crate::boot`), and `{3, cap}` when a waiting attempt
/// would be the name's waiter number `cap + 1` (it is not queued).
const ACQUIRE_SRC: &str = effects_lua!(
    r#"
-- The free path (no lease, nobody queued, the fence there): granted here, before any helper
-- is defined, in seven calls (the crate docs, "The free path"). No lease key and no queue key
-- is exactly free with nobody queued: an ended lease's key is gone (Redis never shows an
-- expired key) and an empty queue has no key. A fence this server still has was written by a
-- grant made after its last loss of state, and the first grant after a loss finds no fence and
-- reads the boot marker: so no lease of this name can have been forgotten since, and the marker
-- is read only when the fence is missing.
local t = nil
if redis.call('EXISTS', KEYS[1], KEYS[4] or KEYS[1]) == 0 then
  local fence = redis.call('GET', KEYS[2])
  if fence then
    t = redis.call('TIME')
    local token = tonumber(fence) + 1
    local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if token < floor then token = floor end
    local s = string.format('%d', token)
    redis.call('SET', KEYS[2], s)
    redis.call('HSET', KEYS[1], 'o', ARGV[1], 'f', s)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'h', ARGV[4]) end
    if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'm', ARGV[5]) end
    if ARGV[6] ~= '0' then redis.call('PEXPIRE', KEYS[2], ARGV[6]) end
    -- The holder changed: observers of other processes (crate::pubsub) hear `+`; waiters ignore it.
    if KEYS[4] then redis.call('PUBLISH', ARGV[8], '+') end
    return {1, token}
  end
end
local holder = redis.call('HGET', KEYS[1], 'o')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'f'))}
end
t = t or redis.call('TIME')
local queued = KEYS[4] ~= nil and redis.call('ZCARD', KEYS[4]) > 0
"#,
    quiet_lua!(),
    token_lua!(),
    wake_lua!(),
    waiters_lua!(),
    r#"
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local Q = nil
if KEYS[4] then Q = {order = KEYS[4], ends = KEYS[5], data = KEYS[6]} end
local function grant()
  if Q then redis.call('PUBLISH', ARGV[8], '+') end
  local token = grant_lease(KEYS[1], KEYS[2], ARGV[1], ARGV[2], t)
  -- Others still queued: the release must look at the queue (`q`, below).
  if queued and redis.call('ZCARD', Q.order) > 0 then redis.call('HSET', KEYS[1], 'q', '1') end
  if ARGV[4] and ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'h', ARGV[4]) end
  if ARGV[5] and ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'm', ARGV[5]) end
  if ARGV[6] and tonumber(ARGV[6]) > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[6]) end
  return {1, token}
end
local reg = tonumber(ARGV[7] or '0') or 0
local cap = tonumber(ARGV[12] or '') or math.huge
if queued then wq_purge(Q, now) end
-- Refused: register (or push the registration forward, as this attempt) when waiting.
local function busy(ms)
  if Q and reg > 0 then
    local me = entry_of(ARGV[1], ARGV[10], ARGV[11])
    if not wq_register(Q, ARGV[1], me, now + reg, now, cap) then return {3, cap} end
    -- The lease says someone queued behind it, so that its release looks at the queue.
    if holder then redis.call('HSET', KEYS[1], 'q', '1') end
  end
  return {0, ms}
end
if holder then return busy(redis.call('PTTL', KEYS[1])) end
local quiet = quiet_left(KEYS[3], ARGV[3], now)
if quiet > 0 then
  -- `{2, ms}`: refused for the quiet period, not for a holder (the caller says so).
  local r = busy(quiet)
  if r[1] == 0 then r[1] = 2 end
  return r
end
local head, ends, entry = nil, nil, nil
if queued then head, ends, entry = wq_head(Q, now) end
if head and head ~= ARGV[1] then
  ends = wq_reserve(Q, head, ends, entry, now, tonumber(ARGV[9]), ARGV[8], false)
  return busy(math.max(1, ends - now))
end
if head then wq_drop(Q, head) end
return grant()
"#
);
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SRC));

script_call! {
    /// A call of `ACQUIRE_SRC`, always with the queue key: `{1, token}`, `{0, ms}` (held), or
    /// `{2, ms}` (nobody holds it, but the restart quiet period lasts `ms` more).
    Acquire -> Vec<i64> = ACQUIRE;
    {
        /// The lock's keys: lock, fence, the queue's three and channel.
        keys: &'a Keys,
        /// The owner's id.
        owner: &'a str,
        /// The lease's ttl in ms.
        ttl_ms: u64,
        /// The restart quiet period in ms (`crate::boot`).
        quiet_ms: u64,
        /// The holder id to store, `""`: none.
        holder: &'a str,
        /// The metadata to store, `+` followed by it; `""`: none.
        metadata: &'a str,
        /// After how long (ms) the fence key may expire, 0: never.
        fence_ms: u64,
        /// How long a refused attempt's place in the queue lasts (ms), 0: a single try, no place.
        registration_ms: u64,
        /// How long the queue's head has to take a lock it finds free (ms).
        reserve_ms: u64,
        /// The caller's wake channel, `""`: woken on the name's channel.
        wake: &'a str,
        /// Grant terms, `"<ttl ms>"`: a release may grant this waiter the lock; `""`: none.
        grant: &'a str,
        /// The most waiters the name may have (`RedisOptions::max_waiters`).
        max_waiters: u32,
    }
    marker marker;
    keys [&keys.lock, &keys.fence, marker, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries]
    args [
        owner, ttl_ms, quiet_ms, holder, metadata, fence_ms, registration_ms, &keys.channel, reserve_ms, wake, grant,
        max_waiters,
    ]
}

/// Owner-checked renew. KEYS: lock. ARGV: owner, ttl ms. Returns 1 renewed, 0 not ours.
const RENEW_SRC: &str = r#"
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_SRC));

script_call! {
    /// A call of `RENEW_SRC`, also the writer's renewal of a read-write lock: 1 renewed, 0
    /// not ours.
    Renew -> i64 = RENEW;
    {
        /// The lease hash (`Keys::lock`, `RwKeys::writer`).
        lock: &'a str,
        /// The owner's id.
        owner: &'a str,
        /// The new ttl in ms.
        ttl_ms: u64,
    }
    keys [lock]
    args [owner, ttl_ms]
}

/// Owner-checked release that hands off. KEYS: lock, and (single instance) fence and the
/// queue's three keys ([`super::waiters`]). ARGV: owner, channel, reserve ms, (unused), claim
/// window ms. With a queue, its head is granted the lock provisionally (when its entry takes
/// grants, [`super::queue`]) or reserved and woken alone, and an empty queue publishes `-`,
/// which wakes no waiter (every waiter registers before it waits), only election observers;
/// without one `released` wakes one waiter per client. A lease without `q` had nobody queued
/// behind it: its release publishes `-` without reading the queue. Returns 1 released, 0 not
/// ours.
const RELEASE_SRC: &str = effects_lua!(
    r#"
local lease = redis.call('HMGET', KEYS[1], 'o', 'q')
if lease[1] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if not KEYS[3] then
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
-- Nobody queued behind this lease (no `q`: every registration while it was held set it, and a
-- grant with others still queued too), the common case: `-` for the observers, without reading
-- the queue or defining its helpers.
if not lease[2] then
  redis.call('PUBLISH', ARGV[2], '-')
  return 1
end
"#,
    wake_lua!(),
    token_lua!(),
    waiters_lua!(),
    r#"
local Q = {order = KEYS[3], ends = KEYS[4], data = KEYS[5]}
freed(Q, tonumber(ARGV[3]), ARGV[2], KEYS[1], KEYS[2], tonumber(ARGV[5]))
return 1
"#
);
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SRC));

/// A wait that ended without a grant leaves the queue. KEYS: as the release's. ARGV: owner,
/// channel, reserve ms, the caller's wake channel, claim window ms. A lease the owner holds is a
/// release's grant it never claimed: it is released and handed on like a release. When it was
/// the head and the lock is free, the next head is reserved and woken. Returns 1.
const ABANDON_SRC: &str = effects_lua!(
    wake_lua!(),
    token_lua!(),
    waiters_lua!(),
    r#"
local Q = {order = KEYS[3], ends = KEYS[4], data = KEYS[5]}
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  freed(Q, tonumber(ARGV[3]), ARGV[2], KEYS[1], KEYS[2], tonumber(ARGV[5]))
end
if redis.call('ZCARD', Q.order) == 0 then return 1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local was_head = wq_head(Q, now) == ARGV[1]
wq_drop(Q, ARGV[1])
if was_head and not redis.call('HGET', KEYS[1], 'o') then
  local head, ends, entry = wq_head(Q, now)
  if head then wq_reserve(Q, head, ends, entry, now, tonumber(ARGV[3]), ARGV[2], true) end
end
return 1
"#
);
static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(ABANDON_SRC));

/// Which script ends a hold or a wait and hands the lock on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOffScript {
    /// `RELEASE_SRC`.
    Release,
    /// `ABANDON_SRC`.
    Abandon,
}

script_call! {
    /// A call of `RELEASE_SRC` or `ABANDON_SRC`, which share their keys and arguments: 1
    /// released (abandon: always 1), 0 not ours.
    HandOff -> i64 = match script {
        HandOffScript::Release => &*RELEASE,
        HandOffScript::Abandon => &*ABANDON,
    };
    {
        /// Release or abandon.
        script: HandOffScript,
        /// The lock's keys: lock, fence (a grant to the head issues a token), the queue's three
        /// and channel.
        keys: &'a Keys,
        /// The owner's id.
        owner: &'a str,
        /// How long the woken head has to come (ms).
        reserve_ms: u64,
        /// The caller's wake channel (only abandon reads it), `""`: none.
        wake: &'a str,
        /// The claim window of a grant to the head in ms (`crate::handoff::CLAIM_MS`).
        claim_ms: u64,
    }
    keys [&keys.lock, &keys.fence, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries]
    args [owner, &keys.channel, reserve_ms, wake, claim_ms]
}

/// Read one lease (docs/contract.md §5.6). KEYS: lock. Returns `{}` when nobody holds it, else
/// `{token, pttl, holder, metadata}` as strings, holder and metadata `'+'`-prefixed when present
/// and `''` when not.
const INSPECT_SRC: &str = r#"
-- Each field alone: an absent one reads as false.
if not redis.call('HGET', KEYS[1], 'o') then return {} end
local f = redis.call('HGET', KEYS[1], 'f') or '0'
local h = redis.call('HGET', KEYS[1], 'h')
if h then h = '+' .. h else h = '' end
local m = redis.call('HGET', KEYS[1], 'm') or ''
return {f, tostring(redis.call('PTTL', KEYS[1])), h, m}
"#;
static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT_SRC));

script_call! {
    /// A call of `INSPECT_SRC`: `{}` or `{token, pttl, holder, metadata}`.
    Inspect -> Vec<String> = INSPECT;
    {
        /// The lock's keys (the lease hash).
        keys: &'a Keys,
    }
    keys [&keys.lock]
    args []
}

/// An operator's release (docs/contract.md §5.6), whoever the owner: deletes the lease hash but
/// not the fence counter, so the next grant's token is higher, and hands the lock to the queue's
/// head like a release. KEYS: lock, the queue's three keys. ARGV: channel, reserve ms. Returns
/// `{fence}` of the freed lease, `{}` when the lock was free.
const FORCE_RELEASE_SRC: &str = effects_lua!(
    wake_lua!(),
    token_lua!(),
    waiters_lua!(),
    r#"
if not redis.call('HGET', KEYS[1], 'o') then return {} end
local f = redis.call('HGET', KEYS[1], 'f') or '0'
redis.call('DEL', KEYS[1])
freed({order = KEYS[2], ends = KEYS[3], data = KEYS[4]}, tonumber(ARGV[2]), ARGV[1])
return {f}
"#
);
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(FORCE_RELEASE_SRC));

script_call! {
    /// A call of `FORCE_RELEASE_SRC`: `{fence}` of the freed lease, `{}` when the lock was free.
    ForceRelease -> Vec<String> = FORCE_RELEASE;
    {
        /// The lock's keys: lock, the queue's three and channel.
        keys: &'a Keys,
        /// How long the woken head has to come (ms).
        reserve_ms: u64,
    }
    keys [&keys.lock, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries]
    args [&keys.channel, reserve_ms]
}

/// The sources of this file, loaded on every new connection.
pub(super) const SOURCES: [&str; 6] =
    [ACQUIRE_SRC, RENEW_SRC, RELEASE_SRC, ABANDON_SRC, INSPECT_SRC, FORCE_RELEASE_SRC];
