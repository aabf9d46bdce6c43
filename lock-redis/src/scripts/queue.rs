//! The waiter queue of a single-instance exclusive lock, kept on the server next to the lease
//! (same hash tag, so it lives on the lease's Redis Cluster slot).
//!
//! Three keys hold it (`super::waiters`): the waiting owners in arrival order, the server time
//! (ms) each one's registration ends, and each one's entry (below); O(log n) per update, and at
//! most `max_waiters` of them. A waiter registers at its first refused attempt and each later
//! attempt pushes its registration forward, so a waiter that vanished (crash, lost clean-up)
//! drops out once its registration ends; a waiter that gives up removes itself at once (the
//! abandon script, `super::exclusive`). The read-write lock's and the semaphore's queues
//! (`super::kinds_queue`) are the same structure.
//!
//! The rules, in the scripts:
//! - A free lock goes to the caller only if the queue is empty or the caller is its head. A
//!   single try (`try_acquire`) never registers, and cannot overtake a queued waiter either.
//! - Whenever the lock is free and the queue has a head, the head is *reserved*: its
//!   registration is cut to at most `reserve` ms from now and it alone is woken (`PUBLISH
//!   channel @<owner>`: every client hears it, only the one waiting as that owner wakes). So a
//!   head that vanished keeps a free lock from the others for at most `reserve` ms after the
//!   release (or after the first attempt that finds the holder's lease expired); the attempt that
//!   then finds its registration ended drops it and reserves and wakes the next head.
//!
//! An entry is `owner` or, from a client that listens on a wake channel of its own,
//! `owner~channel`: its hand-off is then published on that channel (`@<owner>`), which that
//! client alone subscribes to, instead of on the name's channel that every waiting client
//! would otherwise subscribe to — one delivery per hand-off, not one per client (the thundering
//! herd). Every client of this crate queues with its wake channel; an entry without `~` is
//! woken on the name's channel.
//!
//! ## Grants in the release
//!
//! How a release grants the lock to the queue's head itself (the single instance's exclusive
//! lock; `crate::handoff` holds the client's side, why a grant is confirmed and the bound on an
//! untaken grant).
//!
//! A waiter that can take such a grant (its client listens on a wake channel, asks no replica
//! acknowledgements and stores no holder id or metadata) queues as `owner:<ttl ms>~<wake
//! channel>`. A release whose head has such an entry grants that head the lease in the same
//! script **provisionally** — new token as an acquire would issue it, the lease ending `min(ttl,
//! claim window)` from now (`crate::handoff::CLAIM_MS`, 1 s), the entry gone — and publishes
//! `@<owner>` on the head's wake channel (and `+` on the name's channel, for observers). The
//! message only wakes the head; the head's acquire script, finding the lease its own, **claims**
//! it: the lease now ends `ttl` from now, and the token is in its reply. A grant nobody claims lapses at the end of the claim window,
//! and the next waiter takes the free lock at its next attempt.
//!
//! An entry whose terms are not exactly `<ttl ms>` is never granted, only woken: the grant's
//! terms are read strictly, so a malformed entry costs a script, never a lease.
//!
//! Assumptions: a live waiter re-tries before its registration ends (the registration is twice
//! its longest re-try interval, see `RedisStore::registration`) and, once woken, within
//! `reserve` ms (a head granted the lock: within the claim window); one that does not loses its
//! place (it re-registers at the tail), which costs
//! fairness, never exclusion: the lease is checked exactly as without a queue.

/// Lua shared by the queues of this module and of [`super::redlock`]: `entry_of(owner, wake,
/// grant)`, the queue entry of `owner` with wake channel `wake` (`''` or nil: none) and grant
/// terms `grant` (`'<ttl ms>'`, or `''`/nil: none; the module docs),
/// `entry_parts(entry)`, its owner, grant terms and wake channel, and `wake(entry, channel)`,
/// which wakes the waiter of `entry` on its own wake channel, else on the name's `channel`.
macro_rules! wake_lua {
    () => {
        r#"
local function entry_of(owner, wake_channel, grant)
  local e = owner
  if grant and grant ~= '' then e = e .. ':' .. grant end
  if wake_channel and wake_channel ~= '' then e = e .. '~' .. wake_channel end
  return e
end
local function entry_parts(entry)
  local head, own = string.match(entry, '^([^~]+)~(.+)$')
  if not head then head = entry end
  local owner, grant = string.match(head, '^([^:]+):(.+)$')
  if not owner then owner = head end
  return owner, grant, own
end
local function wake(entry, channel)
  local owner, _, own = entry_parts(entry)
  redis.call('PUBLISH', own or channel, '@' .. owner)
end
"#
    };
}

pub(crate) use wake_lua;

/// Lua shared by the arms of blocking delivery (the single instance's `ARM_SRC`, Redlock's
/// `REDLOCK_ARM_SRC`): `arm(list, marks, owner, ms, refused)`. A grant pushed onto `list` before
/// this arm is drained and answered as the hint `h` (counted from this arm it could be a lapsed
/// lease); else `refused()` true is answered `x` (no release will push to this owner). An answer
/// goes onto `list`, so the `BLPOP` after the arm returns it at once; otherwise `owner` is marked
/// armed in `marks` for `ms`. Returns 1 armed, 0 answered on the list.
macro_rules! arm_lua {
    () => {
        r#"
local function arm(list, marks, owner, ms, refused)
  local answer = nil
  if redis.call('DEL', list) == 1 then
    answer = 'h'
  elseif refused() then
    answer = 'x'
  end
  if answer then
    redis.call('RPUSH', list, answer)
    redis.call('PEXPIRE', list, ms)
    return 0
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', marks, owner, string.format('%d', now + tonumber(ms)))
  redis.call('PEXPIRE', marks, ms)
  return 1
end
"#
    };
}

pub(crate) use arm_lua;

/// Lua of every script that issues a token: `grant_token(fence, t)`, the token a grant issues,
/// never below the server clock in µs (`t`: `TIME`'s reply), and `grant_lease(lock, fence,
/// owner, ttl, t)`, an exclusive lease with that token.
macro_rules! token_lua {
    () => {
        r#"
-- Never issue less than the server clock in microseconds: a restart without persistence or an
-- evicted counter then still continues above every token issued before.
local function grant_token(fence, t)
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = redis.call('INCR', fence)
  if token < floor then
    token = floor
    redis.call('SET', fence, string.format('%d', token))
  end
  return token
end
-- The grant tail of every exclusive lease (an acquire, a release's grant to the queue's head, a
-- writer): the lease hash `lock` is `owner`'s for `ttl` ms (a decimal string), with the next
-- token of `fence`; the token.
local function grant_lease(lock, fence, owner, ttl, t)
  local token = grant_token(fence, t)
  redis.call('HSET', lock, 'o', owner, 'f', string.format('%d', token))
  redis.call('PEXPIRE', lock, ttl)
  return token
end
"#
    };
}
pub(crate) use token_lua;
