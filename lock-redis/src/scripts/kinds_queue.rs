//! The waiter queue of a single-instance read-write lock or semaphore: the exclusive lock's
//! queue ([`queue`](super::queue): the same string key, registrations, reservations and
//! `@<owner>` wake-ups) generalised to grants that several holders share.
//!
//! The queue is `…:rw:queue` or `…:sem:queue` (the name's hash tag, so it lives on the slot of
//! the kind's other keys, Redis Cluster included). Its entries are `<kind>:<owner>`, `kind` `r`
//! (reader), `w` (writer) or `p` (permit), so one queue keeps a read-write lock's readers and
//! writers in their common arrival order. Like the exclusive queue it needs no command beyond
//! `GET`, `SET`, `DEL` and `TIME`: the documented least ACL is unchanged.
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
//!   exactly as the exclusive lock's waiters do.
//! - Whenever a script finds grantable heads (a release, an abandon, or an attempt that found
//!   a holder's lease expired), each of them is **reserved**: its registration is cut to at most
//!   `reserve` ms from now, and it alone is woken (`PUBLISH <its client's wake channel>
//!   @<owner>`, the entry being `<kind>:<owner>~<wake channel>`: only that client hears it; an
//!   older client's entry, without `~`, is woken on the kind's channel, which every client of the
//!   name hears) — once, when its reservation starts, and again by the release that made it
//!   grantable. One delivery per grantable waiter, no herd across clients.
//!
//! Bounds: a grantable head that vanished keeps its place for at most `reserve` ms (250 ms);
//! the next attempt after that drops it and reserves the next. A refused waiter sleeps until
//! the first registration ahead of it ends (the attempt's answer: for grantable heads, their
//! reservations) or its fallback re-try (at most `4 × max_poll_interval`), so a vanished head
//! costs the others at most `reserve` plus one re-try. A waiter that vanished further back drops out when its registration ends (`2 × (4 ×
//! max_poll_interval + request_timeout)`); one whose wait ended in a live process leaves at
//! once (the kinds' abandon is their release script, which also removes the owner's entry).
//!
//! Assumptions, as for the exclusive queue: a live waiter re-tries before its registration ends
//! and, once woken, within `reserve` ms; one that does not loses its place (it re-registers at
//! the tail). That costs fairness, never exclusion: readers, writers and permits are checked
//! exactly as without a queue, the queue only refuses more.

/// Lua helpers of the kinds' queue, after `kinds_prelude!()` (they use its `now`) and
/// `queue_lua!()` (its `queue_load` and `queue_save`): `kq_entry(kind, owner, wake)`,
/// `kq_split(entry)`, `kq_place(q, me)`, `kq_register(q, me, reg)`, `kq_leave(key, q, had,
/// me)`, `kq_refuse(key, q, had, me, reg, wait)`, `kq_reserve(q, n, reserve,
/// chans, wake_from)`, `ahead(q, i)`, `kq_first_end(q, n)` and `rw_grantable(q, writer_holds,
/// readers)`.
macro_rules! kinds_queue_lua {
    () => {
        r#"
-- An entry is `<kind>:<owner>`, or `<kind>:<owner>~<wake channel>` from a client that listens
-- on a wake channel of its own (`wake`: that channel, `''` or nil: none).
local function kq_entry(kind, owner, wake)
  if wake and wake ~= '' then return kind .. ':' .. owner .. '~' .. wake end
  return kind .. ':' .. owner
end
-- An entry's `<kind>:<owner>` and wake channel (nil: none).
local function kq_split(e)
  local key, own = string.match(e, '^([^~]+)~(.+)$')
  if key then return key, own end
  return e, nil
end
-- The place (1-based) of the entry of `me`'s kind and owner in the queue (whatever its wake
-- channel), 0 when not queued.
local function kq_place(q, me)
  local key = kq_split(me)
  for i, x in ipairs(q) do
    if kq_split(x[1]) == key then return i end
  end
  return 0
end
-- A refused waiting attempt (`reg` > 0 ms): a place at the tail, or its registration pushed
-- forward (and its entry written as this attempt's).
local function kq_register(q, me, reg)
  if not reg or reg <= 0 then return end
  local i = kq_place(q, me)
  if i > 0 then q[i][1], q[i][2] = me, now + reg else q[#q + 1] = {me, now + reg} end
end
-- The first `n` entries are grantable: each gets at most `reserve` ms to come and is woken (it
-- alone, `@<owner>` on its client's wake channel, else on its kind's channel `chans[kind]`) when
-- its reservation starts, and whatever its reservation from place `wake_from` on (the ones a
-- release just let in).
local function kq_reserve(q, n, reserve, chans, wake_from)
  for i = 1, math.min(n, #q) do
    local x = q[i]
    local cut = x[2] > now + reserve
    if cut then x[2] = now + reserve end
    if cut or i >= wake_from then
      local key, own = kq_split(x[1])
      redis.call('PUBLISH', own or chans[string.sub(key, 1, 1)], '@' .. string.sub(key, 3))
    end
  end
end
-- The caller holds now: its entry, if queued, leaves the queue at `qk`, written back.
local function kq_leave(qk, q, had, me)
  local i = kq_place(q, me)
  if i > 0 then
    table.remove(q, i)
    queue_save(qk, q, now, had)
  end
end
-- A refused attempt: a waiting one (`reg` > 0) registers or pushes its registration forward,
-- the queue at `qk` is written back; the answer `{0, wait}`.
local function kq_refuse(qk, q, had, me, reg, wait)
  kq_register(q, me, reg)
  queue_save(qk, q, now, had)
  return {0, wait}
end
-- How many entries are ahead of place `i` (0: not queued, so behind all of them).
local function ahead(q, i)
  if i > 0 then return i - 1 end
  return #q
end
-- Ms until the first of the first `n` registrations ends (a waiter behind them re-tries then,
-- in case one vanished), or nil when there is none.
local function kq_first_end(q, n)
  local e
  for i = 1, math.min(n, #q) do
    if not e or q[i][2] < e then e = q[i][2] end
  end
  if e then return math.max(1, e - now) end
  return nil
end
-- How many heads of a read-write lock's queue may be granted: the head writer alone while
-- nobody holds, the run of readers at the head while no writer holds.
local function rw_grantable(q, writer_holds, readers)
  local head = q[1]
  if not head or writer_holds then return 0 end
  if string.sub(head[1], 1, 1) == 'w' then
    if readers == 0 then return 1 end
    return 0
  end
  local n = 0
  while q[n + 1] and string.sub(q[n + 1][1], 1, 1) == 'r' do n = n + 1 end
  return n
end
"#
    };
}
pub(crate) use kinds_queue_lua;
