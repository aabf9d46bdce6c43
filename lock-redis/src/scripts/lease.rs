//! The single instance exclusive lock's one hash per name (`Keys::lock`): the lease, its token
//! counter and the queue mark in one key, so that the free path reads one key and writes it once
//! (the crate docs, "The free path"). Fields:
//!
//! - `o`: the owner, `e`: the server time (ms) its lease ends — a lease is live until the
//!   script's `TIME` (in ms, rounded down) passes `e`, as a key with `PX` lives until the server's
//!   clock passes its expiry; an ended lease leaves `o` and `e` behind until the next grant
//!   or release overwrites or deletes them (a key `PX` would take the counter with it);
//! - `f`: the highest token issued, kept across leases (the fence; the key has no expiry unless
//!   `idle_gc_after` gives it one);
//! - `q`: someone may be queued (set by every registration on a hash that has `f`, and by every
//!   grant that leaves others queued; removed only by a script that found the queue empty), so a
//!   hash with `f` and without `q` has nobody queued: the free path and the release skip the
//!   queue without reading it;
//! - `h`, `m`: the holder id and metadata of the live lease (docs/contract.md §5.6);
//! - `w`: the server time (ms) until which an election observer watches the name
//!   (`crate::single::observe`), so the free path publishes `+`/`-` only while someone listens;
//!   every other path (a grant in the release, a grant to a queued waiter) always publishes.
//!
//! Redlock and the read-write lock's writer keep their own layout (a lease hash with `PX` and a
//! separate counter; `super::queue::token_lua`).

/// Lua of the hash (after `effects_lua!`'s prefix): `ms_of(t)`, the server time in ms of a `TIME`
/// reply, `live_owner(lock, now)`, the owner of a live lease and its end (ms), or nil, and
/// `grant_hash(lock, owner, ttl, t, gc)`, which makes `lock` `owner`'s lease for `ttl` ms (a
/// decimal string) with the next token, floored by the server clock in µs; `gc`: the key's
/// expiry in ms (`idle_gc_after`), `'0'` none, nil: only never shorter than the new lease. The
/// token.
macro_rules! lease_hash_lua {
    () => {
        r#"
local function ms_of(t) return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
local function live_owner(lock, now)
  local l = redis.call('HMGET', lock, 'o', 'e')
  local ends = tonumber(l[2] or '')
  if l[1] and ends and ends >= now then return l[1], ends end
  return nil
end
-- Never less than the server clock in microseconds: a restart without persistence or an evicted
-- hash then still continues above every token issued before.
local function grant_hash(lock, owner, ttl, t, gc)
  local token = tonumber(redis.call('HGET', lock, 'f') or '0') + 1
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token < floor then token = floor end
  redis.call('HDEL', lock, 'h', 'm')
  local ends = string.format('%d', ms_of(t) + tonumber(ttl))
  redis.call('HSET', lock, 'o', owner, 'e', ends, 'f', string.format('%d', token))
  if gc == nil then
    local left = redis.call('PTTL', lock)
    if left >= 0 and left < tonumber(ttl) then redis.call('PEXPIRE', lock, ttl) end
  elseif gc ~= '0' then
    redis.call('PEXPIRE', lock, gc)
  end
  return token
end
"#
    };
}
pub(crate) use lease_hash_lua;
