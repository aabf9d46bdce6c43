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
//! One string key per name and master (`Keys::redlock_queue`) holds `owner ends ticket …`
//! (`ends`: the server time in ms the registration lasts until), sorted; it expires with its
//! last registration. A string, as on the single instance, so the documented least ACL is
//! unchanged (`GET`, `SET`, `DEL`).
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

/// Lua shared by the ticket-queue scripts: `tq_now()`, `tq_load(key, now)`,
/// `tq_save(key, q, now, had)`, `tq_register(q, owner, ticket, ends)`, `tq_remove(q, owner)` and
/// `tq_reserve(q, now, reserve, channel, always)`. An entry is `{owner, ends, ticket}`.
macro_rules! ticket_queue_lua {
    () => {
        concat!(
            super::queue::wake_lua!(),
            r#"
local function tq_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The live registrations, in ticket order (as stored), and whether the key existed.
local function tq_load(k, now)
  local q = {}
  local s = redis.call('GET', k)
  if s then
    for o, e, t in string.gmatch(s, '(%S+) (%d+) (%d+)') do
      e = tonumber(e)
      if e > now then q[#q + 1] = {o, e, tonumber(t)} end
    end
  end
  return q, s ~= false
end
local function tq_save(k, q, now, had)
  if #q == 0 then
    if had then redis.call('DEL', k) end
    return
  end
  local parts, last = {}, now + 1
  for i, x in ipairs(q) do
    parts[i] = x[1] .. ' ' .. string.format('%d', x[2]) .. ' ' .. string.format('%d', x[3])
    if x[2] > last then last = x[2] end
  end
  redis.call('SET', k, table.concat(parts, ' '), 'PX', string.format('%d', last - now))
end
-- Removes `owner`'s entry; whether it was the head.
local function tq_remove(q, owner)
  for i, x in ipairs(q) do
    if x[1] == owner then
      table.remove(q, i)
      return i == 1
    end
  end
  return false
end
-- (Re-)registers `owner` with `ticket` until `ends`, at its place by (ticket, owner), never by
-- arrival: every master then orders the same waiters the same way.
local function tq_register(q, owner, ticket, ends)
  tq_remove(q, owner)
  local pos = #q + 1
  for i, x in ipairs(q) do
    if ticket < x[3] or (ticket == x[3] and owner < x[1]) then
      pos = i
      break
    end
  end
  table.insert(q, pos, {owner, ends, ticket})
end
-- The key is free: the head gets at most `reserve` ms to take it, and is woken (it alone) when
-- its reservation starts, or always when `always`.
local function tq_reserve(q, now, reserve, channel, always)
  local head = q[1]
  if not head then return end
  local cut = head[2] > now + reserve
  if cut then head[2] = now + reserve end
  if cut or always then wake(head[1], channel) end
end
"#
        )
    };
}

/// Redlock, per master: take the lease and read the fence floor. KEYS: lock, fence, boot marker,
/// queue (optional: without it there is no queue, as before queues). ARGV: owner, ttl ms,
/// attempt id, quiet ms, registration ms (`0`: a single try, which does not queue), ticket (µs),
/// channel, reserve ms, the caller's wake channel (optional; see [`super::queue`]: the entry is
/// then `owner~channel` and is woken there). Returns `{1, floor}` (floor = max(counter, server TIME in µs)) when
/// granted or already ours, `{0, ms}` when held by another owner (its PTTL), when a queued
/// waiter is ahead (ms: until the head's reservation ends) or in the quiet period after the
/// master lost its state (the time left). The attempt id lets [`REDLOCK_ABANDON`] free exactly
/// one failed attempt.
pub(crate) const REDLOCK_ACQUIRE_SRC: &str = effects_lua!(
    crate::boot::quiet_lua!(),
    ticket_queue_lua!(),
    r#"
local holder = redis.call('HGET', KEYS[1], 'o')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local qk, reg = KEYS[4], tonumber(ARGV[5] or '0') or 0
local me = entry_of(ARGV[1], ARGV[9])
local q, had = {}, false
if qk then
  q, had = tq_load(qk, now)
  if reg > 0 then tq_register(q, me, tonumber(ARGV[6]), now + reg) end
end
local function refuse(ms)
  if qk then tq_save(qk, q, now, had) end
  return {0, ms}
end
if holder and holder ~= ARGV[1] then return refuse(redis.call('PTTL', KEYS[1])) end
if not holder then
  local quiet = quiet_left(KEYS[3], ARGV[4], now)
  if quiet > 0 then return refuse(quiet) end
  local head = q[1]
  if head and head[1] ~= me then
    tq_reserve(q, now, tonumber(ARGV[8]), ARGV[7], false)
    return refuse(math.max(1, head[2] - now))
  end
end
-- Granted: the entry stays (the grant may not reach a majority; the undo keeps the place).
if qk then tq_save(qk, q, now, had) end
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'a', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local counter = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if counter > floor then floor = counter end
return {1, floor}
"#
);
pub(crate) static REDLOCK_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(REDLOCK_ACQUIRE_SRC));

/// Redlock, per master: undo one failed attempt. KEYS: lock, queue (optional). ARGV: owner,
/// attempt id, channel, reserve ms, the owner's wake channel (optional). Deletes the entry only if it still belongs to this owner
/// **and** this attempt: a late undo of an earlier attempt (delayed on a slow link or a
/// reconnected socket) must not free the grant of a later attempt by the same owner. The
/// owner's queue place stays; the head is reserved and woken unless it is the owner itself
/// (which re-tries on its own), `released` is published when nobody is queued. Returns 1
/// deleted, 0 not.
pub(crate) const REDLOCK_ABANDON_SRC: &str = effects_lua!(
    ticket_queue_lua!(),
    r#"
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] and redis.call('HGET', KEYS[1], 'a') == ARGV[2] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] then
    local now = tq_now()
    local q, had = tq_load(KEYS[2], now)
    if q[1] then
      if q[1][1] ~= entry_of(ARGV[1], ARGV[5]) then tq_reserve(q, now, tonumber(ARGV[4]), ARGV[3], true) end
      tq_save(KEYS[2], q, now, had)
      return 1
    end
  end
  redis.call('PUBLISH', ARGV[3], 'released')
  return 1
end
return 0
"#
);
pub(crate) static REDLOCK_ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(REDLOCK_ABANDON_SRC));

/// Redlock, per master: owner-checked release that hands off, and the withdrawal of a wait
/// (`LeaseStore::abandon`). KEYS: lock, queue. ARGV: owner, channel, reserve ms, the owner's
/// wake channel (optional). Removes the
/// owner's queue entry (held or not), deletes the lease if it is the owner's; then, if the key
/// is free, the head is reserved and woken when the lease was ours or the owner was the head
/// (`@<owner>`), and `released` is published when a release finds nobody queued (it wakes
/// clients that do not queue, e.g. during a rolling upgrade). Returns 1 released, 0 not ours.
pub(crate) const REDLOCK_RELEASE_SRC: &str = effects_lua!(
    ticket_queue_lua!(),
    r#"
local mine = redis.call('HGET', KEYS[1], 'o') == ARGV[1]
if mine then redis.call('DEL', KEYS[1]) end
local now = tq_now()
local q, had = tq_load(KEYS[2], now)
local was_head = tq_remove(q, entry_of(ARGV[1], ARGV[4]))
if not redis.call('HGET', KEYS[1], 'o') then
  if q[1] then
    tq_reserve(q, now, tonumber(ARGV[3]), ARGV[2], mine or was_head)
  elseif mine then
    redis.call('PUBLISH', ARGV[2], 'released')
  end
end
tq_save(KEYS[2], q, now, had)
if mine then return 1 end
return 0
"#
);
pub(crate) static REDLOCK_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(REDLOCK_RELEASE_SRC));

/// The sources of this module that `super::ALL_SOURCES` does not list, loaded with them.
pub(crate) const REDLOCK_SOURCES: [&str; 1] = [REDLOCK_RELEASE_SRC];

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use lock_core::LockName;

    use super::{REDLOCK_ABANDON, REDLOCK_ACQUIRE, REDLOCK_RELEASE};
    use crate::scripts::Keys;

    const RESERVE: u64 = 150;

    /// The ticket queue against a real server, two key prefixes standing for two masters:
    /// registrations that arrive in opposite orders give both the same head; the head alone is
    /// granted (not a waiting newcomer, not a single try); a head whose round failed keeps its
    /// place and its undo wakes nobody; a release wakes the next head alone; a vanished head is
    /// skipped once its reservation ends.
    #[tokio::test]
    async fn ticket_queue_agrees_on_the_head_whatever_the_arrival_order() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let name = LockName::new("tq").unwrap();
        let (m1, m2) = (Keys::new("m1", &name), Keys::new("m2", &name));
        let mut sub = client.get_async_pubsub().await.unwrap();
        sub.subscribe(&m1.channel).await.unwrap();
        let mut messages = sub.into_on_message();
        // `reg` 0: a single try; otherwise a waiting attempt with `ticket`. Returns {granted, ms}.
        let attempt = |k: &Keys, owner: &'static str, attempt: &'static str, reg: u64, ticket: u64| {
            let (mut c, lock, fence, queue, channel) =
                (conn.clone(), k.lock.clone(), k.fence.clone(), k.redlock_queue.clone(), k.channel.clone());
            async move {
                let r: Vec<i64> = REDLOCK_ACQUIRE
                    .key(lock)
                    .key(fence)
                    .key("tq:boot")
                    .key(queue)
                    .arg(owner)
                    .arg(5000)
                    .arg(attempt)
                    .arg(0)
                    .arg(reg)
                    .arg(ticket)
                    .arg(channel)
                    .arg(RESERVE)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r[0] == 1
            }
        };
        let release = |k: &Keys, owner: &'static str| {
            let (mut c, lock, queue, channel) =
                (conn.clone(), k.lock.clone(), k.redlock_queue.clone(), k.channel.clone());
            async move {
                let r: i64 = REDLOCK_RELEASE
                    .key(lock)
                    .key(queue)
                    .arg(owner)
                    .arg(channel)
                    .arg(RESERVE)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r
            }
        };
        let undo = |k: &Keys, owner: &'static str, attempt: &'static str| {
            let (mut c, lock, queue, channel) =
                (conn.clone(), k.lock.clone(), k.redlock_queue.clone(), k.channel.clone());
            async move {
                let r: i64 = REDLOCK_ABANDON
                    .key(lock)
                    .key(queue)
                    .arg(owner)
                    .arg(attempt)
                    .arg(channel)
                    .arg(RESERVE)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r
            }
        };
        // The next message on m1's channel, if one comes within `within`.
        async fn next(messages: &mut redis::aio::PubSubStream, within: Duration) -> Option<String> {
            let m = tokio::time::timeout(within, messages.next()).await.ok()??;
            Some(String::from_utf8(m.get_payload_bytes().to_vec()).unwrap())
        }

        for k in [&m1, &m2] {
            assert!(attempt(k, "h", "a0", 0, 0).await, "a free key with no queue goes to the first try");
        }
        // x (ticket 200) reaches m1 first, y (ticket 100) reaches m2 first.
        assert!(!attempt(&m1, "x", "a1", 2000, 200).await);
        assert!(!attempt(&m2, "y", "a1", 2000, 100).await);
        assert!(!attempt(&m1, "y", "a1", 2000, 100).await);
        assert!(!attempt(&m2, "x", "a1", 2000, 200).await);
        assert_eq!(release(&m1, "h").await, 1);
        assert_eq!(
            next(&mut messages, Duration::from_secs(2)).await.as_deref(),
            Some("@y"),
            "the lowest ticket is woken"
        );
        assert_eq!(release(&m2, "h").await, 1);
        for k in [&m1, &m2] {
            assert!(!attempt(k, "n", "a1", 0, 0).await, "a single try does not overtake the head");
            assert!(!attempt(k, "x", "a2", 2000, 200).await, "nor does a later ticket");
        }
        // y's round fails elsewhere: its undo frees m1 but keeps its place and wakes nobody.
        assert!(attempt(&m1, "y", "a2", 2000, 100).await, "the head is granted");
        assert_eq!(undo(&m1, "y", "a1").await, 0, "an undo of another attempt frees nothing");
        assert_eq!(undo(&m1, "y", "a2").await, 1);
        assert_eq!(next(&mut messages, Duration::from_millis(300)).await, None, "the head's own undo wakes nobody");
        assert!(!attempt(&m1, "x", "a3", 2000, 200).await, "the head kept its place");
        assert_eq!(
            next(&mut messages, Duration::from_secs(2)).await.as_deref(),
            Some("@y"),
            "finding the key free behind a head starts the head's reservation and wakes it"
        );
        for k in [&m1, &m2] {
            assert!(attempt(k, "y", "a3", 2000, 100).await, "the head wins its next round everywhere");
        }
        assert_eq!(release(&m1, "y").await, 1);
        assert_eq!(next(&mut messages, Duration::from_secs(2)).await.as_deref(), Some("@x"), "the next head alone");
        // x vanishes: it holds m1 back for its reservation only.
        assert!(!attempt(&m1, "n", "a1", 0, 0).await);
        tokio::time::sleep(Duration::from_millis(RESERVE + 50)).await;
        assert!(attempt(&m1, "n", "a1", 0, 0).await, "once its reservation ended the vanished head is skipped");
        assert_eq!(release(&m1, "n").await, 1);
        let mut c = conn.clone();
        let queue: Option<String> = redis::cmd("GET").arg(&m1.redlock_queue).query_async(&mut c).await.unwrap();
        assert_eq!(queue, None, "an empty queue leaves no key behind");
    }

    /// A waiter queued with a wake channel (`owner~channel`) is woken there and not on the
    /// name's channel; its own undo (it is the head) wakes nobody; its release, by its entry,
    /// removes its place.
    #[tokio::test]
    async fn ticket_queue_wakes_an_entry_on_its_wake_channel() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut c = conn.clone();
        let k = Keys::new("m1", &LockName::new("tqw").unwrap());
        let (mut on_name, mut on_wake) =
            (client.get_async_pubsub().await.unwrap(), client.get_async_pubsub().await.unwrap());
        on_name.subscribe(&k.channel).await.unwrap();
        on_wake.subscribe("m1:wake:Y").await.unwrap();
        let (mut on_name, mut on_wake) = (on_name.into_on_message(), on_wake.into_on_message());
        async fn heard(messages: &mut redis::aio::PubSubStream) -> Vec<String> {
            let mut got = Vec::new();
            while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), messages.next()).await {
                got.push(String::from_utf8_lossy(m.get_payload_bytes()).into_owned());
            }
            got
        }
        let acquire = |owner: &'static str, attempt: &'static str, reg: u64, wake: &'static str| {
            let (mut c, k) = (conn.clone(), &k);
            async move {
                let r: Vec<i64> = REDLOCK_ACQUIRE
                    .key(&k.lock)
                    .key(&k.fence)
                    .key("tq:boot")
                    .key(&k.redlock_queue)
                    .arg(owner)
                    .arg(5000)
                    .arg(attempt)
                    .arg(0)
                    .arg(reg)
                    .arg(100)
                    .arg(&k.channel)
                    .arg(RESERVE)
                    .arg(wake)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r[0] == 1
            }
        };
        let release = |owner: &'static str, wake: &'static str| {
            let (mut c, k) = (conn.clone(), &k);
            async move {
                let released: i64 = REDLOCK_RELEASE
                    .key(&k.lock)
                    .key(&k.redlock_queue)
                    .arg(owner)
                    .arg(&k.channel)
                    .arg(RESERVE)
                    .arg(wake)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                released
            }
        };

        assert!(acquire("h", "a0", 0, "").await);
        assert!(!acquire("y", "a1", 2000, "m1:wake:Y").await);
        assert!(!acquire("y", "a1", 2000, "m1:wake:Y").await, "re-registering keeps one entry");
        let _ = heard(&mut on_name).await;
        assert_eq!(release("h", "").await, 1);
        assert!(acquire("y", "a2", 2000, "m1:wake:Y").await, "the head, by its entry, is granted");
        assert_eq!(heard(&mut on_wake).await, ["@y"], "woken on its wake channel");
        let named = heard(&mut on_name).await;
        assert!(named.iter().all(|m| !m.starts_with('@')), "no hand-off on the name's channel: {named:?}");
        let undone: i64 = REDLOCK_ABANDON
            .key(&k.lock)
            .key(&k.redlock_queue)
            .arg("y")
            .arg("a2")
            .arg(&k.channel)
            .arg(RESERVE)
            .arg("m1:wake:Y")
            .invoke_async(&mut c)
            .await
            .unwrap();
        assert_eq!(undone, 1);
        assert!(heard(&mut on_wake).await.is_empty(), "the head's own undo wakes nobody");
        assert!(acquire("y", "a3", 2000, "m1:wake:Y").await);
        assert_eq!(release("y", "m1:wake:Y").await, 1);
        let queue: Option<String> = redis::cmd("GET").arg(&k.redlock_queue).query_async(&mut c).await.unwrap();
        assert_eq!(queue, None, "the release removed its entry");
    }
}
