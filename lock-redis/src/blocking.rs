//! Blocking delivery, the waiter's side: a release hands the lock to the queue's head by pushing
//! the grant's token onto a list that head alone blocks on, and the head holds at once, without
//! the claim's round trip that a hint costs before it may hold (`crate::handoff`).
//!
//! A waiting `acquire` (a subscription of the exclusive lock of one server, single or Sentinel)
//! takes a connection of its own and sends on it, back to back, the **arm** script and `BLPOP`
//! of its list (`scripts::exclusive`, `ARM_SRC`). The arm marks the owner armed for [`BLOCK_MS`];
//! a release that grants an armed head (provisionally, for the claim window, as any grant in the
//! release) pushes the token onto its list instead of publishing the hint. The popped token
//! reaches the wait as a [`PushedGrant`]: the wait returns a lease with it at once, believed for
//! the claim window from the instant the arm was sent (the push ran after the arm, the arm after
//! that instant, so the server's grant ends no sooner), and the lease's first renewal claims it
//! for a whole ttl (`ClaimPushed`, owner- and token-checked, never granting). That claim is
//! deferred a third into the window ([`PushedGrant::claim_deferred`]), so a hold shorter than
//! that never claims: the release frees or hands on an unclaimed grant as it does a claimed one,
//! and a claim that was never sent before the release never is (measured: hand-off p50 113 →
//! 89 µs on loopback, BENCHMARKS.md). A token that arrives after that belief ended is a hint.
//!
//! Why a connection of its own, and why it never serves another wait while its `BLPOP` is out:
//! the `BLPOP`'s reply then belongs to this wait's own arm and instant, which no publisher can
//! forge (a push needs write rights on the lock's keys, which can break any lock anyway); a
//! connection whose wait ended with a `BLPOP` still out is dropped, never reused, so a later wait
//! cannot take this one's grant. Idle connections (their `BLPOP` answered) are kept for the next
//! waits, so a wait usually costs no connect.
//!
//! The design is model-checked first: `lock-model`'s `Delivery::Blocking` with its five bug
//! switches (no drain, counting from the reply, a pop after the wait ended, a lapsed pop taken,
//! a claim sent after the release that re-creates the lease: `claim_after_release`), each of
//! which gives two holders or a token going back; the model lets a holder release before its
//! claim is sent or answered.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::{PushSender, PushedGrant, WakeSubscription};
use lock_core::{FencingToken, LockError};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::cluster::Conn;
use crate::conn::dial;
use crate::endpoint::Endpoint;
use crate::handoff::CLAIM_MS;
use crate::scripts::{Keys, ARM, ARM_SRC};

/// How long one arm lasts, and its `BLPOP`'s timeout (ms): a wait that lasts longer arms again.
pub(crate) const BLOCK_MS: u64 = 2000;

/// How many idle connections are kept for the next waits.
const IDLE: usize = 32;

/// How many waits of one client block at once, each on a connection of its own: beyond that a
/// wait is woken by hints (as on a Cluster), so that a process with thousands of waiters does
/// not open thousands of connections (Redis's `maxclients` is 10,000 by default).
pub(crate) const MAX_BLOCKED: usize = 64;

/// The waits of one client that deliver at once, at most [`MAX_BLOCKED`]: each runs in a task of
/// its own until the wait ends (its subscription dropped) or its delivery does.
#[derive(Default)]
pub(crate) struct Deliveries(AtomicUsize);

impl Deliveries {
    /// Runs `deliver` with the sender of `sub`'s pushed grants; beyond [`MAX_BLOCKED`] waits at
    /// once, the subscription is returned as it is (hints). When the wait ends first, the
    /// delivery is dropped, and a `BLPOP` still out goes with its connection.
    pub(crate) fn start<F, Fut>(self: &Arc<Self>, sub: WakeSubscription, deliver: F) -> WakeSubscription
    where
        F: FnOnce(PushSender) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let taken = self.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < MAX_BLOCKED).then_some(n + 1));
        if taken.is_err() {
            return sub;
        }
        let (sub, tx) = sub.with_pushes();
        let delivery = deliver(tx.clone());
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::select! {
                () = tx.closed() => {}
                () = delivery => {}
            }
            this.0.fetch_sub(1, Ordering::SeqCst);
        });
        sub
    }
}

/// The dedicated connections of one server's waits.
pub(crate) struct Blocking {
    endpoint: Endpoint,
    label: String,
    connect_timeout: Duration,
    request_timeout: Duration,
    idle: Mutex<Vec<MultiplexedConnection>>,
    /// Waits delivering now.
    waits: Arc<Deliveries>,
    /// The scripts a new connection loads: the arm of this deployment's queue.
    sources: Vec<&'static str>,
}

/// How one arm and `BLPOP` ended.
pub(crate) enum Popped {
    /// A release's grant: its token.
    Grant(FencingToken),
    /// A hint: attempt now (the arm drained a grant pushed before it).
    Hint,
    /// No release will push to this owner (not queued, or its entry takes no grants).
    Never,
    /// The `BLPOP` timed out: arm again.
    Nothing,
}

impl Blocking {
    /// The single instance's delivery (its arm, `ARM_SRC`).
    pub(crate) fn new(endpoint: Endpoint, label: String, connect_timeout: Duration, request_timeout: Duration) -> Self {
        Self::with_arm(endpoint, label, connect_timeout, request_timeout, ARM_SRC)
    }

    /// A server's dedicated connections whose arm is `arm` (a Redlock master's: its own queue).
    pub(crate) fn with_arm(
        endpoint: Endpoint,
        label: String,
        connect_timeout: Duration,
        request_timeout: Duration,
        arm: &'static str,
    ) -> Self {
        Blocking {
            endpoint,
            label,
            connect_timeout,
            request_timeout,
            idle: Mutex::new(Vec::new()),
            waits: Arc::default(),
            sources: vec![arm],
        }
    }

    /// The server, for logs.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// Gives the wait of `owner` on `keys` blocking delivery: returns its subscription with the
    /// channel the popped grants arrive on. The delivery ends when the wait does (the
    /// subscription dropped), or when nothing more can be pushed.
    /// Beyond [`MAX_BLOCKED`] waits at once, the subscription is returned as it is (hints).
    pub(crate) fn arm(self: &Arc<Self>, sub: WakeSubscription, keys: &Keys, owner: &str) -> WakeSubscription {
        let this = Arc::clone(self);
        let (keys, owner) = (keys.clone(), owner.to_owned());
        self.waits.start(sub, move |tx| async move { this.deliver(&tx, &keys, &owner).await })
    }

    /// Arms and blocks until a grant, or until no push can come; after a broken connection it
    /// arms again on a new one (with a pause that doubles up to a second) as long as the wait
    /// lasts: the broken connection's mark may still be live, and a release would then push to
    /// a list nobody pops, with no hint. The new arm drains such a push and answers it as a hint.
    async fn deliver(&self, tx: &PushSender, keys: &Keys, owner: &str) {
        let list = keys.pushes(owner);
        let mut pause = Duration::from_millis(20);
        loop {
            let broken = match self.connection().await {
                Ok(mut conn) => match self.block(&mut conn, tx, keys, owner, &list).await {
                    Ok(()) => {
                        self.keep(conn);
                        return;
                    }
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            // A grant popped as the connection broke is lost with it: the wait attempts (its
            // acquire claims a grant that is still its own), and the other idle connections may
            // be as stale (a restart, a failover).
            tracing::debug!(server = %self.label, error = %broken, "blocking delivery failed; waking the wait, arming again");
            self.forget_idle();
            let _ = tx.send(None);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Arms and blocks on `conn` until a grant (sent to the wait) or an answer that no push can
    /// come; a hint on the way is sent to the wait, and it arms again.
    async fn block(
        &self,
        conn: &mut MultiplexedConnection,
        tx: &PushSender,
        keys: &Keys,
        owner: &str,
        list: &str,
    ) -> redis::RedisResult<()> {
        loop {
            let armed_at = Instant::now();
            match arm_and_pop(conn, keys, owner, list).await? {
                Popped::Nothing => {}
                Popped::Hint => {
                    let _ = tx.send(None);
                }
                Popped::Grant(token) => {
                    let _ = tx.send(Some(
                        PushedGrant::new(token, armed_at, Duration::from_millis(CLAIM_MS)).claim_deferred(),
                    ));
                    return Ok(());
                }
                Popped::Never => return Ok(()),
            }
        }
    }

    /// An idle connection, or a new one (bounded by the connect timeout) with the arm loaded.
    pub(crate) async fn connection(&self) -> Result<MultiplexedConnection, LockError> {
        if let Some(conn) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(conn);
        }
        // The `BLPOP` waits up to BLOCK_MS: its reply may take that long plus a request.
        let response = Duration::from_millis(BLOCK_MS) + self.request_timeout;
        match dial(&self.endpoint, &self.label, self.connect_timeout, response, self.sources.clone()).await {
            Ok(Conn::Single(conn)) => Ok(conn),
            Ok(_) => Err(LockError::config("blocking delivery runs on a single server or Sentinel's primary only")),
            Err(e) => Err(e.into_lock_error("redis")),
        }
    }

    /// Keeps a connection whose `BLPOP` was answered for the next waits.
    pub(crate) fn keep(&self, conn: MultiplexedConnection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE {
            idle.push(conn);
        }
    }

    /// Drops the idle connections: one broke, and the others may be as stale (a restart, a
    /// failover).
    pub(crate) fn forget_idle(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// One arm and its `BLPOP`, pipelined: the server runs the arm, then the `BLPOP`, and the one
/// reply comes when the `BLPOP` ends (at once when the arm answered on the list).
async fn arm_and_pop(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    owner: &str,
    list: &str,
) -> redis::RedisResult<Popped> {
    let mut pipe = redis::pipe();
    pipe.cmd("EVALSHA").arg(ARM.get_hash()).arg(3).arg(&keys.waiter_entries).arg(&keys.armed).arg(list);
    pipe.arg(owner).arg(BLOCK_MS);
    pipe.cmd("BLPOP").arg(list).arg(BLOCK_MS as f64 / 1000.0);
    let (_armed, popped): (i64, Option<(String, String)>) = pipe.query_async(conn).await?;
    Ok(Popped::of(popped))
}

impl Popped {
    /// What a `BLPOP` after an arm answered: the list's value, if any.
    pub(crate) fn of(popped: Option<(String, String)>) -> Popped {
        match popped.as_ref().map(|(_, v)| v.as_str()) {
            None => Popped::Nothing,
            Some("h") => Popped::Hint,
            Some("x") => Popped::Never,
            Some(v) => match v.parse::<u64>() {
                Ok(token) => Popped::Grant(FencingToken(token)),
                Err(_) => Popped::Hint,
            },
        }
    }
}
