//! The scripts of the read-write lock and the semaphore (single instance), with their waiter
//! queues ([`super::kinds_queue`]).

use super::keys::{RwKeys, SemKeys};
use super::Terms;

use super::kinds_queue::kinds_queue_lua;
use super::queue::{token_lua, wake_lua};
use super::waiters::sorted_queue_lua;
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
-- Whether `owner` holds a lease in `zset` that has not ended.
local function holds(zset, owner)
  local score = redis.call('ZSCORE', zset, owner)
  return score and tonumber(score) > now
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

/// [`kinds_prelude!`] with the waiter queue's helpers (the sorted-set queue of
/// [`super::waiters`] and the `kq_*` helpers of [`super::kinds_queue`]).
macro_rules! kinds_queued_prelude {
    () => {
        concat!(
            kinds_prelude!(),
            wake_lua!(),
            token_lua!(),
            sorted_queue_lua!(),
            kinds_queue_lua!(),
            zset_grant_lua!(),
            kinds_busy_lua!()
        )
    };
}

/// `kq_busy(Q, member, entry, reg, cap, ms)`, the answer of a refused attempt, `{0, ms}`, after
/// a waiting one (`reg` > 0) registered or pushed its registration forward; `{3, cap}` when it
/// would be the name's waiter number `cap + 1` (not queued); `kq_attempt(Q, kind, owner, wake,
/// reg, cap)`, an acquire's member and its `busy(ms)` (`kq_busy` with its terms);
/// `kq_quiet(busy, marker, quiet_ms)`, the quiet period's answer `{2, ms}` or nil;
/// `kq_turn(Q, member, can, room)`, the caller's place and whether it may be granted;
/// `kq_leave(Q, member)`, the caller holds now (or ends its wait) and leaves the queue;
/// `kq_granted(Q, member, token)`, the answer of an acquire that finds the caller a holder
/// already; `rw_attempt(kind)`, the common start of the read and write acquires, and
/// `kq_released(mine)`, a release's answer.
macro_rules! kinds_busy_lua {
    () => {
        r#"
local function kq_busy(Q, member, entry, reg, cap, ms)
  if not kq_register(Q, member, entry, reg, cap) then return {3, cap} end
  return {0, ms}
end
-- An acquire of `kind` (`r`, `w`, `p`) by `owner` on `Q`, from its arguments (`wake`: its wake
-- channel, `reg`: its registration ms, `cap`: the most waiters, `''` or nil: no cap): its
-- member and `busy(ms)`, its answer when refused (registered as `kq_busy` says).
local function kq_attempt(Q, kind, owner, wake, reg, cap)
  local member, entry = kind .. ':' .. owner, kq_entry(kind, owner, wake)
  reg, cap = tonumber(reg), tonumber(cap or '') or math.huge
  return member, function(ms) return kq_busy(Q, member, entry, reg, cap, ms) end
end
-- While the quiet period after the server lost its state lasts, an acquire is refused with
-- `{2, ms}` (the time left), not `{0, ms}`: nobody holds, and the caller says so. It registers
-- as any refused attempt does (`busy`). Nil once the quiet period is over.
local function kq_quiet(busy, marker, quiet_ms)
  local quiet = quiet_left(marker, quiet_ms, now)
  if quiet <= 0 then return nil end
  local r = busy(quiet)
  if r[1] == 0 then r[1] = 2 end
  return r
end
-- The place of `member` (0: not queued) and whether it may be granted: a queued caller among
-- the first `can` entries, one not queued while fewer than `room` entries wait.
local function kq_turn(Q, member, can, room)
  local i = kq_place(Q, member)
  return i, (i > 0 and i <= can) or (i == 0 and kq_len(Q) < room)
end
-- The caller holds now, or ends its wait: its entry, if queued, leaves the queue; whether it
-- was queued.
local function kq_leave(Q, member)
  if kq_place(Q, member) == 0 then return false end
  wq_drop(Q, member)
  return true
end
-- `{1, token}`: the caller holds already (its lease refreshed), and leaves the queue if queued.
local function kq_granted(Q, member, token)
  kq_leave(Q, member)
  return {1, token}
end
-- The read and write acquires share their KEYS and ARGV (`RW_READ_SRC`): the start of an
-- attempt of `kind` (`r`, `w`), after expired readers are dropped: the queue, the caller's
-- member, its `busy(ms)` (`kq_attempt`) and the reserve ms.
local function rw_attempt(kind)
  purge(KEYS[1], KEYS[2])
  local Q = kq_queue(KEYS[4], KEYS[5], KEYS[6], KEYS[7])
  local member, busy = kq_attempt(Q, kind, ARGV[1], ARGV[6], ARGV[3], ARGV[7])
  return Q, member, busy, tonumber(ARGV[5])
end
-- The answer of a release (also a wait's abandon): 1 it freed the owner's lease, 0 not ours.
local function kq_released(mine)
  if mine then return 1 end
  return 0
end
"#
    };
}

/// The grant of a sorted-set holder (reader, permit), shared by the read and permit acquires,
/// after [`kinds_prelude!`] and `token_lua!()`: `zset_renewed(zset, tokens, owner, ttl,
/// expiring)`, the refresh of a holder that asks again (its token, nil when not a holder), and
/// `zset_grant(zset, tokens, fence, owner, ttl)`, a new holder with the next token.
macro_rules! zset_grant_lua {
    () => {
        r#"
-- Already a holder of `zset` (its token in `tokens`): its lease now ends `ttl` ms from now and
-- the keys `expiring` expire with the longest lease; its token, nil when not a holder.
local function zset_renewed(zset, tokens, owner, ttl, expiring)
  local mine = redis.call('ZSCORE', zset, owner)
  local token = redis.call('HGET', tokens, owner)
  if not (mine and token) then return nil end
  redis.call('ZADD', zset, ms(now + tonumber(ttl)), owner)
  expire_with(zset, expiring)
  return tonumber(token)
end
-- A new holder of `zset`: the next token (stored in `tokens`), its lease ending `ttl` ms from
-- now. The caller gives the keys their expiry (`expire_with`) once it wrote them all.
local function zset_grant(zset, tokens, fence, owner, ttl)
  local token = grant_token(fence, t)
  redis.call('ZADD', zset, ms(now + tonumber(ttl)), owner)
  redis.call('HSET', tokens, owner, string.format('%d', token))
  return token
end
"#
    };
}

/// Read acquire. KEYS: readers, tokens, writer, the queue's four keys (waiters, waiter ends,
/// waiter entries, waiting writers; [`super::kinds_queue`]), fence, boot marker. ARGV: owner,
/// ttl ms, registration ms (`0`: a single try, which does not queue), quiet ms, reserve ms,
/// the caller's wake channel (`''`: none, the caller polls), the most waiters the name may have. `{1, token}` granted (or already ours: lease
/// refreshed, same token); `{0, ms}` refused: a writer holds (ms = its PTTL), it is not this
/// reader's turn in the queue (ms = until the first registration ahead of it or the readers'
/// leases end); `{2, ms}` refused for the quiet period after the server lost its state (the
/// time left; the caller keeps its queue place); `{3, cap}` a new waiter past the cap.
const RW_READ_SRC: &str = concat!(
    kinds_queued_prelude!(),
    r#"
local Q, member, busy, reserve = rw_attempt('r')
local again = zset_renewed(KEYS[1], KEYS[2], ARGV[1], ARGV[2], {KEYS[1], KEYS[2]})
if again then return kq_granted(Q, member, again) end
local quiet = kq_quiet(busy, KEYS[9], ARGV[4])
if quiet then return quiet end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return busy(redis.call('PTTL', KEYS[3]))
end
local can = rw_grantable(Q, false, redis.call('ZCARD', KEYS[1]))
local i, turn = kq_turn(Q, member, can, 1)
if not turn then
  kq_reserve(Q, can, reserve, math.huge)
  -- Re-try when a registration ahead ends (it may have vanished) or the readers' leases do.
  local wait = kq_first_end(Q, ahead(Q, i)) or math.huge
  if redis.call('ZCARD', KEYS[1]) > 0 then wait = math.min(wait, math.max(1, left(KEYS[1], false))) end
  if wait == math.huge then wait = 1 end
  return busy(wait)
end
if i > 0 then
  wq_drop(Q, member)
  can = can - 1
end
local token = zset_grant(KEYS[1], KEYS[2], KEYS[8], ARGV[1], ARGV[2])
expire_with(KEYS[1], {KEYS[1], KEYS[2]})
-- The readers queued behind this one share with it: they are reserved and woken too.
kq_reserve(Q, can, reserve, math.huge)
return {1, token}
"#
);

/// Write acquire. KEYS and ARGV as the read acquire's. `{1, token}` granted (or already ours);
/// `{0, ms}` refused: someone holds (ms: how long the holders' leases last at most), it is not
/// this writer's turn (ms: until the first registration ahead of it ends); `{2, ms}` the quiet
/// period (time left); `{3, cap}` a new waiter past the cap. A refused waiting writer keeps its
/// place in the queue, which holds back every reader arriving after it.
const RW_WRITE_SRC: &str = concat!(
    kinds_queued_prelude!(),
    r#"
local Q, member, busy, reserve = rw_attempt('w')
local holder = redis.call('HGET', KEYS[3], 'o')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return kq_granted(Q, member, tonumber(redis.call('HGET', KEYS[3], 'f')))
end
local quiet = kq_quiet(busy, KEYS[9], ARGV[4])
if quiet then return quiet end
if holder then return busy(redis.call('PTTL', KEYS[3])) end
local readers = redis.call('ZCARD', KEYS[1])
local can = rw_grantable(Q, false, readers)
if readers > 0 then
  -- Readers at the head of the queue may join the readers that hold.
  kq_reserve(Q, can, reserve, math.huge)
  return busy(left(KEYS[1], false))
end
local i, turn = kq_turn(Q, member, can, 1)
if not turn then
  kq_reserve(Q, can, reserve, math.huge)
  return busy(kq_first_end(Q, ahead(Q, i)) or 1)
end
if i > 0 then wq_drop(Q, member) end
local token = grant_lease(KEYS[3], KEYS[8], ARGV[1], ARGV[2], t)
return {1, token}
"#
);

/// Writer release, also the end of a write wait without a grant (abandon). KEYS: readers,
/// tokens, writer, the queue's four keys. ARGV: owner, reserve ms. Frees the writer if it is the owner's and drops the owner's queue entry; then the
/// grantable heads (the next writer, or the run of readers at the head) are reserved and woken.
/// Returns 1 released, 0 not ours.
const RW_WRITE_RELEASE_SRC: &str = concat!(
    kinds_queued_prelude!(),
    r#"
local mine = redis.call('HGET', KEYS[3], 'o') == ARGV[1]
if mine then redis.call('DEL', KEYS[3]) end
local Q = kq_queue(KEYS[4], KEYS[5], KEYS[6], KEYS[7])
if kq_leave(Q, 'w:' .. ARGV[1]) or mine then
  purge(KEYS[1], KEYS[2])
  local can = rw_grantable(Q, redis.call('EXISTS', KEYS[3]) == 1, redis.call('ZCARD', KEYS[1]))
  kq_reserve(Q, can, tonumber(ARGV[2]), mine and 1 or math.huge)
end
return kq_released(mine)
"#
);

/// Reader release, also the end of a read wait without a grant (abandon). KEYS and ARGV as the
/// writer's release. Frees the owner's read lease and drops its queue entry; the last reader
/// out lets the head writer in (reserved and woken). Returns 1 released, 0 not ours (or its
/// lease already ended).
const RW_READ_RELEASE_SRC: &str = concat!(
    kinds_queued_prelude!(),
    r#"
local mine = holds(KEYS[1], ARGV[1])
if mine then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  purge(KEYS[1], KEYS[2])
  expire_with(KEYS[1], {KEYS[1], KEYS[2]})
end
local Q = kq_queue(KEYS[4], KEYS[5], KEYS[6], KEYS[7])
if kq_leave(Q, 'r:' .. ARGV[1]) or mine then
  local readers = redis.call('ZCARD', KEYS[1])
  local can = rw_grantable(Q, redis.call('EXISTS', KEYS[3]) == 1, readers)
  -- A head writer became grantable by this release: wake it even if its reservation had begun.
  local lets_writer_in = mine and readers == 0 and can == 1 and string.sub(wq_head(Q, now), 1, 2) == 'w:'
  kq_reserve(Q, can, tonumber(ARGV[2]), lets_writer_in and 1 or math.huge)
end
return kq_released(mine)
"#
);

/// Semaphore acquire. KEYS: holders, tokens, permits, the queue's three keys (waiters, waiter
/// ends, waiter entries; [`super::kinds_queue`]), fence, boot marker. ARGV: owner, ttl ms,
/// permits, registration ms (`0`: a single try), quiet ms, reserve ms, the caller's wake
/// channel (as in `RW_READ_SRC`), the most waiters the name may have. `{1, token}` granted
/// (or already ours); `{0, ms}` refused: all permits taken (ms until the first lease ends), the
/// free permits belong to waiters queued ahead (ms until the first registration ahead ends);
/// `{2, ms}` the quiet period (time left); `{3, cap}` a new waiter past the cap; `{-1, n}` the
/// semaphore is in use with `n` permits, not `permits`.
const SEM_ACQUIRE_SRC: &str = concat!(
    kinds_queued_prelude!(),
    r#"
purge(KEYS[1], KEYS[2])
local n = tonumber(ARGV[3])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[3])
else
  local have = tonumber(redis.call('GET', KEYS[3]) or '')
  if have and have ~= n then return {-1, have} end
end
local Q = kq_queue(KEYS[4], KEYS[5], KEYS[6], nil)
local member, busy = kq_attempt(Q, 'p', ARGV[1], ARGV[7], ARGV[4], ARGV[8])
local reserve = tonumber(ARGV[6])
local again = zset_renewed(KEYS[1], KEYS[2], ARGV[1], ARGV[2], {KEYS[1], KEYS[2], KEYS[3]})
if again then return kq_granted(Q, member, again) end
local quiet = kq_quiet(busy, KEYS[8], ARGV[5])
if quiet then return quiet end
local free = n - redis.call('ZCARD', KEYS[1])
if free <= 0 then return busy(left(KEYS[1], true)) end
-- A caller not queued takes only a permit beyond those of every queued waiter.
local i, turn = kq_turn(Q, member, free, free)
if not turn then
  kq_reserve(Q, free, reserve, math.huge)
  return busy(kq_first_end(Q, ahead(Q, i)) or 1)
end
if i > 0 then wq_drop(Q, member) end
local token = zset_grant(KEYS[1], KEYS[2], KEYS[7], ARGV[1], ARGV[2])
redis.call('SET', KEYS[3], ARGV[3])
expire_with(KEYS[1], {KEYS[1], KEYS[2], KEYS[3]})
-- The other free permits belong to the heads of the queue: reserved (and woken if new).
kq_reserve(Q, free - 1, reserve, math.huge)
return {1, token}
"#
);

/// Permit release, also the end of a permit wait without a grant (abandon). KEYS: holders,
/// tokens, permits, the queue's three keys. ARGV: owner, reserve ms. Frees the owner's
/// permit and drops its queue entry; the heads that now have a permit are reserved, and the
/// one this release let in is woken. Returns 1 released, 0 not ours (or its lease already
/// ended).
const SEM_RELEASE_SRC: &str = concat!(
    kinds_queued_prelude!(),
    r#"
local mine = holds(KEYS[1], ARGV[1])
local Q = kq_queue(KEYS[4], KEYS[5], KEYS[6], nil)
if not kq_leave(Q, 'p:' .. ARGV[1]) and not mine then return 0 end
-- Read before the last holder's release deletes it with the holders.
local n = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
if mine then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
purge(KEYS[1], KEYS[2])
expire_with(KEYS[1], {KEYS[1], KEYS[2], KEYS[3]})
local held = redis.call('ZCARD', KEYS[1])
local free = n - held
-- Nobody holds and the number of permits is gone with the holders: at least the head may go.
if n == 0 and held == 0 then free = 1 end
kq_reserve(Q, free, tonumber(ARGV[2]), mine and free or math.huge)
return kq_released(mine)
"#
);

/// Renew of a sorted-set holder (reader, permit). KEYS: holders, tokens[, permits].
/// ARGV: owner, ttl ms. Returns 1 renewed, 0 not ours (or its lease already ended).
const ZSET_RENEW_SRC: &str = concat!(
    kinds_prelude!(),
    r#"
if holds(KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), ARGV[1])
  expire_with(KEYS[1], KEYS)
  return 1
end
return 0
"#
);

/// The side of a read-write lock a script call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A reader: `RW_READ_SRC`, `RW_READ_RELEASE_SRC`.
    Read,
    /// The writer: `RW_WRITE_SRC`, `RW_WRITE_RELEASE_SRC`.
    Write,
}

script_call! {
    /// A call of `RW_READ_SRC` or `RW_WRITE_SRC`, which share their keys and arguments:
    /// `{1, token}`, `{0, ms}`, `{2, ms}` (quiet) or `{3, cap}` (too many waiters).
    RwAcquire -> Vec<i64> = match side {
        Side::Read => script!(RW_READ_SRC),
        Side::Write => script!(RW_WRITE_SRC),
    };
    {
        /// Reader or writer.
        side: Side,
        /// The read-write lock's keys.
        keys: &'a RwKeys,
        /// Who asks, for how long, and how it waits.
        terms: Terms<'a>,
    }
    marker marker;
    keys [
        &keys.readers, &keys.tokens, &keys.writer, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries,
        &keys.waiting_writers, &keys.fence, marker,
    ]
    args [
        terms.owner, terms.ttl_ms, terms.registration_ms, terms.quiet_ms, terms.reserve_ms, terms.wake,
        terms.max_waiters,
    ]
}

script_call! {
    /// A call of `RW_READ_RELEASE_SRC` or `RW_WRITE_RELEASE_SRC` (also a wait's abandon): 1
    /// released, 0 not ours.
    RwRelease -> i64 = match side {
        Side::Read => script!(RW_READ_RELEASE_SRC),
        Side::Write => script!(RW_WRITE_RELEASE_SRC),
    };
    {
        /// Reader or writer.
        side: Side,
        /// The read-write lock's keys.
        keys: &'a RwKeys,
        /// The owner's id.
        owner: &'a str,
        /// How long a grantable head has to come (ms).
        reserve_ms: u64,
    }
    keys [
        &keys.readers, &keys.tokens, &keys.writer, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries,
        &keys.waiting_writers,
    ]
    args [owner, reserve_ms]
}

script_call! {
    /// A call of `SEM_ACQUIRE_SRC`: `{1, token}`, `{0, ms}`, `{2, ms}`, `{3, cap}` or `{-1,
    /// permits in use}`.
    SemAcquire -> Vec<i64> = script!(SEM_ACQUIRE_SRC);
    {
        /// The semaphore's keys.
        keys: &'a SemKeys,
        /// The number of permits the caller agrees on.
        permits: u32,
        /// Who asks, for how long, and how it waits.
        terms: Terms<'a>,
    }
    marker marker;
    keys [
        &keys.holders, &keys.tokens, &keys.permits, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries,
        &keys.fence, marker,
    ]
    args [
        terms.owner, terms.ttl_ms, permits, terms.registration_ms, terms.quiet_ms, terms.reserve_ms, terms.wake,
        terms.max_waiters,
    ]
}

script_call! {
    /// A call of `SEM_RELEASE_SRC` (also a wait's abandon): 1 released, 0 not ours.
    SemRelease -> i64 = script!(SEM_RELEASE_SRC);
    {
        /// The semaphore's keys.
        keys: &'a SemKeys,
        /// The owner's id.
        owner: &'a str,
        /// How long a grantable head has to come (ms).
        reserve_ms: u64,
    }
    keys [&keys.holders, &keys.tokens, &keys.permits, &keys.waiters, &keys.waiter_ends, &keys.waiter_entries]
    args [owner, reserve_ms]
}

/// Whose sorted-set lease `ZSET_RENEW_SRC` renews.
#[derive(Debug, Clone, Copy)]
pub enum ZsetHolder<'a> {
    /// A reader of a read-write lock.
    Reader(&'a RwKeys),
    /// A permit of a semaphore (its `permits` key expires with the holders).
    Permit(&'a SemKeys),
}

impl ZsetHolder<'_> {
    /// The script's keys: holders, tokens and, for a permit, the number of permits.
    fn keys(&self) -> Vec<&str> {
        match self {
            ZsetHolder::Reader(k) => vec![&k.readers, &k.tokens],
            ZsetHolder::Permit(k) => vec![&k.holders, &k.tokens, &k.permits],
        }
    }
}

script_call! {
    /// A call of `ZSET_RENEW_SRC`: 1 renewed, 0 not ours (or its lease already ended).
    ZsetRenew -> i64 = script!(ZSET_RENEW_SRC);
    {
        /// The holder's keys.
        holder: ZsetHolder<'a>,
        /// The owner's id.
        owner: &'a str,
        /// The new ttl in ms.
        ttl_ms: u64,
    }
    keys [holder.keys()]
    args [owner, ttl_ms]
}

/// The sources of this file, loaded on every new connection.
pub(super) const SOURCES: [&str; 7] = [
    RW_READ_SRC,
    RW_WRITE_SRC,
    RW_WRITE_RELEASE_SRC,
    RW_READ_RELEASE_SRC,
    SEM_ACQUIRE_SRC,
    SEM_RELEASE_SRC,
    ZSET_RENEW_SRC,
];
