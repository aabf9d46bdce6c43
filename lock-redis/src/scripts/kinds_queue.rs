//! The waiter queue of a single-instance read-write lock or semaphore: the exclusive lock's
//! queue ([`queue`](super::queue): registrations, reservations and `@<owner>` wake-ups) on the
//! same sorted-set structure ([`waiters`](super::waiters): O(log n) per update, at most
//! `max_waiters` entries, a refused new waiter answered `{3, cap}`), generalised to grants that
//! several holders share.
//!
//! The keys (the name's hash tag, so they live on the slot of the kind's other keys, Redis
//! Cluster included): `…:rw:waiters` / `…:sem:waiters` (member → arrival sequence, the order),
//! `…:*:waiter-ends` (member → server time in ms its registration ends), `…:*:waiter-entries`
//! (member → its entry, how it is woken; and the reservation mark, below) and, for a read-write
//! lock, `…:rw:waiting-writers` (the writers' members by sequence, so the run of readers at the
//! head is counted without walking it). A member is `<kind>:<owner>`, `kind` `r` (reader), `w`
//! (writer) or `p` (permit), so one queue keeps a read-write lock's readers and writers in their
//! common arrival order; its entry adds `~<wake channel>`, the caller's client's own channel.
//!
//! The rules, in the scripts ([`super::kinds`]):
//! - The **grantable heads** are the entries that may be granted now: the head writer alone
//!   while nobody holds; the run of consecutive readers at the head while no writer holds (they
//!   share with the current readers); the first `permits − holders` permit waiters.
//! - A queued caller is granted only when it is among the grantable heads. A caller not queued
//!   (a newcomer, a single try, the releaser coming straight back) is granted only when the
//!   queue is empty, or, for a permit, when there are more free permits than queued waiters: so
//!   it never takes what a queued waiter may have, and a reader never joins the current
//!   readers while a writer is queued. A single try never registers.
//! - A refused **waiting** attempt registers at the tail (or pushes its registration forward),
//!   exactly as the exclusive lock's waiters do; a new one past `max_waiters` is refused.
//! - Whenever a script finds grantable heads (a release, an abandon, or an attempt that found
//!   a holder's lease expired), each of them is **reserved**: its registration is cut to at most
//!   `reserve` ms from now, and it alone is woken (`PUBLISH <its client's wake channel>
//!   @<owner>`) — once, when its reservation starts, and again by the release that made it
//!   grantable. One delivery per grantable waiter, no herd across clients. An entry without a
//!   wake channel (a caller that does not listen) is reserved but not woken: it polls.
//!
//! **The reservation mark** keeps that linear rather than quadratic in the grantable heads (a
//! run of 10,000 readers let in by one writer's release): the entries-hash field `#reserved`
//! holds the highest sequence reserved so far, so a script reserves only the grantable heads
//! beyond it (each entry is reserved once); new entries get sequences above the mark, and a
//! reserved entry that pushes its registration forward (refused again, e.g. in a quiet period)
//! lowers the mark below itself, so it is cut again as the string queue did. A refused waiter's
//! answer (when to re-try) is the first end among the at most 16 registrations ahead of it:
//! vanished entries further back are dropped by every script's purge (up to 64 a time), and the
//! client's own fallback re-try bounds its sleep anyway.
//!
//! Bounds: a grantable head that vanished keeps its place for at most `reserve` ms (250 ms);
//! the next attempt after that drops it and reserves the next. A refused waiter sleeps until
//! the first registration ahead of it ends (the attempt's answer: for grantable heads, their
//! reservations) or its fallback re-try (at most `4 × max_poll_interval`), so a vanished head
//! costs the others at most `reserve` plus one re-try. A waiter that vanished further back
//! drops out when its registration ends (`2 × (4 × max_poll_interval + request_timeout)`); one
//! whose wait ended in a live process leaves at once (the kinds' abandon is their release
//! script, which also removes the owner's entry).
//!
//! Assumptions, as for the exclusive queue: a live waiter re-tries before its registration ends
//! and, once woken, within `reserve` ms; one that does not loses its place (it re-registers at
//! the tail). That costs fairness, never exclusion: readers, writers and permits are checked
//! exactly as without a queue, the queue only refuses more.

/// Lua helpers of the kinds' queue, after `kinds_prelude!()` (they use its `now`), `wake_lua!()`
/// and [`sorted_queue_lua`](super::waiters::sorted_queue_lua): `kq_queue(order, ends, data,
/// writers)`, `kq_entry(kind, owner, wake)`, `kq_place(Q, member)`, `kq_len(Q)`,
/// `kq_register(Q, member, entry, reg, cap)`, `kq_reserve(Q, n, reserve, wake_from)`,
/// `ahead(Q, i)`, `kq_first_end(Q, n)` and `rw_grantable(Q, writer_holds, readers)`.
macro_rules! kinds_queue_lua {
    () => {
        r#"
-- The queue of a kind over its keys (`writers`: the read-write lock's writers index, or nil).
local function kq_queue(order, ends, data, writers)
  local Q = {order = order, ends = ends, data = data, writers = writers, mark = '#reserved'}
  wq_purge(Q, now)
  return Q
end
-- An entry is `<kind>:<owner>`, or `<kind>:<owner>~<wake channel>` from a client that listens
-- on a wake channel of its own (`wake`: that channel, `''` or nil: none).
local function kq_entry(kind, owner, wake)
  if wake and wake ~= '' then return kind .. ':' .. owner .. '~' .. wake end
  return kind .. ':' .. owner
end
-- The place (1-based) of `member` (`<kind>:<owner>`) in the queue, 0 when not queued.
local function kq_place(Q, member)
  local r = redis.call('ZRANK', Q.order, member)
  if r then return r + 1 end
  return 0
end
local function kq_len(Q) return redis.call('ZCARD', Q.order) end
-- A refused waiting attempt (`reg` > 0 ms): a place at the tail, or its registration pushed
-- forward (and its entry written as this attempt's). False: a new waiter past `cap`.
local function kq_register(Q, member, entry, reg, cap)
  if not reg or reg <= 0 then return true end
  if not wq_register(Q, member, entry, now + reg, now, cap) then return false end
  -- Pushed forward past a reservation: reserved (cut and woken) again when grantable.
  local mark = tonumber(redis.call('HGET', Q.data, Q.mark) or '')
  if mark then
    local seq = tonumber(redis.call('ZSCORE', Q.order, member))
    if seq <= mark then redis.call('HSET', Q.data, Q.mark, wq_fmt(seq - 1)) end
  end
  return true
end
-- The first `n` entries are grantable: each gets at most `reserve` ms to come and is woken (it
-- alone, `@<owner>` on its client's wake channel; an entry without one polls) when its
-- reservation starts, and whatever its reservation from place `wake_from` on (the ones a
-- release just let in). The entries up to the mark were reserved before: skipped.
local function kq_reserve(Q, n, reserve, wake_from)
  if n <= 0 then return end
  local mark = tonumber(redis.call('HGET', Q.data, Q.mark) or '') or 0
  local first = redis.call('ZCOUNT', Q.order, '-inf', wq_fmt(mark))
  if wake_from - 1 < first then first = wake_from - 1 end
  if first >= n then return end
  local xs = redis.call('ZRANGE', Q.order, first, n - 1, 'WITHSCORES')
  for j = 1, #xs, 2 do
    local member, seq = xs[j], tonumber(xs[j + 1])
    local ends = tonumber(redis.call('ZSCORE', Q.ends, member))
    local entry = redis.call('HGET', Q.data, member)
    if ends and ends > now and entry then
      local cut = ends > now + reserve
      if cut then redis.call('ZADD', Q.ends, wq_fmt(now + reserve), member) end
      if cut or first + (j + 1) / 2 >= wake_from then
        local own = string.match(entry, '~(.+)$')
        if own then redis.call('PUBLISH', own, '@' .. string.sub(member, 3)) end
      end
    end
    if seq > mark then mark = seq end
  end
  if #xs > 0 then redis.call('HSET', Q.data, Q.mark, wq_fmt(mark)) end
end
-- How many entries are ahead of place `i` (0: not queued, so behind all of them).
local function ahead(Q, i)
  if i > 0 then return i - 1 end
  return kq_len(Q)
end
-- Ms until the first of the first `n` (at most 16) live registrations ends (a waiter behind
-- them re-tries then, in case one vanished), or nil when there is none.
local function kq_first_end(Q, n)
  if n <= 0 then return nil end
  local e
  for _, member in ipairs(redis.call('ZRANGE', Q.order, 0, math.min(n, 16) - 1)) do
    local x = tonumber(redis.call('ZSCORE', Q.ends, member))
    if x and x > now and (not e or x < e) then e = x end
  end
  if e then return math.max(1, e - now) end
  return nil
end
-- How many heads of a read-write lock's queue may be granted: the head writer alone while
-- nobody holds, the run of readers at the head (those before the first writer) while no writer
-- holds.
local function rw_grantable(Q, writer_holds, readers)
  if writer_holds then return 0 end
  local head = wq_head(Q, now)
  if not head then return 0 end
  if string.sub(head, 1, 2) == 'w:' then
    if readers == 0 then return 1 end
    return 0
  end
  local w = redis.call('ZRANGE', Q.writers, 0, 0, 'WITHSCORES')[2]
  if not w then return kq_len(Q) end
  return redis.call('ZCOUNT', Q.order, '-inf', '(' .. w)
end
"#
    };
}
pub(crate) use kinds_queue_lua;
