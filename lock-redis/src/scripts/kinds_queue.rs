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
/// `kq_split(entry)`, `kq_place(q, me)`, `kq_register(q, me, reg)`, `kq_reserve(q, n, reserve,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use lock_core::LockName;

    use crate::scripts::{
        RwKeys, SemKeys, RW_READ, RW_READ_RELEASE, RW_WRITE, RW_WRITE_RELEASE, SEM_ACQUIRE, SEM_RELEASE,
    };

    // Well above `woken`'s 200 ms of listening, so that reservations outlast the listening.
    const RESERVE: i64 = 1000;
    const REG: i64 = 5000;

    /// The wake-ups published since the last call (each `@<owner>`), in order.
    async fn woken(messages: &mut redis::aio::PubSubStream) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), messages.next()).await {
            out.push(String::from_utf8(m.get_payload_bytes().to_vec()).unwrap());
        }
        out
    }

    /// The kinds' queues against a real server: the freed permit goes to the head alone (woken
    /// alone), nobody overtakes, a vanished reserved head is skipped after its reservation; a
    /// writer's release wakes the run of readers at the head and not the writer behind them,
    /// a reader behind a queued writer waits, the last reader out wakes that writer.
    #[tokio::test]
    async fn kinds_queues_hand_off_in_order() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let c = client.get_multiplexed_async_connection().await.unwrap();
        let name = LockName::new("kq").unwrap();
        let (sk, rw) = (SemKeys::new("kq", &name), RwKeys::new("kq", &name));
        let mut sub = client.get_async_pubsub().await.unwrap();
        for ch in [&sk.channel, &rw.to_readers, &rw.to_writers] {
            sub.subscribe(ch).await.unwrap();
        }
        let mut messages = sub.into_on_message();
        let _: () = redis::cmd("SET").arg("kq:boot").arg(0).query_async(&mut c.clone()).await.unwrap();

        // `reg` 0: a single try; otherwise a waiting attempt.
        let permit = |owner: &'static str, reg: i64| {
            let (mut c, sk) = (c.clone(), &sk);
            async move {
                let r: Vec<i64> = SEM_ACQUIRE
                    .key(&sk.holders)
                    .key(&sk.tokens)
                    .key(&sk.permits)
                    .key(&sk.queue)
                    .key(&sk.fence)
                    .key("kq:boot")
                    .arg(owner)
                    .arg(5000)
                    .arg(2)
                    .arg(reg)
                    .arg(0)
                    .arg(RESERVE)
                    .arg(&sk.channel)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r[0]
            }
        };
        let give_back = |owner: &'static str| {
            let (mut c, sk) = (c.clone(), &sk);
            async move {
                let r: i64 = SEM_RELEASE
                    .key(&sk.holders)
                    .key(&sk.tokens)
                    .key(&sk.permits)
                    .key(&sk.queue)
                    .arg(owner)
                    .arg(RESERVE)
                    .arg(&sk.channel)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r
            }
        };
        assert_eq!((permit("a", 0).await, permit("b", REG).await), (1, 1), "free permits, empty queue");
        for w in ["w1", "w2", "w3"] {
            assert_eq!(permit(w, REG).await, 0);
        }
        assert_eq!(give_back("a").await, 1);
        assert_eq!(woken(&mut messages).await, ["@w1"], "a freed permit wakes the head alone");
        assert_eq!(permit("n", 0).await, 0, "a single try does not take the head's permit");
        assert_eq!(permit("w2", REG).await, 0, "nor does the second in line");
        assert_eq!(permit("w1", REG).await, 1, "the head takes it");
        assert_eq!(give_back("b").await, 1);
        assert_eq!(woken(&mut messages).await, ["@w2"]);
        // `w2` vanishes: w3 waits for the reservation only.
        assert_eq!(permit("w3", REG).await, 0);
        tokio::time::sleep(Duration::from_millis(RESERVE as u64 + 50)).await;
        assert_eq!(permit("w3", REG).await, 1, "the vanished head is skipped once its reservation ended");

        let side = |script: &'static redis::Script, owner: &'static str, reg: i64| {
            let (mut c, rw) = (c.clone(), &rw);
            async move {
                let r: Vec<i64> = script
                    .key(&rw.readers)
                    .key(&rw.tokens)
                    .key(&rw.writer)
                    .key(&rw.queue)
                    .key(&rw.fence)
                    .key("kq:boot")
                    .arg(owner)
                    .arg(5000)
                    .arg(reg)
                    .arg(0)
                    .arg(RESERVE)
                    .arg(&rw.to_readers)
                    .arg(&rw.to_writers)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r[0]
            }
        };
        let read = |owner, reg| side(&RW_READ, owner, reg);
        let write = |owner, reg| side(&RW_WRITE, owner, reg);
        let leave = |owner: &'static str, writer: bool| {
            let (mut c, rw) = (c.clone(), &rw);
            async move {
                let mut call =
                    if writer { RW_WRITE_RELEASE.prepare_invoke() } else { RW_READ_RELEASE.prepare_invoke() };
                if writer {
                    call.key(&rw.writer).key(&rw.queue).key(&rw.readers).key(&rw.tokens);
                } else {
                    call.key(&rw.readers).key(&rw.tokens).key(&rw.writer).key(&rw.queue);
                }
                let r: i64 = call
                    .arg(owner)
                    .arg(RESERVE)
                    .arg(&rw.to_readers)
                    .arg(&rw.to_writers)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r
            }
        };
        assert_eq!(write("W", 0).await, 1);
        for (who, is_writer) in [("r1", false), ("r2", false), ("w2", true), ("r3", false)] {
            let r = if is_writer { write(who, REG).await } else { read(who, REG).await };
            assert_eq!(r, 0, "{who} waits while a writer holds");
        }
        let _ = woken(&mut messages).await;
        assert_eq!(leave("W", true).await, 1);
        assert_eq!(woken(&mut messages).await, ["@r1", "@r2"], "the writer's release wakes the readers at the head");
        assert_eq!(read("r3", REG).await, 0, "a reader behind a queued writer does not join");
        assert_eq!(read("n", 0).await, 0, "nor does a newcomer's single try");
        assert_eq!((read("r2", REG).await, read("r1", REG).await), (1, 1), "the readers at the head share");
        assert_eq!(write("w2", REG).await, 0, "the writer waits for the readers");
        assert_eq!(leave("r1", false).await, 1);
        assert_eq!(woken(&mut messages).await, Vec::<String>::new(), "a reader left, another still holds");
        assert_eq!(leave("r2", false).await, 1);
        assert_eq!(woken(&mut messages).await, ["@w2"], "the last reader out wakes the head writer");
        assert_eq!(write("w2", REG).await, 1);
        // A wait that ends without a grant leaves the queue (abandon is the release script).
        assert_eq!(leave("r3", false).await, 0, "r3 held nothing");
        assert_eq!(leave("w2", true).await, 1);
        let queue: Option<String> = redis::cmd("GET").arg(&rw.queue).query_async(&mut c.clone()).await.unwrap();
        assert_eq!(queue, None, "an empty queue leaves no key behind");
    }

    /// A permit waiter and a writer queued with a wake channel are woken there, and only there
    /// (the kind's channel, which every client of the name hears, carries no wake-up of theirs);
    /// re-registering with it keeps the place; a waiter without one is woken on the kind's
    /// channel as before.
    #[tokio::test]
    async fn kinds_waiters_are_woken_on_their_wake_channel() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let c = client.get_multiplexed_async_connection().await.unwrap();
        let name = LockName::new("kw").unwrap();
        let (sk, rw) = (SemKeys::new("kw", &name), RwKeys::new("kw", &name));
        let (mut named, mut own) = (client.get_async_pubsub().await.unwrap(), client.get_async_pubsub().await.unwrap());
        for ch in [&sk.channel, &rw.to_readers, &rw.to_writers] {
            named.subscribe(ch).await.unwrap();
        }
        own.subscribe("kw:wake:A").await.unwrap();
        let (mut named, mut own) = (named.into_on_message(), own.into_on_message());
        let _: () = redis::cmd("SET").arg("kw:boot").arg(0).query_async(&mut c.clone()).await.unwrap();
        let permit = |owner: &'static str, reg: i64, wake: &'static str| {
            let (mut c, sk) = (c.clone(), &sk);
            async move {
                let r: Vec<i64> = SEM_ACQUIRE
                    .key(&sk.holders)
                    .key(&sk.tokens)
                    .key(&sk.permits)
                    .key(&sk.queue)
                    .key(&sk.fence)
                    .key("kw:boot")
                    .arg(owner)
                    .arg(5000)
                    .arg(1)
                    .arg(reg)
                    .arg(0)
                    .arg(RESERVE)
                    .arg(&sk.channel)
                    .arg(wake)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r[0]
            }
        };
        let give_back = |owner: &'static str| {
            let (mut c, sk) = (c.clone(), &sk);
            async move {
                let r: i64 = SEM_RELEASE
                    .key(&sk.holders)
                    .key(&sk.tokens)
                    .key(&sk.permits)
                    .key(&sk.queue)
                    .arg(owner)
                    .arg(RESERVE)
                    .arg(&sk.channel)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r
            }
        };
        assert_eq!(permit("a", 0, "").await, 1);
        assert_eq!(permit("w", REG, "kw:wake:A").await, 0);
        assert_eq!(permit("v", REG, "").await, 0);
        assert_eq!(permit("w", REG, "kw:wake:A").await, 0, "re-registering keeps the place");
        let _ = (woken(&mut named).await, woken(&mut own).await);
        assert_eq!(give_back("a").await, 1);
        assert_eq!(woken(&mut own).await, ["@w"], "woken on its wake channel");
        let heard = woken(&mut named).await;
        assert!(heard.iter().all(|m| !m.starts_with('@')), "nothing for it on the kind's channel: {heard:?}");
        assert_eq!(permit("v", REG, "").await, 0, "w keeps its place");
        assert_eq!(permit("w", REG, "kw:wake:A").await, 1);
        assert_eq!(give_back("w").await, 1);
        assert_eq!(woken(&mut named).await, ["@v"], "no wake channel: the kind's channel");
        assert!(woken(&mut own).await.is_empty());
        assert_eq!(permit("v", REG, "").await, 1);

        // A writer queued behind a holder, woken on its wake channel by the release.
        let write = |owner: &'static str, reg: i64, wake: &'static str| {
            let (mut c, rw) = (c.clone(), &rw);
            async move {
                let r: Vec<i64> = RW_WRITE
                    .key(&rw.readers)
                    .key(&rw.tokens)
                    .key(&rw.writer)
                    .key(&rw.queue)
                    .key(&rw.fence)
                    .key("kw:boot")
                    .arg(owner)
                    .arg(5000)
                    .arg(reg)
                    .arg(0)
                    .arg(RESERVE)
                    .arg(&rw.to_readers)
                    .arg(&rw.to_writers)
                    .arg(wake)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                r[0]
            }
        };
        assert_eq!(write("W", 0, "").await, 1);
        assert_eq!(write("X", REG, "kw:wake:A").await, 0);
        let _ = (woken(&mut named).await, woken(&mut own).await);
        let left: i64 = RW_WRITE_RELEASE
            .key(&rw.writer)
            .key(&rw.queue)
            .key(&rw.readers)
            .key(&rw.tokens)
            .arg("W")
            .arg(RESERVE)
            .arg(&rw.to_readers)
            .arg(&rw.to_writers)
            .invoke_async(&mut c.clone())
            .await
            .unwrap();
        assert_eq!(left, 1);
        assert_eq!(woken(&mut own).await, ["@X"]);
        assert!(woken(&mut named).await.iter().all(|m| !m.starts_with('@')));
        assert_eq!(write("X", REG, "kw:wake:A").await, 1, "the woken writer takes it");
    }
}
