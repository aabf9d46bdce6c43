//! The waiter queue of a single-instance exclusive lock, kept on the server next to the lease
//! (same hash tag, so it lives on the lease's Redis Cluster slot).
//!
//! One string key holds the waiting owners in arrival order, each with the server time (ms) its
//! registration ends (`owner ends owner ends …`); it expires with the last registration. A
//! string, not a list and a sorted set, so that the queue needs no command beyond the ones the
//! lease already needs (`GET`, `SET`, `DEL`: the documented least ACL is unchanged), at the
//! price of an O(waiters) rewrite per refused attempt. A waiter registers at its first refused
//! attempt and each later attempt pushes its registration forward, so a waiter that vanished
//! (crash, lost clean-up) drops out once its registration ends; a waiter that gives up removes
//! itself at once ([`ABANDON`](super::ABANDON)).
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
//! used to subscribe to — one delivery per hand-off, not one per client (issue 11's herd). An
//! older client's entry has no `~` and is woken on the name's channel as before; an older
//! releaser publishes a `~` entry's wake on the name's channel, which a newer waiter does not
//! hear: it then takes the lock at its next timed re-try.
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
//! script **provisionally** — new token as an acquire would issue it, `PEXPIRE min(ttl, claim
//! window)` (`crate::handoff::CLAIM_MS`, 1 s), the entry gone — and publishes `@<owner>` on the
//! head's wake channel (and `+` on the name's channel, for observers). The message only wakes
//! the head; the head's acquire script, finding the lease its own, **claims** it: `PEXPIRE ttl`
//! and the token in its reply. A grant nobody claims lapses at the end of the claim window,
//! and the next waiter takes the free lock at its next attempt.
//!
//! An older client's entry `owner:<ttl>:<attempt>~…` is only woken (its client would take a
//! message's token without asking); an older releaser grants no new entry (it reads
//! `<ttl>:<attempt>` terms only) and wakes it instead. Either way the lock is served, one
//! script later.
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

/// Lua of every script that issues a token: `grant_token(fence, t)`, the token a grant issues,
/// never below the server clock in µs (`t`: `TIME`'s reply). Before [`queue_lua`], which uses it.
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
"#
    };
}
pub(crate) use token_lua;

/// Lua shared by the scripts that use the queue (after [`wake_lua`] and [`token_lua`]):
/// `queue_now()`, `queue_load(key, now, s)`, `queue_save(key, q, now, had)`, `wake(entry,
/// channel)`, `reserve_head(q, now, reserve, channel, always)` and `freed(key, reserve, channel,
/// lock, fence, s, claim)` (`lock`, `fence`: the lease's keys, and `claim`: the claim window in
/// ms, to grant the lock provisionally to a head that takes grants (the module docs); nil: only
/// wake it; `s`: the queue key's value when already read, nil: read it).
macro_rules! queue_lua {
    () => {
        r#"
local function queue_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The live registrations {owner, ends} in arrival order, and whether the key existed; `s`, when
-- given, is the key's value already read (false: no key).
local function queue_load(k, now, s)
  local q = {}
  if s == nil then s = redis.call('GET', k) end
  if s then
    for o, e in string.gmatch(s, '(%S+) (%d+)') do
      e = tonumber(e)
      if e > now then q[#q + 1] = {o, e} end
    end
  end
  return q, s ~= false
end
-- Writes the queue back (deletes it when empty); the key lives as long as its last registration.
local function queue_save(k, q, now, had)
  if #q == 0 then
    if had then redis.call('DEL', k) end
    return
  end
  local parts, last = {}, now + 1
  for i, x in ipairs(q) do
    parts[i] = x[1] .. ' ' .. string.format('%d', x[2])
    if x[2] > last then last = x[2] end
  end
  redis.call('SET', k, table.concat(parts, ' '), 'PX', string.format('%d', last - now))
end
-- The lock is free: the head gets at most `reserve` ms to take it, and is woken (it alone) when
-- its reservation starts, or always when `always` (a release).
local function reserve_head(q, now, reserve, channel, always)
  local head = q[1]
  if not head then return end
  local cut = head[2] > now + reserve
  if cut then head[2] = now + reserve end
  if cut or always then wake(head[1], channel) end
end
-- Grants the free lock to the head of `q` when its entry takes grants (crate::scripts::queue),
-- provisionally: for the claim window `claim` ms (at most the head's ttl) until the head's own
-- acquire script claims it; whether it did. The message only wakes the head: it names no token.
local function grant_head(q, t, lock, fence, channel, claim)
  local owner, grant, own = entry_parts(q[1][1])
  local ttl = tonumber(string.match(grant or '', '^(%d+)$'))
  if not (ttl and own) then return false end
  local token = string.format('%d', grant_token(fence, t))
  redis.call('HSET', lock, 'o', owner, 'f', token)
  redis.call('PEXPIRE', lock, string.format('%d', math.min(ttl, claim)))
  table.remove(q, 1)
  redis.call('PUBLISH', own, '@' .. owner)
  redis.call('PUBLISH', channel, '+')
  return true
end
-- The lock was freed: the head of the queue at `k` is granted the lock provisionally (given
-- `lock`, `fence` and the claim window `claim` ms, when its entry takes grants) or reserved and
-- woken; with nobody queued, `-` tells the observers only (crate::pubsub), so that another
-- process's election observer hears it.
local function freed(k, reserve, channel, lock, fence, s, claim)
  -- Read before the clock: most releases find no queue and need no TIME.
  if s == nil then s = redis.call('GET', k) end
  if not s then
    redis.call('PUBLISH', channel, '-')
    return
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local q, had = queue_load(k, now, s)
  if not q[1] then
    redis.call('PUBLISH', channel, '-')
  elseif not (lock and claim and grant_head(q, t, lock, fence, channel, claim)) then
    reserve_head(q, now, reserve, channel, true)
  end
  queue_save(k, q, now, had)
end
"#
    };
}
pub(crate) use queue_lua;

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use lock_core::LockName;

    use crate::scripts::{Keys, ABANDON, ACQUIRE, RELEASE};

    const RESERVE: i64 = 150;

    /// The queue's rules against a real server: a newcomer (single try or waiting) does not
    /// overtake a queued waiter, a release wakes the head alone, a head that vanished is
    /// skipped once its reservation ends, and a waiter that gives up leaves the queue.
    #[tokio::test]
    async fn queue_hands_off_in_order_and_skips_a_vanished_head() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let k = Keys::new("fq", &LockName::new("n").unwrap());
        let mut sub = client.get_async_pubsub().await.unwrap();
        sub.subscribe(&k.channel).await.unwrap();
        let mut messages = sub.into_on_message();
        let (conn, k) = (c.clone(), &k);
        // `reg` 0: a single try; otherwise a waiting attempt registering for `reg` ms.
        let attempt = |owner: &'static str, reg: i64| {
            let mut c = conn.clone();
            async move { acquire(&mut c, k, owner, reg, "").await }
        };
        let release = |owner: &'static str| {
            let mut c = conn.clone();
            async move {
                let r: redis::RedisResult<i64> =
                    k.hand_off(&RELEASE, owner, RESERVE as u64, "").invoke_async(&mut c).await;
                r
            }
        };
        // The next hand-off; grants (`+`) and releases nobody waits for (`-`) are for observers.
        async fn next(messages: &mut redis::aio::PubSubStream) -> String {
            loop {
                let m = tokio::time::timeout(std::time::Duration::from_secs(2), messages.next()).await;
                let payload = String::from_utf8(m.unwrap().unwrap().get_payload_bytes().to_vec()).unwrap();
                if payload != "+" && payload != "-" {
                    return payload;
                }
            }
        }

        assert_eq!(attempt("a", 0).await[0], 1, "a free lock with no queue goes to the first try");
        let w = attempt("w", 2000).await;
        assert!(w[0] == 0 && w[1] > 4000, "a waiter is refused with the holder's ttl: {w:?}");
        assert_eq!(attempt("w", 2000).await[0], 0, "re-registering is idempotent");
        assert_eq!(release("a").await.unwrap(), 1);
        assert_eq!(next(&mut messages).await, "@w", "the release wakes the head alone");
        let n = attempt("n", 0).await;
        assert!(n[0] == 0 && n[1] <= RESERVE, "a single try does not overtake the reserved head: {n:?}");
        assert_eq!(attempt("n", 2000).await[0], 0, "nor does a waiting newcomer");
        assert_eq!(attempt("w", 2000).await[0], 1, "the head takes the lock");
        assert_eq!(release("w").await.unwrap(), 1);
        assert_eq!(next(&mut messages).await, "@n", "the next release wakes the next in line");

        // `n` vanishes: it holds the free lock back for its reservation only.
        assert_eq!(attempt("m", 0).await[0], 0, "the reserved head keeps the lock from a newcomer");
        tokio::time::sleep(std::time::Duration::from_millis(RESERVE as u64 + 50)).await;
        assert_eq!(attempt("m", 0).await[0], 1, "once its reservation ended the vanished head is skipped");

        // A waiter that gives up leaves the queue; the release wakes the one behind it.
        assert_eq!(attempt("y", 2000).await[0], 0);
        assert_eq!(attempt("z", 2000).await[0], 0);
        let left: i64 = k.hand_off(&ABANDON, "y", RESERVE as u64, "").invoke_async(&mut c).await.unwrap();
        assert_eq!(left, 1);
        assert_eq!(release("m").await.unwrap(), 1);
        assert_eq!(next(&mut messages).await, "@z", "the waiter that gave up is not woken");
        assert_eq!(attempt("z", 2000).await[0], 1);
        assert_eq!(release("z").await.unwrap(), 1);
        let queue: Option<String> = redis::cmd("GET").arg(&k.queue).query_async(&mut c).await.unwrap();
        assert_eq!(queue, None, "an empty queue leaves no key behind");
    }

    /// One acquire attempt of `owner` registering for `reg` ms (0: a single try) with wake
    /// channel `wake` (`""`: none): the script's reply.
    async fn acquire(
        c: &mut redis::aio::MultiplexedConnection,
        k: &Keys,
        owner: &str,
        reg: i64,
        wake: &str,
    ) -> Vec<i64> {
        acquire_with(c, k, owner, reg, wake, "").await
    }

    /// [`acquire`] with grant terms `grant` (`"<ttl ms>"`, `""`: none).
    async fn acquire_with(
        c: &mut redis::aio::MultiplexedConnection,
        k: &Keys,
        owner: &str,
        reg: i64,
        wake: &str,
        grant: &str,
    ) -> Vec<i64> {
        let r: Vec<i64> = ACQUIRE
            .key(&k.lock)
            .key(&k.fence)
            .key("fq:boot")
            .key(&k.queue)
            .arg(owner)
            .arg(5000)
            .arg(0)
            .arg("")
            .arg("")
            .arg(0)
            .arg(reg)
            .arg(&k.channel)
            .arg(RESERVE)
            .arg(wake)
            .arg(grant)
            .invoke_async(c)
            .await
            .unwrap();
        r
    }

    /// The payloads that arrive on `messages` within `within`.
    async fn heard(messages: &mut redis::aio::PubSubStream, within: std::time::Duration) -> Vec<String> {
        let mut got = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(within, messages.next()).await {
            got.push(String::from_utf8_lossy(m.get_payload_bytes()).into_owned());
        }
        got
    }

    /// A waiter queued with a wake channel is woken there, and only there: the name's channel,
    /// which every client used to hear, carries no hand-off for it; a waiter without one (an
    /// older client) is still woken on the name's channel; abandoning with the wake channel
    /// removes the entry.
    #[tokio::test]
    async fn a_waiter_with_a_wake_channel_is_woken_on_it_alone() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let k = Keys::new("fq", &LockName::new("w").unwrap());
        let (mut on_name, mut on_wake) =
            (client.get_async_pubsub().await.unwrap(), client.get_async_pubsub().await.unwrap());
        on_name.subscribe(&k.channel).await.unwrap();
        on_wake.subscribe("fq:wake:A").await.unwrap();
        let (mut on_name, mut on_wake) = (on_name.into_on_message(), on_wake.into_on_message());
        let quiet = std::time::Duration::from_millis(300);
        async fn attempt(
            c: &mut redis::aio::MultiplexedConnection,
            k: &Keys,
            owner: &str,
            reg: i64,
            wake: &str,
        ) -> i64 {
            acquire(c, k, owner, reg, wake).await[0]
        }

        assert_eq!(attempt(&mut c, &k, "a", 0, "").await, 1);
        assert_eq!(attempt(&mut c, &k, "w", 2000, "fq:wake:A").await, 0);
        assert_eq!(attempt(&mut c, &k, "v", 2000, "").await, 0);
        assert_eq!(attempt(&mut c, &k, "w", 2000, "fq:wake:A").await, 0, "re-registering is idempotent");
        let _ = heard(&mut on_name, quiet).await;
        assert_eq!(k.hand_off(&RELEASE, "a", RESERVE as u64, "").invoke_async::<i64>(&mut c).await.unwrap(), 1);
        // Within the head's reservation (RESERVE ms), so it is not skipped.
        assert_eq!(attempt(&mut c, &k, "v", 2000, "").await, 0, "the head keeps its place");
        assert_eq!(attempt(&mut c, &k, "w", 2000, "fq:wake:A").await, 1, "the head, by its entry, takes the lock");
        assert_eq!(heard(&mut on_wake, quiet).await, ["@w"], "the head is woken on its wake channel");
        let named = heard(&mut on_name, quiet).await;
        assert!(named.iter().all(|m| !m.starts_with('@')), "no hand-off on the name's channel: {named:?}");
        assert_eq!(k.hand_off(&RELEASE, "w", RESERVE as u64, "").invoke_async::<i64>(&mut c).await.unwrap(), 1);
        assert!(
            heard(&mut on_name, quiet).await.contains(&"@v".to_owned()),
            "an entry without one: the name's channel"
        );
        assert_eq!(attempt(&mut c, &k, "v", 2000, "").await, 1);

        assert_eq!(attempt(&mut c, &k, "x", 2000, "fq:wake:A").await, 0);
        let left: i64 = k.hand_off(&ABANDON, "x", RESERVE as u64, "fq:wake:A").invoke_async(&mut c).await.unwrap();
        assert_eq!(left, 1);
        let queue: Option<String> = redis::cmd("GET").arg(&k.queue).query_async(&mut c).await.unwrap();
        assert_eq!(queue, None, "abandoned by its entry");
        assert_eq!(k.hand_off(&RELEASE, "v", RESERVE as u64, "").invoke_async::<i64>(&mut c).await.unwrap(), 1);
        assert!(heard(&mut on_wake, quiet).await.is_empty(), "nobody queued: no wake");
    }

    /// A release grants the lock to a head whose entry takes grants: the lease is the head's,
    /// for the claim window, with a higher token, and the head's wake channel alone hears
    /// `@owner` (no token); the head's script claims it for its ttl; a head without grant terms
    /// (or an older client's `<ttl>:<attempt>` terms) is woken as before; a waiter that abandons
    /// a grant it never claimed releases it and hands the lock on.
    #[tokio::test]
    async fn a_release_grants_the_lock_to_a_head_that_takes_grants() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let k = Keys::new("fq", &LockName::new("g").unwrap());
        let mut on_wake = client.get_async_pubsub().await.unwrap();
        on_wake.subscribe("fq:wake:A").await.unwrap();
        let mut on_wake = on_wake.into_on_message();
        let quiet = std::time::Duration::from_millis(300);
        let owner = |c: &mut redis::aio::MultiplexedConnection| {
            let mut c = c.clone();
            let key = k.lock.clone();
            async move {
                let o: Option<String> = redis::cmd("HGET").arg(&key).arg("o").query_async(&mut c).await.unwrap();
                let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut c).await.unwrap();
                (o, pttl)
            }
        };
        let release = |c: &mut redis::aio::MultiplexedConnection, who: &'static str| {
            let mut c = c.clone();
            let k = &k;
            async move { k.hand_off(&RELEASE, who, RESERVE as u64, "").invoke_async::<i64>(&mut c).await.unwrap() }
        };

        let first = acquire(&mut c, &k, "a", 0, "").await;
        assert_eq!(first[0], 1);
        assert_eq!(acquire_with(&mut c, &k, "w", 2000, "fq:wake:A", "9000").await[0], 0);
        assert_eq!(acquire_with(&mut c, &k, "w", 2000, "fq:wake:A", "9000").await[0], 0, "re-registering");
        assert_eq!(acquire_with(&mut c, &k, "v", 2000, "fq:wake:A", "").await[0], 0, "behind w, no grant terms");
        assert_eq!(release(&mut c, "a").await, 1);
        let (o, pttl) = owner(&mut c).await;
        assert_eq!(o.as_deref(), Some("w"), "the release granted the head");
        let claim = crate::handoff::CLAIM_MS as i64;
        assert!(pttl > claim - 500 && pttl <= claim, "for the claim window: {pttl}");
        assert_eq!(heard(&mut on_wake, quiet).await, ["@w"], "one wake-up, no token");
        let token: i64 = redis::cmd("HGET").arg(&k.lock).arg("f").query_async(&mut c).await.unwrap();
        assert!(token > first[1], "a higher token: {token} after {}", first[1]);
        // The head's script claims what it was granted: same token, its own ttl.
        let again = acquire_with(&mut c, &k, "w", 2000, "fq:wake:A", "9000").await;
        assert_eq!(again, [1, token]);
        assert!(owner(&mut c).await.1 > 4000, "claimed for the ttl of its attempt (5 s)");

        // `v` has no grant terms: woken, not granted; nor is an older client's entry.
        assert_eq!(acquire_with(&mut c, &k, "u", 2000, "fq:wake:A", "9000:3").await[0], 0);
        assert_eq!(release(&mut c, "w").await, 1);
        assert_eq!(owner(&mut c).await.0, None, "no grant terms: the lock stays free for v to take");
        // Within v's reservation (RESERVE ms).
        assert_eq!(acquire(&mut c, &k, "v", 2000, "fq:wake:A").await[0], 1);
        assert_eq!(heard(&mut on_wake, quiet).await, ["@v"]);
        assert_eq!(release(&mut c, "v").await, 1);
        assert_eq!(owner(&mut c).await.0, None, "an older client's terms: woken, not granted");
        assert_eq!(acquire(&mut c, &k, "u", 2000, "fq:wake:A").await[0], 1);
        assert_eq!(heard(&mut on_wake, quiet).await, ["@u"]);

        // `x` is granted, never takes it, and abandons: the grant is released and `y` granted.
        assert_eq!(acquire_with(&mut c, &k, "x", 2000, "fq:wake:A", "9000").await[0], 0);
        assert_eq!(acquire_with(&mut c, &k, "y", 2000, "fq:wake:A", "9000").await[0], 0);
        assert_eq!(release(&mut c, "u").await, 1);
        assert_eq!(owner(&mut c).await.0.as_deref(), Some("x"));
        let left: i64 = k.hand_off(&ABANDON, "x", RESERVE as u64, "fq:wake:A").invoke_async(&mut c).await.unwrap();
        assert_eq!(left, 1);
        assert_eq!(owner(&mut c).await.0.as_deref(), Some("y"), "the untaken grant went on to the next head");
        let notes = heard(&mut on_wake, quiet).await;
        assert_eq!(notes, ["@x", "@y"]);
        assert_eq!(release(&mut c, "y").await, 1);
        let queue: Option<String> = redis::cmd("GET").arg(&k.queue).query_async(&mut c).await.unwrap();
        assert_eq!(queue, None, "every entry gone");
    }
}
