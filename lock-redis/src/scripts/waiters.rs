//! The single instance exclusive lock's waiter queue as three keys with O(log n) updates
//! (`Keys::waiters`, `Keys::waiter_ends`, `Keys::waiter_entries`), so that an attempt costs
//! the same with 10 or 10,000 waiters on the name (the rules it keeps: [`super::queue`]):
//!
//! - `waiters`, a sorted set: owner → arrival sequence (the last one's plus one), the order;
//! - `waiter-ends`, a sorted set: owner → server time (ms) its registration ends, so that
//!   ended registrations are found without a scan;
//! - `waiter-entries`, a hash: owner → its entry (`owner[:<ttl>][~<wake channel>]`,
//!   [`super::queue`]): how it is woken and whether it takes grants.
//!
//! Every attempt first drops at most 64 ended registrations (each ends once, so that
//! work is amortised over the registrations); a head whose registration ended is dropped when
//! it is met. The three keys expire with the last registration (their `PEXPIRE` follows every
//! registration). A name has at most `max_waiters` entries (`RedisOptions::max_waiters`): a
//! waiting attempt that would register beyond that is refused with `{3, cap}`.

/// Lua of a sorted-set queue (after `wake_lua!()`), the exclusive lock's, Redlock's ticket
/// queue (`super::redlock`) and the kinds' queues (`super::kinds_queue`): with `Q = {order,
/// ends, data, writers, mark, armed}` (the keys; `data` nil: a member is its own entry, as in the
/// ticket queue; `writers`, the read-write lock's: a sorted set of the members `w:…` by
/// sequence, kept with `order`; `mark`, the kinds': a field of `data` whose value new
/// sequences stay above; `armed`, the exclusive lock's blocking delivery marks, which a member
/// loses with its place), `wq_purge(Q, now)`, `wq_head(Q, now)`
/// (the live head's member, registration end and entry, or nil), `wq_drop(Q, member)`,
/// `wq_register(Q, member, entry, ends, now, cap, score)` (`score` nil: after the last; false:
/// the queue is full) and `wq_reserve(Q, member, ends, entry, now, reserve, channel, always)`
/// (the head's registration end, cut to the reservation).
macro_rules! sorted_queue_lua {
    () => {
        r#"
local function wq_fmt(x) return string.format('%d', x) end
local function wq_drop(Q, owner)
  redis.call('ZREM', Q.order, owner)
  redis.call('ZREM', Q.ends, owner)
  if Q.data then redis.call('HDEL', Q.data, owner) end
  if Q.writers then redis.call('ZREM', Q.writers, owner) end
  -- Out of the queue, out of blocking delivery: no release grants it any more.
  if Q.armed then redis.call('HDEL', Q.armed, owner) end
  -- The mark outlives no queue: an empty queue leaves no key behind.
  if Q.mark and redis.call('ZCARD', Q.order) == 0 then redis.call('DEL', Q.data) end
end
-- Drops up to 64 ended registrations: each ends once, so the work is amortised.
local function wq_purge(Q, now)
  local gone = redis.call('ZRANGEBYSCORE', Q.ends, '-inf', wq_fmt(now), 'LIMIT', 0, 64)
  for _, owner in ipairs(gone) do wq_drop(Q, owner) end
end
-- The live head: owner, registration end (ms) and entry; nil when nobody waits. A head whose
-- registration ended (or whose entry is missing) is dropped on the way.
local function wq_head(Q, now)
  while true do
    local owner = redis.call('ZRANGE', Q.order, 0, 0)[1]
    if not owner then return nil end
    local ends = tonumber(redis.call('ZSCORE', Q.ends, owner))
    local entry = owner
    if Q.data then entry = redis.call('HGET', Q.data, owner) end
    if ends and ends > now and entry then return owner, ends, entry end
    wq_drop(Q, owner)
  end
end
-- Registers `owner` (its entry `entry`) until `ends`, at `score` (a decimal string) or, when nil,
-- after the last; a queued owner keeps its place. False when the owner is new and `cap` entries
-- wait already.
local function wq_register(Q, owner, entry, ends, now, cap, score)
  if score then
    if not redis.call('ZSCORE', Q.order, owner) and redis.call('ZCARD', Q.order) >= cap then return false end
    redis.call('ZADD', Q.order, score, owner)
  elseif not redis.call('ZSCORE', Q.order, owner) then
    if redis.call('ZCARD', Q.order) >= cap then return false end
    local last = redis.call('ZRANGE', Q.order, -1, -1, 'WITHSCORES')
    local seq = 1
    if last[2] then seq = tonumber(last[2]) + 1 end
    -- Above every sequence the reservation mark covers, even one whose entry left.
    local mark = Q.mark and tonumber(redis.call('HGET', Q.data, Q.mark) or '')
    if mark and mark >= seq then seq = mark + 1 end
    redis.call('ZADD', Q.order, wq_fmt(seq), owner)
    if Q.writers and string.sub(owner, 1, 2) == 'w:' then redis.call('ZADD', Q.writers, wq_fmt(seq), owner) end
  end
  redis.call('ZADD', Q.ends, wq_fmt(ends), owner)
  if Q.data then redis.call('HSET', Q.data, owner, entry) end
  local longest = redis.call('ZRANGE', Q.ends, -1, -1, 'WITHSCORES')[2]
  local ms = wq_fmt(math.max(1, tonumber(longest) - now))
  redis.call('PEXPIRE', Q.order, ms)
  redis.call('PEXPIRE', Q.ends, ms)
  if Q.data then redis.call('PEXPIRE', Q.data, ms) end
  if Q.writers then redis.call('PEXPIRE', Q.writers, ms) end
  return true
end
-- The lock is free: the head gets at most `reserve` ms to take it, and is woken (it alone) when
-- its reservation starts, or always when `always` (a release). Its registration's end after.
local function wq_reserve(Q, owner, ends, entry, now, reserve, channel, always)
  local cut = ends > now + reserve
  if cut then
    ends = now + reserve
    redis.call('ZADD', Q.ends, wq_fmt(ends), owner)
  end
  if cut or always then wake(entry, channel) end
  return ends
end
"#
    };
}
pub(crate) use sorted_queue_lua;

/// Lua of the exclusive queue (after `wake_lua!()` and `lease_hash_lua!()`): [`sorted_queue_lua`]
/// over `Q = {order, ends, data}` (the three keys), `queue_mark(Q, lock)`, which keeps the name's
/// hash's queue mark `q` true ([`super::lease`]), and `freed(Q, reserve, channel, lock, claim)`.
macro_rules! waiters_lua {
    () => {
        concat!(
            $crate::scripts::waiters::sorted_queue_lua!(),
            r#"
-- `q` on the name's hash `lock` while anyone is queued; removed only here, after looking.
local function queue_mark(Q, lock)
  if redis.call('ZCARD', Q.order) > 0 then
    redis.call('HSET', lock, 'q', '1')
  else
    redis.call('HDEL', lock, 'q')
  end
end
-- Grants the free lock to the head `owner` (entry `entry`) when its entry takes grants
-- (crate::scripts::queue), provisionally: for the claim window `claim` ms (at most the head's
-- ttl) until the head claims it; whether it did. An armed head gets the token on its list, any
-- other a message that only wakes it (it names no token) and its acquire script claims.
local function grant_head(Q, owner, entry, t, lock, channel, claim)
  local _, grant, own = entry_parts(entry)
  local ttl = tonumber(string.match(grant or '', '^(%d+)$'))
  if not (ttl and own) then return false end
  local armed = Q.armed and tonumber(redis.call('HGET', Q.armed, owner) or '')
  local window = wq_fmt(math.min(ttl, claim))
  local token = grant_hash(lock, owner, window, t, nil)
  wq_drop(Q, owner)
  queue_mark(Q, lock)
  if armed and armed >= ms_of(t) then
    -- Blocking delivery (crate::blocking): the head blocks on a list of its own; the token goes
    -- there, and no hint, which would only race it. The list lasts no longer than the grant.
    local list = Q.armed .. ':' .. owner
    redis.call('RPUSH', list, string.format('%d', token))
    redis.call('PEXPIRE', list, window)
  else
    redis.call('PUBLISH', own, '@' .. owner)
  end
  redis.call('PUBLISH', channel, '+')
  return true
end
-- The lock `lock` was freed: the head is granted the lock provisionally (given the claim window
-- `claim` ms, when its entry takes grants) or reserved and woken; with nobody queued, `-` tells
-- the observers only (crate::pubsub), so that another process's election observer hears it.
local function freed(Q, reserve, channel, lock, claim)
  -- Most releases find no queue and need no TIME.
  if redis.call('ZCARD', Q.order) == 0 then
    redis.call('HDEL', lock, 'q')
    redis.call('PUBLISH', channel, '-')
    return
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  wq_purge(Q, now)
  local owner, ends, entry = wq_head(Q, now)
  if not owner then
    redis.call('HDEL', lock, 'q')
    redis.call('PUBLISH', channel, '-')
  elseif not (claim and grant_head(Q, owner, entry, t, lock, channel, claim)) then
    wq_reserve(Q, owner, ends, entry, now, reserve, channel, true)
  end
end
"#
        )
    };
}
pub(crate) use waiters_lua;
