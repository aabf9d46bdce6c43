//! The PostgreSQL model's server steps against lock-sql's real statements
//! (`lock_sql::model_text`, the text `lock-sql/src/dialect/postgres/sql.rs` builds), on a real
//! PostgreSQL (`DLOCK_TEST_POSTGRES_URL`, else a local server): seeded walks through the model
//! run every statement the model runs, as the store runs it (a refused acquire that finds the
//! row free hands it on; a waiter's place is the `seq` its queued answer gave), each walk on
//! its own fresh tables, and compare step by step the answer (token granted or claimed, renewed
//! or not), the row's owner, token (in order) and expiry tick, and the live queue in order with
//! each entry's end.
//!
//! Time: a tick is [`TICK`] of the database's clock, advanced without sleeping: at each model
//! tick every `expires_at` of the walk's tables moves back by what is left of the tick, so the
//! statements' `now()` reads the tick's start plus the little real time its steps took. Every
//! duration the statements are given is its model length less half a tick, so what the model
//! ends at tick `t + k` ends in the second half of tick `t + k − 1`: after every step of that
//! tick (all in its first half) and before any of the next. lock-sql's claim window (1 s, not a
//! parameter) is thus one tick: half of a 2 s tick. A walk whose steps overran half a tick (a
//! stalled machine) is run again.

use std::time::Duration;

use dlock_testkit::servers::postgres::PostgresServer;
use lock_model::pg::{Action, Bugs, Client, InFlight, OwnAction, Pg, State, Stmt, CLAIM, ENTRY_LIFE, TTL};
use lock_sql::model_text::{statements, PgStatements};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};

#[path = "common/walk.rs"]
mod walk;
use walk::{Tokens, Walk};

/// Database time per model tick.
const TICK: Duration = Duration::from_secs(2);
/// Walks per run.
const WALKS: u64 = 40;
/// Times a walk that overran half a tick is run again.
const TRIES: usize = 4;
/// The lock name every walk uses (on its own tables).
const NAME: &str = "model";
/// lock-sql's `CLAIM_WINDOW` (`dialect/postgres/handoff.rs`): a release's grant lasts
/// `min(ttl, this)`.
const CLAIM_WINDOW_MS: i64 = 1000;

/// The milliseconds a length of `ticks` ticks is given to the statements (module docs).
fn ms(ticks: u8) -> i64 {
    let tick = TICK.as_millis() as i64;
    i64::from(ticks) * tick - tick / 2
}

/// A statement the model runs on the database.
#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(u8),
    Claim(u8),
    Renew(u8),
    Release(u8),
    /// A leave's first statement (its entry deleted).
    Leave(u8),
    /// A leave's second statement (a grant released and the lock handed on).
    HandOn(u8),
}

/// A statement's answer as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply<T> {
    /// An acquire or claim: the token granted, or none.
    Token(Option<T>),
    /// A renewal: whether it renewed.
    Renewed(bool),
    /// Nothing the client reads.
    Done,
}

/// The statements `action` runs on the database, from the state before it.
fn ops(pre: &State, action: Action) -> Vec<Op> {
    let c = |c: u8| pre.clients[c as usize];
    match action {
        Action::Apply(x) | Action::ApplyReplyLost(x) => match c(x) {
            Client::Attempting { stmt: Stmt::Claim, .. } => vec![Op::Claim(x)],
            _ => vec![Op::Acquire(x)],
        },
        Action::Stray(x) => match pre.strays[x as usize] {
            Some(InFlight::Acquire) => vec![Op::Acquire(x)],
            Some(InFlight::Renew) => vec![Op::Renew(x)],
            None => Vec::new(),
        },
        Action::Own(OwnAction::Renewed(x)) => vec![Op::Renew(x)],
        Action::Release(x) => vec![Op::Release(x)],
        Action::Abandon(x) => match c(x) {
            Client::Leaving { entry_gone: false } => vec![Op::Leave(x)],
            _ => vec![Op::HandOn(x)],
        },
        _ => Vec::new(),
    }
}

/// The model's server step for `op`, on `s`.
fn model_op(model: &Pg, s: &mut State, op: Op) -> Reply<u8> {
    match op {
        Op::Acquire(c) => Reply::Token(model.acquire(s, c)),
        Op::Claim(c) => Reply::Token(model.claim(s, c)),
        Op::Renew(c) => Reply::Renewed(Pg::renew(s, c)),
        Op::Release(c) => {
            Pg::release(s, c);
            Reply::Done
        }
        Op::Leave(c) => {
            Pg::leave_queue(s, c);
            Reply::Done
        }
        Op::HandOn(c) => {
            Pg::leave_hand_on(s, c);
            Reply::Done
        }
    }
}

/// What the comparison reads of the database: the row (owner, token, its end tick while it is
/// live) and the live queue entries (owner, end tick) in order.
#[derive(Debug, PartialEq, Eq)]
struct View<T> {
    row: Option<(u8, T, Option<u8>)>,
    queue: Vec<(u8, u8)>,
}

fn model_view(s: &State) -> View<u8> {
    View {
        row: s.row.map(|r| (r.owner, r.token, (r.expires > s.now).then_some(r.expires))),
        queue: s.queue.iter().copied().filter(|&(_, live)| live > s.now).collect(),
    }
}

/// One walk's database side: its connection and tables, its clock and the tokens seen.
struct Real {
    conn: PgConnection,
    sql: PgStatements,
    table: String,
    /// The database's `now()` in ms at the walk's start: tick 0.
    base_ms: i64,
    /// How far every expiry was moved back: the walk's time is `now() + shift`.
    shift: i64,
    tokens: Tokens,
}

/// `now()` in ms, as the statements read it.
const NOW_MS: &str = "(extract(epoch from now()) * 1000)::bigint";
/// [`NOW_MS`] as a query.
const NOW: &str = "SELECT (extract(epoch from now()) * 1000)::bigint";

impl Real {
    async fn new(url: &str, table: String) -> sqlx::Result<Real> {
        let mut conn = PgConnection::connect(url).await?;
        let sql = statements(&table);
        conn.execute(AssertSqlSafe(sql.lease_ddl.clone())).await?;
        conn.execute(AssertSqlSafe(sql.queue_ddl.clone())).await?;
        let base_ms: i64 = sqlx::query_scalar(NOW).fetch_one(&mut conn).await?;
        Ok(Real { conn, sql, table, base_ms, shift: 0, tokens: Tokens::default() })
    }

    async fn drop_tables(mut self) -> sqlx::Result<()> {
        let both = format!("DROP TABLE {}, {}", self.table, self.sql.queue_table);
        self.conn.execute(AssertSqlSafe(both)).await.map(drop)
    }

    fn owner(c: u8) -> String {
        format!("c{c}")
    }

    /// The walk's time now, in ms since its start.
    async fn elapsed(&mut self) -> sqlx::Result<i64> {
        let now: i64 = sqlx::query_scalar(NOW).fetch_one(&mut self.conn).await?;
        Ok(now + self.shift - self.base_ms)
    }

    /// Moves the walk's time to the start of tick `t`; `false` when it is already past it.
    async fn advance(&mut self, t: u8) -> sqlx::Result<bool> {
        let by = i64::from(t) * TICK.as_millis() as i64 - self.elapsed().await?;
        if by < 0 {
            return Ok(false);
        }
        for table in [&self.table, &self.sql.queue_table] {
            let back = format!("UPDATE {table} SET expires_at = expires_at - $1");
            sqlx::query(AssertSqlSafe(back)).bind(by).execute(&mut self.conn).await?;
        }
        self.shift += by;
        Ok(true)
    }

    /// Runs `op` as the store runs it.
    async fn run(&mut self, op: Op) -> sqlx::Result<Reply<i64>> {
        let handing = |sql: &str, owner: String| {
            sqlx::query(AssertSqlSafe(sql.to_owned())).bind(NAME).bind(owner).bind("dlock_model").bind("w:")
        };
        match op {
            Op::Acquire(c) => self.acquire(c).await,
            Op::Claim(c) => {
                let fence: Option<i64> = sqlx::query_scalar(AssertSqlSafe(self.sql.claim.clone()))
                    .bind(NAME)
                    .bind(Self::owner(c))
                    .bind(ms(TTL))
                    .fetch_optional(&mut self.conn)
                    .await?;
                Ok(Reply::Token(fence))
            }
            Op::Renew(c) => {
                let done = sqlx::query(AssertSqlSafe(self.sql.renew.clone()))
                    .bind(NAME)
                    .bind(Self::owner(c))
                    .bind(ms(TTL))
                    .execute(&mut self.conn)
                    .await?;
                Ok(Reply::Renewed(done.rows_affected() > 0))
            }
            Op::Release(c) => {
                handing(&self.sql.release, Self::owner(c)).fetch_all(&mut self.conn).await?;
                Ok(Reply::Done)
            }
            Op::Leave(c) => {
                let leave = sqlx::query(AssertSqlSafe(self.sql.leave_queue.clone()));
                leave.bind(NAME).bind(Self::owner(c)).execute(&mut self.conn).await?;
                Ok(Reply::Done)
            }
            Op::HandOn(c) => {
                handing(&self.sql.hand_on, Self::owner(c)).fetch_all(&mut self.conn).await?;
                Ok(Reply::Done)
            }
        }
    }

    /// The waiting acquire (`lock-sql/src/store/mod.rs` `try_lock`), refused on a free row (owed
    /// to a waiter before it) followed by the hand-on with no owner of its own. The caller's
    /// place (`$7`) is its live entry's `seq`, the model's input (its position in the queue);
    /// the store passes the `seq` of its latest queued answer even once that entry is gone (the
    /// README's "Not yet modelled").
    async fn acquire(&mut self, c: u8) -> sqlx::Result<Reply<i64>> {
        type Row4 = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);
        let place = format!(
            "SELECT seq FROM {} WHERE name = $1 AND owner = $2 AND expires_at > {NOW_MS}",
            self.sql.queue_table
        );
        let place: Option<i64> = sqlx::query_scalar(AssertSqlSafe(place))
            .bind(NAME)
            .bind(Self::owner(c))
            .fetch_optional(&mut self.conn)
            .await?;
        let row: Option<Row4> = sqlx::query_as(AssertSqlSafe(self.sql.acquire.clone()))
            .bind(NAME)
            .bind(Self::owner(c))
            .bind(ms(TTL))
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(ms(ENTRY_LIFE))
            .bind(place.unwrap_or(i64::MAX))
            .bind(format!("dlock_model_c{c}"))
            .fetch_optional(&mut self.conn)
            .await?;
        let Some((granted, remaining, _seq, seen)) = row else { return Ok(Reply::Token(None)) };
        if let Some(fence) = granted {
            return Ok(Reply::Token(Some(fence)));
        }
        if remaining.is_none() && seen.is_some() {
            let hand_on = sqlx::query(AssertSqlSafe(self.sql.hand_on.clone()));
            hand_on.bind(NAME).bind("").bind("dlock_model").bind("w:").fetch_all(&mut self.conn).await?;
        }
        Ok(Reply::Token(None))
    }

    /// The database as the model sees it, read now (one transaction: one `now()`), and whether
    /// every step of the current tick `now` ran in its first half.
    async fn view(&mut self, now: u8) -> sqlx::Result<(View<i64>, bool)> {
        let mut tx = self.conn.begin().await?;
        let row = format!("SELECT owner, fence, expires_at - {NOW_MS} FROM {} WHERE name = $1", self.table);
        let row: Option<(Option<String>, i64, i64)> =
            sqlx::query_as(AssertSqlSafe(row)).bind(NAME).fetch_optional(&mut *tx).await?;
        let queue = format!(
            "SELECT owner, expires_at - {NOW_MS} FROM {} WHERE name = $1 AND expires_at > {NOW_MS} \
             ORDER BY seq, owner",
            self.sql.queue_table
        );
        let queue: Vec<(String, i64)> = sqlx::query_as(AssertSqlSafe(queue)).bind(NAME).fetch_all(&mut *tx).await?;
        let now_ms: i64 = sqlx::query_scalar(NOW).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        let at = now_ms + self.shift - self.base_ms;
        let tick = TICK.as_millis() as i64;
        let end = |left: i64| u8::try_from((at + left).div_euclid(tick) + 1).expect("within the walk");
        let client = |o: &str| o.trim_start_matches('c').parse::<u8>().expect("an owner of the walk");
        let view = View {
            row: row.and_then(|(o, fence, left)| o.map(|o| (client(&o), fence, (left > 0).then(|| end(left))))),
            queue: queue.iter().map(|(o, left)| (client(o), end(*left))).collect(),
        };
        let in_time = at - i64::from(now) * tick < tick / 2 - 50;
        Ok((view, in_time))
    }

    fn translate(&mut self, view: View<i64>, model: &View<u8>) -> View<u8> {
        let row = view.row.map(|(c, t, e)| (c, self.tokens.translate(t, model.row.map_or(0, |r| r.1)), e));
        View { row, queue: view.queue }
    }
}

/// The model the walks go through: every fault that changes what the database runs.
fn model() -> Pg {
    Pg { clients: 3, rounds: 3, max_tick: 10, forge: 1, lose: 1, polls: 2, ..Pg::processes(Bugs::default()) }
}

/// A fault, which the walks take rarely so that the lock changes hands before it.
fn fault(action: Action) -> bool {
    matches!(action, Action::Crash(_) | Action::Leave(_) | Action::ApplyReplyLost(_) | Action::Net(_))
}

/// One walk; `Ok(false)` when its steps overran half a tick (run it again).
async fn walk(url: &str, seed: u64, try_no: usize) -> sqlx::Result<bool> {
    let mut real = Real::new(url, format!("dlock_model_diff_{}_{seed}_{try_no}", std::process::id())).await?;
    let mut w = Walk::new(model(), seed, 100, Action::Tick, fault);
    while let Some((action, next)) = w.next() {
        if action == Action::Tick && !real.advance(next.now).await? {
            real.drop_tables().await?;
            return Ok(false);
        }
        // The model's server steps alone, on the state before the action at its instant.
        let mut mirror = State { now: next.now, ..w.s.clone() };
        let mut replies = Vec::new();
        for op in ops(&w.s, action) {
            let want = model_op(&w.model, &mut mirror, op);
            let got = match (real.run(op).await?, want) {
                (Reply::Token(t), Reply::Token(w)) => Reply::Token(t.map(|t| real.tokens.translate(t, w.unwrap_or(0)))),
                (Reply::Renewed(r), _) => Reply::Renewed(r),
                (Reply::Done, _) => Reply::Done,
                (Reply::Token(t), _) => Reply::Token(t.map(|_| u8::MAX)),
            };
            replies.push((op, got, want));
        }
        assert_eq!(model_view(&mirror), model_view(&next), "walk {seed}: the ops of {action:?} are the model's");
        let (view, in_time) = real.view(next.now).await?;
        if !in_time {
            real.drop_tables().await?;
            return Ok(false);
        }
        let want = model_view(&next);
        let got = real.translate(view, &want);
        w.agree(next, replies, got, want);
    }
    eprintln!("walk {seed}: {} steps agree: {:?}", w.trace.len(), w.trace);
    real.drop_tables().await?;
    Ok(true)
}

#[tokio::test]
async fn the_model_steps_are_the_statements() {
    assert_eq!(ms(CLAIM), CLAIM_WINDOW_MS, "lock-sql's claim window is one model tick");
    let server = PostgresServer::start().await.expect("a PostgreSQL server (DLOCK_TEST_POSTGRES_URL or a local one)");
    let url = server.url().to_owned();
    for seed in 1..=WALKS {
        let mut agreed = false;
        for try_no in 0..TRIES {
            if walk(&url, seed, try_no).await.expect("PostgreSQL answers") {
                agreed = true;
                break;
            }
            eprintln!("walk {seed}: a step overran half a tick; run again");
        }
        assert!(agreed, "walk {seed} overran half a tick {TRIES} times: the machine is too busy to compare");
    }
}
