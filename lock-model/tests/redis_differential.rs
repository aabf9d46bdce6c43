//! The Redis single-instance model's server steps against lock-redis's real scripts, on a real
//! Redis: walks through the model (seeded, so each run takes the same walks) run every script
//! the model runs, at the matching instant, and compare step by step the reply, the lease's
//! owner, token and expiry (in ticks) and the live queue in order.
//!
//! Time: a tick is [`TICK`] of real time and every step of a tick runs in its first half. Each
//! duration a script is given is its model length in ticks less half a tick, so what the model
//! ends at tick `t + k` ends in the middle of tick `t + k − 1` for real: after every step of
//! that tick and before any of the next, whatever the offset within the tick of the step that
//! set it. A walk whose steps overran half a tick (a stalled machine) is run again.

use std::collections::BTreeMap;
use std::time::Duration;

use dlock_testkit::servers::redis::RedisServer;
use lock_core::LockName;
use lock_model::handoff::{Action, Bugs, Client, Handoff, OwnAction, State, CLAIM, ENTRY_LIFE, QUIET, RESERVE, TTL};
use lock_redis::scripts::{Acquire, HandOff, HandOffScript, Keys};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use tokio::time::Instant;

#[path = "common/walk.rs"]
mod walk;
use walk::{Tokens, Walk};

/// Real time per model tick.
const TICK: Duration = Duration::from_millis(800);
/// Walks per run, run side by side (each on its own keys).
const WALKS: u64 = 12;
/// Times a walk that overran half a tick is run again.
const TRIES: usize = 4;

/// The milliseconds a length of `ticks` ticks is given to the scripts (module docs).
fn ms(ticks: u8) -> u64 {
    let half = TICK.as_millis() as u64 / 2;
    u64::from(ticks) * TICK.as_millis() as u64 - half
}

/// A script the model runs on the server.
#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(u8),
    Release(u8),
    Abandon(u8),
    Restart,
}

/// The scripts `action` runs on the server, from the state before it.
fn ops(pre: &State, action: Action) -> Vec<Op> {
    match action {
        Action::Apply(c) => match pre.clients[c as usize] {
            Client::Attempting { leaving: true, .. } => vec![Op::Acquire(c), Op::Abandon(c)],
            _ => vec![Op::Acquire(c)],
        },
        Action::ApplyReplyLost(c) | Action::Stray(c) => vec![Op::Acquire(c)],
        Action::Release(c) => vec![Op::Release(c)],
        Action::Abandon(c) => vec![Op::Abandon(c)],
        Action::Own(OwnAction::Restart) => vec![Op::Restart],
        _ => Vec::new(),
    }
}

/// What the comparison reads of the server: the live lease (owner, token, expiry tick) and the
/// live queue entries (owner, end tick) in order.
#[derive(Debug, PartialEq, Eq)]
struct View<T> {
    lease: Option<(u8, T, u8)>,
    queue: Vec<(u8, u8)>,
}

fn model_view(s: &State) -> View<u8> {
    View {
        lease: s.grant_live().map(|g| (g.client, g.token, g.expires)),
        queue: s.queue.iter().copied().filter(|&(_, live)| live > s.now).collect(),
    }
}

/// One walk's real side: its keys, its clock and the tokens seen.
struct Real {
    conn: MultiplexedConnection,
    keys: Keys,
    marker: String,
    prefix: String,
    base: Instant,
    base_ms: i64,
    tokens: Tokens,
}

impl Real {
    async fn new(url: &str, prefix: String) -> redis::RedisResult<Real> {
        let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        let keys = Keys::new(&prefix, &LockName::new("model").expect("a valid name"));
        let marker = format!("{prefix}:boot");
        // Marked long ago, as the model's server starts: no quiet period.
        let () = conn.set(&marker, "0").await?;
        // The server's clock is the reference: the local base is taken after the server's, so a
        // step is never early by the server's clock, and whether it was late is read there.
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        let base = Instant::now();
        let base_ms = secs * 1000 + micros / 1000;
        Ok(Real { conn, keys, marker, prefix, base, base_ms, tokens: Tokens::default() })
    }

    fn owner(c: u8) -> String {
        format!("c{c}")
    }

    fn wake(&self, c: u8) -> String {
        format!("{}:wake:c{c}", self.prefix)
    }

    /// The tick in which a real instant `ms` after the base falls, plus one: the model's end.
    fn end_tick(ms: i64) -> u8 {
        u8::try_from(ms.div_euclid(TICK.as_millis() as i64) + 1).expect("within the walk")
    }

    /// Runs `op`; an acquire's reply: `Some(Some(token))` granted, `Some(None)` refused.
    async fn run(&mut self, op: Op) -> redis::RedisResult<Option<Option<i64>>> {
        match op {
            Op::Acquire(c) => {
                let (owner, wake, ttl) = (Self::owner(c), self.wake(c), ms(TTL).to_string());
                let call = Acquire {
                    keys: &self.keys,
                    owner: &owner,
                    ttl_ms: ms(TTL),
                    quiet_ms: ms(QUIET),
                    holder: "",
                    metadata: "",
                    fence_ms: 0,
                    registration_ms: ms(ENTRY_LIFE),
                    reserve_ms: ms(RESERVE),
                    wake: &wake,
                    grant: &ttl,
                    max_waiters: 100,
                };
                let reply = call.invoke(&self.marker, &mut self.conn).await?;
                Ok(Some((reply[0] == 1).then_some(reply[1])))
            }
            Op::Release(c) | Op::Abandon(c) => {
                let script = if matches!(op, Op::Release(_)) { HandOffScript::Release } else { HandOffScript::Abandon };
                let (owner, wake) = (Self::owner(c), self.wake(c));
                let call = HandOff {
                    script,
                    keys: &self.keys,
                    owner: &owner,
                    reserve_ms: ms(RESERVE),
                    wake: &wake,
                    claim_ms: ms(CLAIM),
                };
                call.invoke(&mut self.conn).await?;
                Ok(None)
            }
            Op::Restart => {
                let k = &self.keys;
                let keys = [&k.lock, &k.fence, &k.waiters, &k.waiter_ends, &k.waiter_entries, &self.marker];
                let _: i64 = self.conn.del(&keys[..]).await?;
                Ok(None)
            }
        }
    }

    /// The server as the model sees it, read now, and whether every step of the current tick
    /// `now` ran in its first half by the server's clock.
    async fn view(&mut self, now: u8) -> redis::RedisResult<(View<i64>, bool)> {
        let k = &self.keys;
        // One transaction: the lease's end and the entries' ends are compared with the instant
        // `TIME` says. The name's hash (lock-redis `scripts/lease.rs`): owner `o`, token `f`,
        // and `e`, the server time in ms through which the lease is live.
        type Read = (Option<String>, Option<i64>, Option<i64>, (i64, i64), Vec<String>, Vec<(String, i64)>);
        let (owner, token, ends_at, (secs, micros), order, ends): Read = redis::pipe()
            .atomic()
            .hget(&k.lock, "o")
            .hget(&k.lock, "f")
            .hget(&k.lock, "e")
            .cmd("TIME")
            .zrange(&k.waiters, 0, -1)
            .zrange_withscores(&k.waiter_ends, 0, -1)
            .query_async(&mut self.conn)
            .await?;
        let now_ms = secs * 1000 + micros / 1000;
        let client = |o: &str| o.trim_start_matches('c').parse::<u8>().expect("an owner of the walk");
        let lease = match (owner, token, ends_at) {
            (Some(o), Some(t), Some(e)) if e >= now_ms => Some((client(&o), t, Self::end_tick(e - self.base_ms))),
            _ => None,
        };
        let ends: BTreeMap<String, i64> = ends.into_iter().collect();
        let queue = order
            .iter()
            .filter_map(|o| {
                ends.get(o).filter(|&&e| e > now_ms).map(|&e| (client(o), Self::end_tick(e - self.base_ms)))
            })
            .collect();
        let half = i64::try_from((TICK * u32::from(now) + TICK / 2 - Duration::from_millis(50)).as_millis());
        let in_time = half.is_ok_and(|half| now_ms - self.base_ms < half);
        Ok((View { lease, queue }, in_time))
    }

    fn translate(&mut self, view: View<i64>, model: &View<u8>) -> View<u8> {
        let lease = view.lease.map(|(c, t, e)| {
            let want = model.lease.map_or(0, |l| l.1);
            (c, self.tokens.translate(t, want), e)
        });
        View { lease, queue: view.queue }
    }
}

/// The model the walks go through: every fault that changes what the server runs.
fn model() -> Handoff {
    let bugs = Bugs::default();
    Handoff {
        clients: 3,
        rounds: 3,
        max_tick: 8,
        lose: 1,
        polls: 2,
        crash: 1,
        leave: 1,
        restart: 1,
        ..Handoff::processes(bugs)
    }
}

/// A fault, which the walks take rarely so that the lock changes hands before it.
fn fault(action: Action) -> bool {
    matches!(action, Action::Crash(_) | Action::Leave(_) | Action::Own(OwnAction::Restart) | Action::ApplyReplyLost(_))
}

/// One walk; `Ok(false)` when its steps overran half a tick (run it again).
async fn walk(url: &str, seed: u64, try_no: usize) -> redis::RedisResult<bool> {
    let mut real = Real::new(url, format!("dlock-model-diff-{}-{seed}-{try_no}", std::process::id())).await?;
    let mut w = Walk::new(model(), seed, 80, Action::Tick, fault);
    while let Some((action, next)) = w.next() {
        if action == Action::Tick {
            tokio::time::sleep_until(real.base + TICK * u32::from(next.now)).await;
        }
        let mut mirror = State { now: next.now, ..w.s.clone() };
        let mut replies = Vec::new();
        for op in ops(&w.s, action) {
            let want = match op {
                Op::Acquire(c) => Some(w.model.acquire(&mut mirror, c)),
                Op::Release(c) => {
                    w.model.release(&mut mirror, c);
                    None
                }
                Op::Abandon(c) => {
                    w.model.abandon(&mut mirror, c);
                    None
                }
                Op::Restart => {
                    Handoff::restart(&mut mirror);
                    None
                }
            };
            let got = real.run(op).await?;
            let got = got.map(|reply| reply.map(|t| real.tokens.translate(t, want.flatten().unwrap_or(0))));
            replies.push((op, got, want));
        }
        assert_eq!(model_view(&mirror), model_view(&next), "walk {seed}: the ops of {action:?} are the model's");
        let (view, in_time) = real.view(next.now).await?;
        if !in_time {
            return Ok(false);
        }
        let want = model_view(&next);
        let got = real.translate(view, &want);
        w.agree(next, replies, got, want);
    }
    eprintln!("walk {seed}: {} steps agree: {:?}", w.trace.len(), w.trace);
    Ok(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_steps_are_the_scripts() {
    let server = RedisServer::start().await.expect("a Redis server (DLOCK_TEST_REDIS_URL or redis-server)");
    let url = server.url().to_owned();
    let mut walks = Vec::new();
    for seed in 1..=WALKS {
        let url = url.clone();
        walks.push(tokio::spawn(async move {
            for try_no in 0..TRIES {
                if walk(&url, seed, try_no).await.expect("Redis answers") {
                    return;
                }
                eprintln!("walk {seed}: a step overran half a tick; run again");
            }
            panic!("walk {seed} overran half a tick {TRIES} times: the machine is too busy to compare");
        }));
    }
    for w in walks {
        w.await.expect("the walk ran");
    }
}
