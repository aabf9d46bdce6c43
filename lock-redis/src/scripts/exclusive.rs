//! The exclusive lock's scripts on a single instance (acquire, renew, the hand-off of a release
//! or an abandon, inspect, the operator's release), each with its typed call: the keys and
//! arguments in the order the Lua reads them, written once, here.

use std::sync::LazyLock;

use redis::Script;

use super::keys::Keys;
use super::lease::lease_hash_lua;
use super::queue::wake_lua;
use super::waiters::waiters_lua;
use crate::boot::quiet_lua;

/// The free path and the branch of a lease already the caller's, first in both acquire scripts
/// (`TRY_SRC`, `ACQUIRE_SRC`), which share their first KEYS and ARGV: the name's hash; owner,
/// ttl ms, holder id (`''`: none), metadata (`'+'` followed by it; `''`: none), the hash's
/// expiry ms (`'0'`: none), channel. Leaves `l` (the hash's fields), `t` (`TIME`), `now` (ms)
/// and `live` defined for what follows. Lua 5.1 turns a numeric string into a number in
/// arithmetic, so no `tonumber` is called there, and the usual grant (no holder id, no
/// metadata) writes its fields without building a table: each is a measurable share of a
/// script this short (BENCHMARKS.md, "Redis free path").
macro_rules! free_path_lua {
    () => {
        r#"
-- The free path (no live lease, nobody queued, the counter there): granted here, before any
-- helper is defined, in three calls (the crate docs, "The free path"). No `q` on a hash with
-- `f` is exactly nobody queued (super::lease). A counter this server still has was written by a
-- grant made after its last loss of state, and the first grant after a loss finds none and reads
-- the boot marker: so no lease of this name can have been forgotten since, and the marker is
-- read only when the counter is missing.
local l = redis.call('HMGET', KEYS[1], 'o', 'e', 'f', 'q', 'h', 'm', 'w')
local t = redis.call('TIME')
local now = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
local live = l[1] and (l[2] or 0) + 0 >= now
if l[3] and not (live or l[4]) then
  local token = l[3] + 1
  local floor = t[1] * 1000000 + t[2]
  if token < floor then token = floor end
  local observed = l[7] and l[7] + 0 >= now
  -- An ended lease's holder id and metadata are not the new one's; a lapsed observer mark goes,
  -- so that releases stop publishing for it.
  if l[5] or l[6] or (l[7] and not observed) then redis.call('HDEL', KEYS[1], 'h', 'm', 'w') end
  local e, f = string.format('%d', now + ARGV[2]), string.format('%d', token)
  if ARGV[3] == '' and ARGV[4] == '' then
    redis.call('HSET', KEYS[1], 'o', ARGV[1], 'e', e, 'f', f)
  else
    local set = {'o', ARGV[1], 'e', e, 'f', f}
    if ARGV[3] ~= '' then set[7], set[8] = 'h', ARGV[3] end
    if ARGV[4] ~= '' then set[#set + 1], set[#set + 2] = 'm', ARGV[4] end
    redis.call('HSET', KEYS[1], unpack(set))
  end
  if ARGV[5] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
  -- The holder changed: observers of other processes (crate::pubsub) hear `+`, if there are any;
  -- waiters ignore it.
  if observed then redis.call('PUBLISH', ARGV[6], '+') end
  return {1, token}
end
if live and l[1] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'e', string.format('%d', now + ARGV[2]))
  if ARGV[5] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
  return {1, tonumber(l[3])}
end
"#
    };
}

/// A single try's lean first script: the free path and a lease already the caller's
/// (`free_path_lua!`), and a lease someone else holds with nobody queued, answered `{0, ms}` as
/// `ACQUIRE_SRC` answers a try there. Anything else (a name without a counter, someone queued,
/// the quiet period) is `{4}`: the caller runs `ACQUIRE_SRC`, one more round trip, only then.
/// KEYS and ARGV: `free_path_lua!`'s, nothing more, because a script's entry costs per key and
/// argument (BENCHMARKS.md, "Redis free path"): the boot marker and the queue's keys are the
/// full script's.
const TRY_SRC: &str = effects_lua!(
    free_path_lua!(),
    r#"
if live and l[3] and not l[4] then return {0, math.max(1, l[2] - now)} end
return {4}
"#
);

script_call! {
    /// A call of `TRY_SRC`: `{1, token}`, `{0, ms}` (held), or `{4}`: run the [`Acquire`].
    Try -> Vec<i64> = script!(TRY_SRC);
    {
        /// The acquire it runs ahead of: `TRY_SRC` takes that call's first key and six arguments.
        acquire: Acquire<'a>,
    }
    keys [&acquire.keys.lock]
    args [acquire.owner, acquire.ttl_ms, acquire.holder, acquire.metadata, acquire.fence_ms, &acquire.keys.channel]
}

/// Single instance acquire. KEYS: the name's hash ([`super::lease`]), boot marker, and the
/// queue's keys: waiters, waiter ends, waiter entries ([`super::waiters`]), blocking delivery
/// marks (`crate::blocking`). ARGV: owner, ttl ms,
/// holder id (`''`: none), metadata (`'+'` followed by it; `''`: none), the hash's expiry ms
/// (`'0'`: none), channel (the first six as `TRY_SRC`'s), quiet ms, registration ms (`'0'`: a
/// single try, which does not queue), reserve ms, the caller's wake channel (`''`: woken on
/// `channel`; [`super::queue`]), grant terms (`'<ttl ms>'`: a release may grant this waiter the
/// lock provisionally, and this script, finding the lock its own, claims it: [`super::queue`],
/// `crate::handoff`; `''`: none), the most waiters the name may have. A grant stores holder and
/// metadata in the hash as `h` and `m` (docs/contract.md §5.6), and lets the hash expire after
/// the given time (`idle_gc_after`, §5.7): tokens are floored by the server clock, so none goes
/// back without it. A free lock goes only to the queue's head or, with an empty queue, to anyone
/// ([`super::queue`]). A grant publishes `+` on the channel (for election observers; no waiter
/// acts on it); on the free path only while the hash says someone observes (`w`,
/// [`super::lease`]). The calls of each path, and why no fewer: the crate docs, "The free path".
/// Returns `{1, token}` when granted (or already ours: the stored token, lease refreshed to
/// `ttl`, which is also how a waiter claims a grant in the release: the branch after the free path),
/// `{0, ms}` when someone else holds it (ms: its lease left) or a queued waiter is ahead (ms: until the
/// head's reservation ends), `{2, ms}` when the server is in its quiet period after losing its
/// state (ms: the quiet time left; see `crate::boot`), and `{3, cap}` when a waiting attempt
/// would be the name's waiter number `cap + 1` (it is not queued).
const ACQUIRE_SRC: &str = effects_lua!(
    free_path_lua!(),
    r#"
local holder = nil
if live then holder = l[1] end
local queued = redis.call('ZCARD', KEYS[3]) > 0
"#,
    quiet_lua!(),
    wake_lua!(),
    lease_hash_lua!(),
    waiters_lua!(),
    r#"
local Q = {order = KEYS[3], ends = KEYS[4], data = KEYS[5], armed = KEYS[6]}
local function grant()
  redis.call('PUBLISH', ARGV[6], '+')
  local token = grant_hash(KEYS[1], ARGV[1], ARGV[2], t, ARGV[5])
  -- Others still queued: the release and the free path must look at the queue (`q`).
  queue_mark(Q, KEYS[1])
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'h', ARGV[3]) end
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'm', ARGV[4]) end
  return {1, token}
end
local reg = tonumber(ARGV[8]) or 0
local cap = tonumber(ARGV[12]) or math.huge
if queued then wq_purge(Q, now) end
-- Refused: register (or push the registration forward, as this attempt) when waiting.
local function busy(ms)
  if reg > 0 then
    local me = entry_of(ARGV[1], ARGV[10], ARGV[11])
    if not wq_register(Q, ARGV[1], me, now + reg, now, cap) then return {3, cap} end
    -- Someone is queued: the free path and the release look at the queue. A hash without the
    -- counter sends every acquire past the free path anyway, and the grant that writes the
    -- counter sets the mark itself.
    if l[3] then redis.call('HSET', KEYS[1], 'q', '1') end
  end
  return {0, ms}
end
if holder then return busy(math.max(1, tonumber(l[2]) - now)) end
local quiet = quiet_left(KEYS[2], ARGV[7], now)
if quiet > 0 then
  -- `{2, ms}`: refused for the quiet period, not for a holder (the caller says so).
  local r = busy(quiet)
  if r[1] == 0 then r[1] = 2 end
  return r
end
local head, ends, entry = nil, nil, nil
if queued then head, ends, entry = wq_head(Q, now) end
if head and head ~= ARGV[1] then
  ends = wq_reserve(Q, head, ends, entry, now, tonumber(ARGV[9]), ARGV[6], false)
  return busy(math.max(1, ends - now))
end
if head then wq_drop(Q, head) end
return grant()
"#
);

script_call! {
    /// A call of `ACQUIRE_SRC`: `{1, token}`, `{0, ms}` (held), `{2, ms}` (nobody holds it, but
    /// the restart quiet period lasts `ms` more) or `{3, cap}` (too many waiters).
    Acquire -> Vec<i64> = script!(ACQUIRE_SRC);
    {
        /// The lock's keys: the name's hash, the queue's three and channel.
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
        /// After how long (ms) the name's hash may expire (`idle_gc_after` past the ttl), 0: never.
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
    keys [&keys.lock, marker, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries, &keys.armed]
    args [
        owner, ttl_ms, holder, metadata, fence_ms, &keys.channel, quiet_ms, registration_ms, reserve_ms, wake, grant,
        max_waiters,
    ]
}

/// Owner-checked renew. KEYS: the lease. ARGV: owner, ttl ms, and how the lease ends: `'px'`, a
/// lease hash with its own `PX` (the read-write lock's writer, a Redlock master's lease), else
/// the name's hash of a single instance exclusive lock ([`super::lease`]), whose lease end moves
/// and which expires after that many ms (`'0'`: never); optionally the token the lease must have
/// (the claim of a pushed grant, [`ClaimPushed`]). Returns 1 renewed, 0 not ours (or its lease
/// ended, or it has another token).
const RENEW_SRC: &str = effects_lua!(
    r#"
local l = redis.call('HMGET', KEYS[1], 'o', 'e', 'f')
if l[1] ~= ARGV[1] then return 0 end
if ARGV[4] and l[3] ~= ARGV[4] then return 0 end
if ARGV[3] == 'px' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(l[2] or '0') < now then return 0 end
redis.call('HSET', KEYS[1], 'e', string.format('%d', now + tonumber(ARGV[2])))
if ARGV[3] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
"#
);

/// How a renewed lease ends (`RENEW_SRC`'s last argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    /// A lease hash with its own `PX` (the read-write lock's writer, a Redlock master's lease).
    Px,
    /// The single instance exclusive lock's name's hash: its lease end, and the hash's expiry
    /// after that many ms (`idle_gc_after` past the ttl), 0: never.
    Hash {
        /// After how long (ms) the name's hash may expire, 0: never.
        fence_ms: u64,
    },
}

impl LeaseEnd {
    fn arg(self) -> String {
        match self {
            LeaseEnd::Px => "px".to_owned(),
            LeaseEnd::Hash { fence_ms } => fence_ms.to_string(),
        }
    }
}

script_call! {
    /// A call of `RENEW_SRC`: 1 renewed, 0 not ours.
    Renew -> i64 = script!(RENEW_SRC);
    {
        /// The lease (`Keys::lock`, `RwKeys::writer`).
        lock: &'a str,
        /// The owner's id.
        owner: &'a str,
        /// The new ttl in ms.
        ttl_ms: u64,
        /// How the lease ends.
        end: LeaseEnd,
    }
    keys [lock]
    args [owner, ttl_ms, end.arg()]
}

script_call! {
    /// The claim of a grant pushed to a waiter (`crate::blocking`): `RENEW_SRC` on the name's hash,
    /// checked against the grant's token as well as the owner, so it never extends another lease
    /// of the owner's and never grants: 1 claimed, 0 not (any more) that grant.
    ClaimPushed -> i64 = script!(RENEW_SRC);
    {
        /// The name's hash (`Keys::lock`).
        lock: &'a str,
        /// The owner's id.
        owner: &'a str,
        /// The new ttl in ms.
        ttl_ms: u64,
        /// After how long (ms) the name's hash may expire, 0: never.
        fence_ms: u64,
        /// The pushed grant's token.
        token: u64,
    }
    keys [lock]
    args [owner, ttl_ms, fence_ms, token]
}

/// Owner-checked release that hands off. KEYS: the name's hash ([`super::lease`]), the
/// queue's three keys ([`super::waiters`]) and the blocking delivery marks (`crate::blocking`). ARGV: owner, channel, reserve ms, (unused), claim
/// window ms. The release ends the lease (`o`, `e`, `h`, `m`) and keeps the counter. The queue's
/// head is granted the lock provisionally (when its entry takes grants, [`super::queue`]) or
/// reserved and woken alone, and an empty queue publishes `-`, which wakes no waiter (every
/// waiter registers before it waits), only election observers. A hash without `q` has nobody
/// queued: its release publishes `-` without reading the queue, and only with an observer mark. Returns 1 released, 0 not ours.
const RELEASE_SRC: &str = effects_lua!(
    r#"
local lease = redis.call('HMGET', KEYS[1], 'o', 'q', 'w')
if lease[1] ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'o', 'e', 'h', 'm')
-- Nobody queued (no `q`: super::lease), the common case: `-` for the observers if anyone
-- observes (`w`; a lapsed mark costs one message until the next free grant drops it), without
-- reading the queue or defining its helpers.
if not lease[2] then
  if lease[3] then redis.call('PUBLISH', ARGV[2], '-') end
  return 1
end
"#,
    wake_lua!(),
    lease_hash_lua!(),
    waiters_lua!(),
    r#"
local Q = {order = KEYS[2], ends = KEYS[3], data = KEYS[4], armed = KEYS[5]}
freed(Q, tonumber(ARGV[3]), ARGV[2], KEYS[1], tonumber(ARGV[5]))
return 1
"#
);

/// A wait that ended without a grant leaves the queue. KEYS: as the release's, and the owner's
/// blocking delivery list (`Keys::pushes`). ARGV: owner,
/// channel, reserve ms, the caller's wake channel, claim window ms. Its entry, blocking delivery
/// mark and list go first; then a lease the owner holds (a release's grant it never claimed, or one that lapsed: the hash keeps
/// an ended lease's owner) is released and handed on like a release, to a head that is never
/// the leaver. When it was the head and the lock is free, the next head is reserved and woken.
/// Returns 1.
const ABANDON_SRC: &str = effects_lua!(
    wake_lua!(),
    lease_hash_lua!(),
    waiters_lua!(),
    r#"
local Q = {order = KEYS[2], ends = KEYS[3], data = KEYS[4], armed = KEYS[5]}
-- A grant pushed to the leaver and not popped goes with its list; popped or not, the lease is
-- the leaver's, released below.
redis.call('DEL', KEYS[6])
local queued = redis.call('ZCARD', Q.order) > 0
local now, was_head = 0, false
if queued then
  now = ms_of(redis.call('TIME'))
  was_head = wq_head(Q, now) == ARGV[1]
  -- Out of the queue before the release below: its hand-on must not grant the leaver.
  wq_drop(Q, ARGV[1])
end
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'o', 'e', 'h', 'm')
  freed(Q, tonumber(ARGV[3]), ARGV[2], KEYS[1], tonumber(ARGV[5]))
end
if not queued then return 1 end
queue_mark(Q, KEYS[1])
if was_head and not live_owner(KEYS[1], now) then
  local head, ends, entry = wq_head(Q, now)
  if head then wq_reserve(Q, head, ends, entry, now, tonumber(ARGV[3]), ARGV[2], true) end
end
return 1
"#
);

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
        HandOffScript::Release => script!(RELEASE_SRC),
        HandOffScript::Abandon => script!(ABANDON_SRC),
    };
    {
        /// Release or abandon.
        script: HandOffScript,
        /// The lock's keys: the name's hash (a grant to the head issues a token), the queue's
        /// three and channel.
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
    // The owner's list only for the abandon, which deletes it: a key costs every release,
    // the free path's included, about 0.2 µs of server work.
    keys [
        &keys.lock,
        &keys.waiters,
        &keys.waiter_ends,
        &keys.waiter_entries,
        &keys.armed,
        (script == HandOffScript::Abandon).then(|| keys.pushes(owner))
    ]
    args [owner, &keys.channel, reserve_ms, wake, claim_ms]
}

/// Read one lease (docs/contract.md §5.6). KEYS: the name's hash. Returns `{}` when nobody
/// holds it, else `{token, ms left, holder, metadata}` as strings, holder and metadata
/// `'+'`-prefixed when present and `''` when not.
const INSPECT_SRC: &str = r#"
local l = redis.call('HMGET', KEYS[1], 'o', 'e', 'f', 'h', 'm')
local t = redis.call('TIME')
local left = tonumber(l[2] or '0') - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if not l[1] or left < 0 then return {} end
local h = ''
if l[4] then h = '+' .. l[4] end
return {l[3] or '0', string.format('%d', left), h, l[5] or ''}
"#;

script_call! {
    /// A call of `INSPECT_SRC`: `{}` or `{token, ms left, holder, metadata}`.
    Inspect -> Vec<String> = script!(INSPECT_SRC);
    {
        /// The lock's keys (the name's hash).
        keys: &'a Keys,
    }
    keys [&keys.lock]
    args []
}

/// An operator's release (docs/contract.md §5.6), whoever the owner: ends the lease but keeps
/// the counter, so the next grant's token is higher, and hands the lock to the queue's head like
/// a release (reserved and woken; never granted in the script). KEYS: the name's hash, the
/// queue's three keys. ARGV: channel, reserve ms. Returns `{token}` of the freed lease, `{}` when
/// the lock was free.
const FORCE_RELEASE_SRC: &str = effects_lua!(
    wake_lua!(),
    lease_hash_lua!(),
    waiters_lua!(),
    r#"
if not live_owner(KEYS[1], ms_of(redis.call('TIME'))) then return {} end
local f = redis.call('HGET', KEYS[1], 'f') or '0'
redis.call('HDEL', KEYS[1], 'o', 'e', 'h', 'm')
freed({order = KEYS[2], ends = KEYS[3], data = KEYS[4]}, tonumber(ARGV[2]), ARGV[1], KEYS[1])
return {f}
"#
);

script_call! {
    /// A call of `FORCE_RELEASE_SRC`: `{fence}` of the freed lease, `{}` when the lock was free.
    ForceRelease -> Vec<String> = script!(FORCE_RELEASE_SRC);
    {
        /// The lock's keys: the name's hash, the queue's three and channel.
        keys: &'a Keys,
        /// How long the woken head has to come (ms).
        reserve_ms: u64,
    }
    keys [&keys.lock, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries]
    args [&keys.channel, reserve_ms]
}

/// An election observer marks the name's hash observed (`w`, [`super::lease`]) until `now +
/// period`, never shortening a mark: the free path publishes its `+`/`-` only then. KEYS: the
/// name's hash. ARGV: period ms. Returns 1.
const OBSERVE_SRC: &str = effects_lua!(
    r#"
local t = redis.call('TIME')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], 'w') or '0') < until_ms then
  redis.call('HSET', KEYS[1], 'w', string.format('%d', until_ms))
end
return 1
"#
);

script_call! {
    /// A call of `OBSERVE_SRC`: 1.
    Observe -> i64 = script!(OBSERVE_SRC);
    {
        /// The name's hash (`Keys::lock`).
        lock: &'a str,
        /// How long the mark lasts (ms).
        period_ms: u64,
    }
    keys [lock]
    args [period_ms]
}

/// Blocking delivery's arm (`crate::blocking`), sent with the `BLPOP` of the owner's list right
/// after it on the waiter's own connection. KEYS: waiter entries, blocking delivery marks, the
/// owner's list (`Keys::pushes`). ARGV: owner, how long the mark lasts (ms: the `BLPOP`'s
/// timeout). A grant pushed before this arm (its `BLPOP` had ended) is drained and answered as
/// the hint `h`: counted from this arm it could be a lapsed lease. An owner that is not queued,
/// or whose entry takes no grants, is answered `x`: no release will push to it. Either answer is
/// pushed onto the list, so the `BLPOP` after the arm returns it at once; otherwise the owner is
/// marked armed until the mark's end and the `BLPOP` waits for a release's push (its token).
/// Returns 1 armed, 0 answered on the list.
pub(crate) const ARM_SRC: &str = effects_lua!(
    wake_lua!(),
    super::queue::arm_lua!(),
    r#"
local function refused()
  local e = redis.call('HGET', KEYS[1], ARGV[1])
  if not e then return true end
  local _, grant, own = entry_parts(e)
  return not (grant and own)
end
return arm(KEYS[3], KEYS[2], ARGV[1], ARGV[2], refused)
"#
);
pub(crate) static ARM: LazyLock<Script> = LazyLock::new(|| Script::new(ARM_SRC));

script_call! {
    /// A call of `ARM_SRC` on its own (the waiter's side sends it pipelined with its `BLPOP`):
    /// 1 armed, 0 answered on the list.
    Arm -> i64 = ARM;
    {
        /// The lock's keys (the waiter entries, the marks).
        keys: &'a Keys,
        /// The waiting owner's id.
        owner: &'a str,
        /// The owner's list (`Keys::pushes`).
        list: &'a str,
        /// How long the mark lasts (ms).
        block_ms: u64,
    }
    keys [&keys.waiter_entries, &keys.armed, list]
    args [owner, block_ms]
}

/// The sources of this file, loaded on every new command connection (the arm runs only on
/// blocking delivery's own connections, which load it themselves).
pub(super) const SOURCES: [&str; 8] =
    [TRY_SRC, ACQUIRE_SRC, RENEW_SRC, RELEASE_SRC, ABANDON_SRC, INSPECT_SRC, FORCE_RELEASE_SRC, OBSERVE_SRC];
