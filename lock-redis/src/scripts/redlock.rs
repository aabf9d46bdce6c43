//! Redlock's per-master scripts and the waiter queue each master keeps, **ordered by ticket**.
//!
//! Why not the single instance's queue ([`super::queue`]) on every master: it orders waiters by
//! arrival, and concurrent registrations reach different masters in different orders, so the
//! masters' heads differ, no head gets a majority, and since a refused head keeps its place the
//! split repeats (a livelock). Here a waiter picks **one ticket per wait** (its wall-clock µs
//! when the wait began; the owner id breaks ties) and registers with that same ticket on every
//! master; each master keeps its queue sorted by `(ticket, owner)`, whatever the arrival order.
//! Once a waiter's registrations have landed, every master that has them agrees on who is ahead
//! of whom, so the lowest live ticket is the head everywhere and wins its round.
//!
//! Two sorted sets per name and master hold it (`Keys::redlock_waiters`: entry → ticket, so that
//! Redis orders equal tickets by entry, as before; `Keys::redlock_waiter_ends`: entry → the
//! server time in ms its registration lasts until), with the single instance's O(log n)
//! updates and cap (`super::waiters`: an attempt drops at most 64 ended registrations, a head
//! whose registration ended is dropped when met, the keys expire with the last registration, a
//! new entry past `max_waiters` is refused with `{3, cap}`).
//!
//! The rules, per master:
//! - A waiting attempt registers (or refreshes its registration: `ends = now + registration`)
//!   **before** anything else, granted or not, so its place is there on every master it reached.
//! - A free key goes to the caller only if the queue is empty or the caller is its head. A single
//!   try (`try_acquire`) never registers, so it never overtakes a queued waiter.
//! - A granted waiter keeps its entry until it releases (or the entry ends): if its round fails
//!   (no majority) its undo frees the key but not its place, so it is still the head on its
//!   next attempt. The undo wakes nobody when the undoer is that master's head (it re-tries
//!   itself), otherwise it reserves and wakes the head.
//! - Whenever the key is free and the queue has a head, the head is *reserved*: its registration
//!   is cut to at most `reserve` ms from now and it alone is woken (`PUBLISH channel @<owner>`).
//!   A release removes the releaser's entry, then reserves and wakes the head. The head wakes at
//!   the first such message (of any master) and runs its round.
//!
//! ## Tokens left by the release
//!
//! A hand-off would otherwise be three rounds after the release (the head's lease step, its
//! fence store, and the wake-up between), and a free lock's acquire two. The release leaves the
//! next token instead, on each master where the releaser's lease was live and its token is known
//! (`t`, written by the fence store that made it durable, or when it was taken this way): the
//! counter becomes `max(counter, t) + 1`, marked `next:<token>` (in fence-by) as left for the next
//! taker (the mark names the token, so that a counter changed by anything else is not taken for it).
//! With a queue, the release also **grants** its head the key for the claim window
//! (`crate::handoff::CLAIM_MS`), its registration cut to the same window, and wakes it
//! (`@<owner>`); without one, the key stays free and the token goes to whoever takes the key
//! next. A message is a hint: a waiter holds only after its own lease step, in which a master
//! where the caller takes the key (the grant, or a free key) with the counter still marked `next`
//! answers `{4, token, floor}` and marks the token taken (the attempt's id in fence-by), so it is
//! handed out once. The round holds without a fence store only when a **majority names one
//! token**: that token was then stored, above every earlier one, on a majority before anyone
//! used it, which is all the fence store gives. Anything less (a release that reached a minority,
//! masters whose counters or tokens differed, a token overtaken by a later store, taken by
//! another's attempt, or a grant that lapsed) falls back to the ordinary round, whose floors
//! include the tokens left. Why the token left is above every earlier one: the releaser held a
//! majority continuously since its token was stored, so nobody took a token in between; and a
//! store of a higher one since, on a master of that majority, leaves the token there unmarked.
//! lock-model's `redlock` model checks this, with the switches that break it (a head that holds
//! on the message, confirmations naming different tokens, a release that does not store the
//! token it leaves).
//!
//! ## Blocking delivery
//!
//! Where the head is armed on the master (`Keys::armed`, by `REDLOCK_ARM_SRC`), the release
//! instead **takes** the token for it (`push:<token>` in fence-by), writes it into the grant
//! (`t`) with the pushed mark `p`, and pushes it to the head's list (`<armed>:<owner>`), with
//! no hint; the undo of an attempt never frees a lease marked `p`, and the claim
//! (`REDLOCK_CLAIM_SRC`) removes the mark and makes every master the head holds agree on the
//! token a majority pushed. The head's side and why a majority of pops naming
//! one token may be held: `crate::redlock::blocking`.
//!
//! Why it cannot livelock: a master grants a waiter only while it is the master's head, so once
//! the registrations of the live waiters have landed (one attempt of each, a round trip), no
//! waiter but the lowest ticket is granted anywhere, and that one is refused only where an
//! earlier holder's lease or an earlier partial grant is still there; those are released,
//! undone or expire (each undo and release wakes it), and then it has every master.
//!
//! Assumptions: clocks of clients roughly agree; skew between clients only reorders them (a
//! client whose clock is behind is served earlier), it never affects exclusion, which is the
//! majority of leases exactly as without a queue. A live waiter re-tries before its registration
//! ends (the registration is twice its longest re-try interval) and, once woken, within
//! `reserve` ms; one that vanished holds a free key back for at most `reserve` ms after the
//! release (or after the first attempt that finds the key free), then the next attempt skips it.

use std::sync::LazyLock;

use redis::Script;

use super::keys::Keys;
use super::Terms;

/// Lua shared by the ticket-queue scripts: `wake_lua!()` and the sorted-set queue
/// (`super::waiters::sorted_queue_lua`; a member is its entry, `owner[~wake channel]`, scored by
/// its ticket), and `tq_now()`.
macro_rules! ticket_queue_lua {
    () => {
        concat!(
            super::queue::wake_lua!(),
            $crate::scripts::waiters::sorted_queue_lua!(),
            r#"
local function tq_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"#
        )
    };
}

/// Redlock, per master: take the lease and read the fence floor. KEYS: lock, fence, boot marker,
/// the queue's two keys, fence-by. ARGV: owner, ttl ms,
/// attempt id, quiet ms, registration ms (`0`: a single try, which does not queue), ticket (µs),
/// channel, reserve ms, the caller's wake channel (`''`: none; see [`super::queue`]: the entry
/// is then `owner~channel` and is woken there), the most waiters the name may have. Returns
/// `{1, floor}` (floor = max(counter, server TIME in µs)) when granted or already ours, `{4,
/// token, floor}` when the caller takes the token a release left for the next taker (its grant
/// to the caller, or a free key's), still the master's counter ("Tokens left by the release" in
/// the module docs), `{0,
/// ms}` when held by another owner (its PTTL) or when a queued waiter is ahead (ms: until the
/// head's reservation ends), `{2, ms}` in the quiet period after the master lost its state (the
/// time left), `{3, cap}` when a new registration would be the name's waiter number `cap + 1` (not
/// queued, not granted). The attempt id lets `REDLOCK_ABANDON_SRC` free exactly one failed
/// attempt.
const REDLOCK_ACQUIRE_SRC: &str = effects_lua!(
    crate::boot::quiet_lua!(),
    ticket_queue_lua!(),
    r#"
local held = redis.call('HMGET', KEYS[1], 'o', 'g')
local holder, granted = held[1], held[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reg = tonumber(ARGV[5] or '0') or 0
local me = entry_of(ARGV[1], ARGV[9])
local Q = nil
if KEYS[4] then
  Q = {order = KEYS[4], ends = KEYS[5]}
  wq_purge(Q, now)
  if reg > 0 and not wq_register(Q, me, me, now + reg, now, tonumber(ARGV[10] or '') or math.huge, ARGV[6]) then
    return {3, tonumber(ARGV[10])}
  end
end
if holder and holder ~= ARGV[1] then return {0, redis.call('PTTL', KEYS[1])} end
if not holder then
  local quiet = quiet_left(KEYS[3], ARGV[4], now)
  if quiet > 0 then return {2, quiet} end
  local head, ends, entry = nil, nil, nil
  if Q then head, ends, entry = wq_head(Q, now) end
  if head and head ~= me then
    ends = wq_reserve(Q, head, ends, entry, now, tonumber(ARGV[8]), ARGV[7], false)
    return {0, math.max(1, ends - now)}
  end
end
-- Granted: the entry stays (the grant may not reach a majority; the undo keeps the place).
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'a', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local counter = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if counter > floor then floor = counter end
if granted then redis.call('HDEL', KEYS[1], 'g') end
-- The token a release left for the next taker (the head it granted, or anyone on a free key),
-- still the counter: this attempt takes it, once; it is then this lease's, for its release.
if (not holder or granted) and redis.call('GET', KEYS[6]) == 'next:' .. string.format('%d', counter) then
  redis.call('SET', KEYS[6], ARGV[3])
  redis.call('HSET', KEYS[1], 't', string.format('%d', counter))
  return {4, counter, floor}
end
return {1, floor}
"#
);

script_call! {
    /// A call of `REDLOCK_ACQUIRE_SRC` on one master, always with the queue key: `{1,
    /// floor}`, `{4, token, floor}`, `{0, ms}`, `{2, quiet ms}` or `{3, cap}`.
    RedlockAcquire -> Vec<i64> = script!(REDLOCK_ACQUIRE_SRC);
    {
        /// The lock's keys: lock, fence, ticket queue and channel.
        keys: &'a Keys,
        /// Who asks, for how long, and how it waits (`max_waiters`: on this master).
        terms: Terms<'a>,
        /// The attempt's id, stored with the lease so that its undo frees this attempt only.
        attempt: &'a str,
        /// The wait's ticket (µs), which orders the queue.
        ticket: u64,
    }
    marker marker;
    keys [&keys.lock, &keys.fence, marker, &keys.redlock_waiters, &keys.redlock_waiter_ends, &keys.fence_by]
    args [
        terms.owner, terms.ttl_ms, attempt, terms.quiet_ms, terms.registration_ms, ticket, &keys.channel,
        terms.reserve_ms, terms.wake, terms.max_waiters,
    ]
}

/// Redlock, per master: undo one failed attempt. KEYS: lock, the queue's two keys (optional). ARGV: owner,
/// attempt id, channel, reserve ms, the owner's wake channel (optional). Deletes the entry only if it still belongs to this owner
/// **and** this attempt: a late undo of an earlier attempt (delayed on a slow link or a
/// reconnected socket) must not free the grant of a later attempt by the same owner, nor a grant
/// pushed to the owner (`p`), which its blocking delivery may still count on. The
/// owner's queue place stays; the head is reserved and woken unless it is the owner itself
/// (which re-tries on its own), `released` is published when nobody is queued. Returns 1
/// deleted, 0 not.
const REDLOCK_ABANDON_SRC: &str = effects_lua!(
    ticket_queue_lua!(),
    r#"
local l = redis.call('HMGET', KEYS[1], 'o', 'a', 'p')
if l[1] == ARGV[1] and l[2] == ARGV[2] and not l[3] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] then
    local Q, now = {order = KEYS[2], ends = KEYS[3]}, tq_now()
    local head, ends, entry = wq_head(Q, now)
    if head then
      if head ~= entry_of(ARGV[1], ARGV[5]) then wq_reserve(Q, head, ends, entry, now, tonumber(ARGV[4]), ARGV[3], true) end
      return 1
    end
  end
  redis.call('PUBLISH', ARGV[3], 'released')
  return 1
end
return 0
"#
);

script_call! {
    /// A call of `REDLOCK_ABANDON_SRC` on one master, the undo of one failed attempt: 1 the
    /// attempt's lease deleted, 0 not.
    RedlockUndo -> i64 = script!(REDLOCK_ABANDON_SRC);
    {
        /// The lock's keys: lock, ticket queue and channel.
        keys: &'a Keys,
        /// The owner's id.
        owner: &'a str,
        /// The failed attempt's id.
        attempt: &'a str,
        /// How long the woken head has to come (ms).
        reserve_ms: u64,
        /// The owner's wake channel, `""`: none.
        wake: &'a str,
    }
    keys [&keys.lock, &keys.redlock_waiters, &keys.redlock_waiter_ends]
    args [owner, attempt, &keys.channel, reserve_ms, wake]
}

/// Redlock, per master: owner-checked release that hands off, and the withdrawal of a wait
/// (`LeaseStore::abandon`). KEYS: lock, the queue's two keys, fence, fence-by, blocking delivery
/// marks (`Keys::armed`: a head armed there gets the grant pushed to its list). ARGV: owner,
/// channel, reserve ms, the owner's wake channel (optional), the claim window ms (`0` or absent:
/// no grants), the releaser's token (`0` or absent: none, a withdrawal). Removes the owner's
/// queue entry (held or not), deletes the lease if it is the owner's; then, if the key is free:
/// when the lease was ours, it knew its token (`t`, or `g` for a grant) and grants are asked
/// for, the token `max(counter, t, releaser's token) + 1` is stored as the
/// counter and left for the next taker, and a queue's head is **granted** the key for the claim
/// window ("Tokens left by the release" in the module docs); otherwise a head is reserved.
/// Either way the head is woken (`@<owner>`) when the lease was ours or the owner was the head;
/// `released` is published when a release finds nobody queued (it wakes clients that do not
/// queue, e.g. during a rolling upgrade). Returns 1 released, 0 not ours.
const REDLOCK_RELEASE_SRC: &str = effects_lua!(
    ticket_queue_lua!(),
    r#"
local held = redis.call('HMGET', KEYS[1], 'o', 't', 'g')
local mine = held[1] == ARGV[1]
if mine then redis.call('DEL', KEYS[1]) end
local Q, now, me = {order = KEYS[2], ends = KEYS[3]}, tq_now(), entry_of(ARGV[1], ARGV[4])
wq_purge(Q, now)
local was_head = wq_head(Q, now) == me
wq_drop(Q, me)
if not redis.call('HGET', KEYS[1], 'o') then
  local head, ends, entry = wq_head(Q, now)
  local claim = tonumber(ARGV[5] or '0') or 0
  -- The releaser's own token (0: a withdrawal) raises the base where this master knew a lower
  -- one (a push of its own that the majority outvoted, never claimed): as the claim would.
  local known = mine and tonumber(held[2] or held[3] or '')
  if known then known = math.max(known, tonumber(ARGV[6] or '0') or 0) end
  local token = nil
  if known and claim > 0 then
    -- The next taker's token, stored as the counter and left for it ('next:<token>').
    local counter = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
    token = string.format('%d', math.max(counter, known) + 1)
    redis.call('SET', KEYS[4], token)
    redis.call('SET', KEYS[5], 'next:' .. token)
  end
  local who = head and (entry_parts(head))
  local mark = head and token and KEYS[6] and tonumber(redis.call('HGET', KEYS[6], who) or '')
  if mark and mark >= now then
    -- Blocking delivery (crate::redlock::blocking): the head blocks on a list of its own here.
    -- The token is taken on its behalf (no lease step answers "handed" with it), the lease is
    -- marked pushed (`p`: no undo of the head's own attempts frees it), and the token goes to
    -- the list, with no hint, which would only race it. The head holds on a majority of pops.
    redis.call('HDEL', KEYS[6], who)
    redis.call('SET', KEYS[5], 'push:' .. token)
    redis.call('HSET', KEYS[1], 'o', who, 'a', 'grant', 't', token, 'p', '1')
    redis.call('PEXPIRE', KEYS[1], claim)
    local list = KEYS[6] .. ':' .. who
    redis.call('RPUSH', list, token)
    redis.call('PEXPIRE', list, claim)
    if ends > now + claim then redis.call('ZADD', Q.ends, wq_fmt(now + claim), head) end
  elseif head and token then
    redis.call('HSET', KEYS[1], 'o', who, 'a', 'grant', 'g', token)
    redis.call('PEXPIRE', KEYS[1], claim)
    wq_reserve(Q, head, ends, entry, now, claim, ARGV[2], true)
  elseif head then
    wq_reserve(Q, head, ends, entry, now, tonumber(ARGV[3]), ARGV[2], mine or was_head)
  elseif mine then
    redis.call('PUBLISH', ARGV[2], 'released')
  end
end
if mine then return 1 end
return 0
"#
);

script_call! {
    /// A call of `REDLOCK_RELEASE_SRC` on one master: 1 released, 0 not ours.
    RedlockRelease -> i64 = script!(REDLOCK_RELEASE_SRC);
    {
        /// The lock's keys: lock, ticket queue, fence and channel.
        keys: &'a Keys,
        /// The owner's id.
        owner: &'a str,
        /// How long the woken head has to come (ms).
        reserve_ms: u64,
        /// The owner's wake channel, `""`: none.
        wake: &'a str,
        /// How long a grant to the head lasts unclaimed (ms); 0: reserve the head, no grant.
        claim_ms: u64,
        /// The releaser's token (0: none, a wait's withdrawal): the token left is above it.
        token: u64,
    }
    keys [&keys.lock, &keys.redlock_waiters, &keys.redlock_waiter_ends, &keys.fence, &keys.fence_by, &keys.armed]
    args [owner, &keys.channel, reserve_ms, wake, claim_ms, token]
}

/// Redlock, per master: store a token if it is greater (set-if-greater). KEYS: fence, fence-by,
/// lock. ARGV: token (decimal string), attempt id. Returns `{1, token}` when this attempt stored it
/// (now, or on an earlier delivery of the same call), `{0, counter}` otherwise. A counter that
/// already *equals* the token was stored by another grant: that token is taken, so counting it
/// as stored would hand out the same token twice. A stored token is also written into the
/// attempt's lease (`t`), if the lease is still the attempt's, for its release's grant.
const REDLOCK_FENCE_SRC: &str = r#"
local want = tonumber(ARGV[1])
local have = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local stored = want > have
if stored then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], ARGV[2])
else
  stored = want == have and redis.call('GET', KEYS[2]) == ARGV[2]
end
if not stored then return {0, have} end
if redis.call('HGET', KEYS[3], 'a') == ARGV[2] then redis.call('HSET', KEYS[3], 't', ARGV[1]) end
return {1, want}
"#;

script_call! {
    /// A call of `REDLOCK_FENCE_SRC` on one master: `{1, token}` stored by this attempt, `{0,
    /// counter}` otherwise.
    RedlockFence -> Vec<i64> = script!(REDLOCK_FENCE_SRC);
    {
        /// The lock's keys: fence, fence-by and lock.
        keys: &'a Keys,
        /// The token to store, as a decimal string (Lua's numbers would cut it).
        token: &'a str,
        /// The attempt's id.
        attempt: &'a str,
    }
    keys [&keys.fence, &keys.fence_by, &keys.lock]
    args [token, attempt]
}

/// Redlock, per master: the claim of a grant pushed to a waiter (`crate::redlock::blocking`),
/// its lease's first renewal. KEYS: lock, fence, fence-by. ARGV: owner, ttl ms, the token a
/// majority of pushes named. Extends the lease to the ttl only if it is the owner's; it never
/// grants, so a lease released or lapsed meanwhile stays so. The master then keeps the
/// claimed token as the lease's (`t`) and its counter at least that (set-if-greater), marked
/// taken: a master that pushed the owner another token (its counter had fallen behind, or a
/// release there granted it from another state) agrees with the majority from now on, so that
/// the next release leaves every master the same token. The lease loses its grant and pushed
/// marks (`g`, `p`), and its attempt id becomes `claim`, which no attempt has: the undo of one of
/// the head's failed attempts that arrives after the claim (a lease step that fell back before
/// the pushes made a majority) leaves the claimed lease alone. Returns 1 claimed, 0 not the
/// owner's.
const REDLOCK_CLAIM_SRC: &str = r#"
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
local have = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[3]) > have then redis.call('SET', KEYS[2], ARGV[3]) end
redis.call('SET', KEYS[3], 'claim:' .. ARGV[3])
redis.call('HSET', KEYS[1], 't', ARGV[3], 'a', 'claim')
redis.call('HDEL', KEYS[1], 'g', 'p')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

script_call! {
    /// A call of `REDLOCK_CLAIM_SRC` on one master: 1 claimed, 0 not (any more) that grant.
    RedlockClaim -> i64 = script!(REDLOCK_CLAIM_SRC);
    {
        /// The lock's keys: lock, fence and fence-by.
        keys: &'a Keys,
        /// The owner's id.
        owner: &'a str,
        /// The new ttl in ms.
        ttl_ms: u64,
        /// The token a majority of pushes named.
        token: u64,
    }
    keys [&keys.lock, &keys.fence, &keys.fence_by]
    args [owner, ttl_ms, token]
}

/// Redlock blocking delivery's arm on one master (`crate::redlock::blocking`), sent with the
/// `BLPOP` of the owner's list right after it, on the waiter's own connection to that master.
/// KEYS: the queue's order (`Keys::redlock_waiters`), blocking delivery marks (`Keys::armed`), the
/// owner's list (`Keys::pushes`). ARGV: owner, its wake channel (`''`: none; with the owner, its
/// queue entry), how long the mark lasts (ms: the `BLPOP`'s timeout). A grant pushed before this
/// arm (its `BLPOP` had ended) is drained and answered as the hint `h`: counted from this arm it
/// could be a lapsed lease. An owner not queued on this master is answered `x`: no release here
/// pushes to it (yet). Either answer is pushed onto the list, so the `BLPOP` after the arm returns
/// it at once; otherwise the owner is marked armed until the mark's end and the `BLPOP` waits for
/// a release's push (its token). Returns 1 armed, 0 answered on the list.
pub(crate) const REDLOCK_ARM_SRC: &str = effects_lua!(
    super::queue::wake_lua!(),
    super::queue::arm_lua!(),
    r#"
local function refused()
  return not redis.call('ZSCORE', KEYS[1], entry_of(ARGV[1], ARGV[2]))
end
return arm(KEYS[3], KEYS[2], ARGV[1], ARGV[3], refused)
"#
);
pub(crate) static REDLOCK_ARM: LazyLock<Script> = LazyLock::new(|| Script::new(REDLOCK_ARM_SRC));

script_call! {
    /// A call of `REDLOCK_ARM_SRC` on its own (the waiter's side sends it pipelined with its
    /// `BLPOP`): 1 armed, 0 answered on the list.
    RedlockArm -> i64 = REDLOCK_ARM;
    {
        /// The lock's keys (the queue's order, the marks).
        keys: &'a Keys,
        /// The waiting owner's id.
        owner: &'a str,
        /// The owner's wake channel, `""`: none.
        wake: &'a str,
        /// The owner's list (`Keys::pushes`).
        list: &'a str,
        /// How long the mark lasts (ms).
        block_ms: u64,
    }
    keys [&keys.redlock_waiters, &keys.armed, list]
    args [owner, wake, block_ms]
}

/// The sources of this file, loaded on every new connection (the arm runs only on blocking
/// delivery's own connections, which load it themselves).
pub(super) const SOURCES: [&str; 5] =
    [REDLOCK_ACQUIRE_SRC, REDLOCK_ABANDON_SRC, REDLOCK_RELEASE_SRC, REDLOCK_FENCE_SRC, REDLOCK_CLAIM_SRC];
