//! Blocking delivery on Redlock, the waiter's side: a release that grants the lock to the
//! queue's head on a master where that head is armed takes the token it leaves on the head's
//! behalf and pushes it to a list the head alone blocks on (`REDLOCK_RELEASE_SRC`); the head
//! holds once pops from a **majority of masters name one token**, without a lease step, so
//! that a hand-off costs the release and the push, as on a single instance (`crate::blocking`).
//!
//! A waiting `acquire` arms every master on a dedicated connection of its own there
//! (`REDLOCK_ARM_SRC`, then `BLPOP` of its list, back to back) and remembers each arm's send
//! instant. What it rests on (each rule checked by lock-model's `redlock` model, "Blocking
//! delivery", most with a bug switch that breaks it):
//! - **A majority naming one token** ([`decide`]): one master's push, or pushes of different
//!   tokens, are hints; a majority of leases is the lock, and a token named by a majority was
//!   stored above every earlier one on a majority before anyone used it ("Tokens left by the
//!   release" in `crate::scripts::redlock`).
//! - **Belief from the earliest counted arm's send** plus the claim window (`CLAIM_MS`, the
//!   pushed lease's `PEXPIRE`): each push ran after its arm, and the arm drains the list, so
//!   nothing pushed before it is counted. Counting from a pop's arrival instead outlasts the
//!   grants.
//! - **A `BLPOP` reply belongs to its own arm**: arm and `BLPOP` go in one pipeline on a
//!   connection that serves nothing else, and a connection whose `BLPOP` is still out when the
//!   wait ends is dropped, never reused.
//! - **The release takes the token it pushes** (`push:<token>` in fence-by), so no lease step is
//!   handed it again.
//! - **A pushed lease outlives the head's own failed attempts**: it is marked `p`, which the undo
//!   of an attempt never frees, so a wait that fell back to its lease step and failed may still
//!   count the pops it gets later.
//! - **The claim** (`RedlockClaim`, the lease's first renewal, on every master; a majority
//!   needed, else the lease is lost) extends only the owner's lease and never grants; it writes
//!   the attempt id `claim`, which no undo matches (a late undo of the head's failed lease step
//!   would otherwise free the claimed lease), and makes each master keep the token the majority
//!   named (set-if-greater on its counter), so that masters whose counters drifted apart agree
//!   again before the next release (measured: without it, pushes split between two tokens under
//!   contention). The claim is deferred a third into the window, as on a single instance
//!   (`PushedGrant::claim_deferred`), so a short hold never claims; the alignment then comes
//!   with the **release**, which carries the holder's token (`LeaseStore::release_held`) and
//!   leaves each master the next token above it, as a claim would have raised it. Measured: the
//!   claim deferred without the token in the release split pops (a 2 s contended run: 30 grace
//!   expiries and 21 lease-step fallbacks in 5,000 hand-offs, acquire p99 3.5 → 13.6 ms); with
//!   it, none.
//!
//! Anything else is a hint and the wait takes its ordinary lease step. Pops that do not make a
//! majority within [`GRACE`] (a release that reached only some masters, or found some unarmed)
//! wake the wait, as a hint. Once a grant is held, the `BLPOP`s still out are answered `x` from
//! the masters' command connections, so their connections are kept for the next waits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::backend::{PushSender, PushedGrant, WakeSubscription};
use lock_core::FencingToken;
use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::blocking::{Blocking, Deliveries, Popped, BLOCK_MS};
use crate::conn::Node;
use crate::handoff::CLAIM_MS;
use crate::scripts::{Keys, REDLOCK_ARM};

/// How long pops that do not yet make a majority wait for the others before they wake the
/// wait: the pushes of one release reach the masters within a round trip of each other, and a
/// wait woken too soon only takes its lease step (which a later majority may still overtake).
const GRACE: Duration = Duration::from_millis(10);

/// How long the other masters' deliveries may still finish once a grant is held, so that their
/// connections are kept for the next waits rather than dropped with a `BLPOP` out.
const DRAIN: Duration = Duration::from_millis(50);

/// A master's queue did not have the owner yet (its registration is on the way): arm again
/// after this pause.
const NOT_QUEUED_PAUSE: Duration = Duration::from_millis(100);

/// One master's pop of a grant: its token, and the instant before its arm was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pop {
    token: u64,
    armed_at: Instant,
}

/// What the pops so far mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// A majority named this token: hold it, believed from the earliest of their arms.
    Hold(Pop),
    /// A majority may still name one token: wait for the other masters' pops.
    Wait,
    /// No majority can name one token any more: a hint, the wait takes its lease step.
    Hint,
}

/// The decision over the pops of `n` masters (`None`: none yet), `quorum` of which must name one
/// token. Pure, so that its table says the rule.
fn decide(pops: &[Option<Pop>], quorum: usize) -> Decision {
    let got: Vec<Pop> = pops.iter().flatten().copied().collect();
    let mut best = 0;
    for p in &got {
        let same: Vec<&Pop> = got.iter().filter(|q| q.token == p.token).collect();
        if same.len() >= quorum {
            let earliest = same.iter().map(|q| q.armed_at).min().unwrap_or(p.armed_at);
            return Decision::Hold(Pop { token: p.token, armed_at: earliest });
        }
        best = best.max(same.len());
    }
    let unpopped = pops.len() - got.len();
    if best + unpopped >= quorum {
        Decision::Wait
    } else {
        Decision::Hint
    }
}

/// The dedicated connections of every master, for the waits of one client.
pub(crate) struct Delivery {
    masters: Vec<Arc<Blocking>>,
    /// The masters' command connections, which end the `BLPOP`s still out once a grant is held.
    nodes: Vec<Arc<Node>>,
    quorum: usize,
    /// Waits delivering now, each with a connection per master.
    waits: Arc<Deliveries>,
}

impl Delivery {
    pub(crate) fn new(masters: Vec<Arc<Blocking>>, nodes: Vec<Arc<Node>>, quorum: usize) -> Self {
        Delivery { masters, nodes, quorum, waits: Arc::default() }
    }

    /// Gives the wait of `owner` (woken on `wake`) on `keys` blocking delivery on every master:
    /// returns its subscription with the channel the held grant arrives on. Beyond
    /// [`MAX_BLOCKED`](crate::blocking::MAX_BLOCKED) waits at once, the subscription is returned as it is (hints).
    pub(crate) fn arm(
        self: &Arc<Self>,
        sub: WakeSubscription,
        keys: &Keys,
        owner: &str,
        wake: &str,
    ) -> WakeSubscription {
        let this = Arc::clone(self);
        let done = Arc::new(AtomicBool::new(false));
        let wait = Wait { keys: keys.clone(), owner: owner.to_owned(), wake: wake.to_owned(), done };
        self.waits.start(sub, move |tx| async move { this.deliver(&tx, &wait).await })
    }

    /// Runs every master's delivery and decides over their pops, until a grant is held (sent to
    /// the wait) or every master's delivery ended. The deliveries are polled here, not spawned:
    /// a pop reaches the decision without another task's wake-up on the hand-off's path.
    async fn deliver(&self, tx: &PushSender, wait: &Wait) {
        let (hinter, mut hints) = mpsc::unbounded_channel();
        let mut masters: FuturesUnordered<_> = (self.masters.iter().enumerate())
            .map(|(index, master)| deliver_one(Arc::clone(master), index, wait.clone(), hinter.clone()))
            .collect();
        drop(hinter);
        let mut pops: Vec<Option<Pop>> = vec![None; self.masters.len()];
        let mut grace: Option<Instant> = None;
        loop {
            let at = grace.unwrap_or_else(Instant::now);
            let (index, pop) = tokio::select! {
                Some((index, Some(pop))) = masters.next() => (index, pop),
                Some(()) = hints.recv() => {
                    tracing::trace!(owner = %wait.owner, "redlock delivery: a hint");
                    let _ = tx.send(None);
                    continue;
                }
                () = tokio::time::sleep_until(at), if grace.is_some() => {
                    tracing::trace!(owner = %wait.owner, "redlock delivery: no majority within the grace");
                    grace = None;
                    let _ = tx.send(None);
                    continue;
                }
                else => return,
            };
            pops[index] = Some(pop);
            let decision = decide(&pops, self.quorum);
            tracing::trace!(owner = %wait.owner, master = index, token = pop.token, ?decision, "redlock delivery: a pop");
            match decision {
                Decision::Hold(held) => {
                    let window = Duration::from_millis(CLAIM_MS);
                    let _ = tx
                        .send(Some(PushedGrant::new(FencingToken(held.token), held.armed_at, window).claim_deferred()));
                    // The other masters' `BLPOP`s are ended (their lists answered `x`), so that
                    // their connections are kept for the next waits. After DRAIN the rest are
                    // dropped, each connection with a `BLPOP` still out with them.
                    wait.done.store(true, Ordering::SeqCst);
                    for (node, _) in self.nodes.iter().zip(&pops).filter(|(_, p)| p.is_none()) {
                        tokio::spawn(unblock(Arc::clone(node), wait.clone()));
                    }
                    tokio::spawn(async move {
                        let drained = async { while masters.next().await.is_some() {} };
                        let _ = tokio::time::timeout(DRAIN, drained).await;
                    });
                    return;
                }
                Decision::Wait => {
                    grace.get_or_insert_with(|| Instant::now() + GRACE);
                }
                Decision::Hint => {
                    grace = None;
                    let _ = tx.send(None);
                }
            }
        }
    }
}

/// What every master's delivery of one wait needs.
#[derive(Clone)]
struct Wait {
    keys: Keys,
    owner: String,
    wake: String,
    /// Set once a grant is held: the deliveries still running end at their next answer.
    done: Arc<AtomicBool>,
}

/// Ends the `BLPOP` of a wait that holds on a master whose pop it no longer needs: `x` on its
/// list answers it. The mark stays until it ends: a release there that comes later (it is on its
/// way) still pushes rather than publishing a hint, and the claim takes that grant if it lands
/// first; otherwise the grant lapses within the claim window, the holder having its majority.
async fn unblock(node: Arc<Node>, wait: Wait) {
    let list = wait.keys.pushes(&wait.owner);
    let ended = node
        .run(DRAIN, |mut c| {
            let mut pipe = redis::pipe();
            pipe.cmd("RPUSH").arg(&list).arg("x").ignore();
            pipe.cmd("PEXPIRE").arg(&list).arg(BLOCK_MS).ignore();
            async move { pipe.query_async::<()>(&mut c).await }
        })
        .await;
    if let Err(e) = ended {
        tracing::debug!(error = %e, "could not end a redlock blocking delivery; its connection is dropped");
    }
}

/// One master's delivery: arms and blocks until a grant is popped (returned, and the delivery
/// ends); a hint on the way goes to `hints` and it arms again. After a broken connection it
/// arms again on a new one (with a pause that doubles up to a second): the broken one's mark
/// may still be live, and a release would push to a list nobody pops; the new arm drains it.
async fn deliver_one(
    master: Arc<Blocking>,
    index: usize,
    wait: Wait,
    hints: mpsc::UnboundedSender<()>,
) -> (usize, Option<Pop>) {
    let list = wait.keys.pushes(&wait.owner);
    let mut pause = Duration::from_millis(20);
    loop {
        let broken = match master.connection().await {
            Ok(mut conn) => loop {
                let armed_at = Instant::now();
                let popped = arm_and_pop(&mut conn, &wait, &list).await;
                if popped.is_ok() && wait.done.load(Ordering::SeqCst) {
                    master.keep(conn);
                    return (index, None);
                }
                match popped {
                    Ok(Popped::Nothing) => {}
                    Ok(Popped::Hint) => {
                        let _ = hints.send(());
                    }
                    Ok(Popped::Never) => {
                        tracing::trace!(owner = %wait.owner, master = index, "redlock delivery: not queued yet");
                        tokio::time::sleep(NOT_QUEUED_PAUSE).await;
                    }
                    Ok(Popped::Grant(token)) => {
                        master.keep(conn);
                        return (index, Some(Pop { token: token.0, armed_at }));
                    }
                    Err(e) => break e.to_string(),
                }
            },
            Err(e) => e.to_string(),
        };
        tracing::debug!(server = %master.label(), error = %broken, "redlock blocking delivery failed; waking the wait, arming again");
        master.forget_idle();
        let _ = hints.send(());
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// One arm and its `BLPOP` on a master, pipelined: the reply comes when the `BLPOP` ends.
async fn arm_and_pop(conn: &mut MultiplexedConnection, wait: &Wait, list: &str) -> redis::RedisResult<Popped> {
    let mut pipe = redis::pipe();
    let keys = &wait.keys;
    pipe.cmd("EVALSHA").arg(REDLOCK_ARM.get_hash()).arg(3).arg(&keys.redlock_waiters).arg(&keys.armed).arg(list);
    pipe.arg(&wait.owner).arg(&wait.wake).arg(BLOCK_MS);
    pipe.cmd("BLPOP").arg(list).arg(BLOCK_MS as f64 / 1000.0);
    let (_armed, popped): (i64, Option<(String, String)>) = pipe.query_async(conn).await?;
    Ok(Popped::of(popped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_naming_one_token_holds_from_its_earliest_arm() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let pop = |token: u64, ms: u64| Some(Pop { token, armed_at: at(ms) });
        let hold = |token: u64, ms: u64| Decision::Hold(Pop { token, armed_at: at(ms) });
        // (pops of each master, quorum) → decision.
        let table: [(Vec<Option<Pop>>, usize, Decision); 11] = [
            (vec![None, None, None], 2, Decision::Wait),
            // One master's push is a hint only once no majority can follow.
            (vec![pop(7, 5), None, None], 2, Decision::Wait),
            (vec![pop(7, 5), pop(7, 3), None], 2, hold(7, 3)),
            (vec![pop(7, 5), pop(7, 9), pop(7, 1)], 2, hold(7, 1)),
            // Differing tokens confirm nothing together.
            (vec![pop(7, 5), pop(9, 3), None], 2, Decision::Wait),
            (vec![pop(7, 5), pop(9, 3), pop(11, 1)], 2, Decision::Hint),
            (vec![pop(9, 5), pop(7, 3), pop(7, 8)], 2, hold(7, 3)),
            // Five masters: three must agree; the earliest of those three arms counts, not a
            // fourth's with another token.
            (vec![pop(7, 5), pop(9, 1), pop(7, 4), None, pop(7, 6)], 3, hold(7, 4)),
            (vec![pop(7, 5), pop(9, 1), pop(8, 4), pop(7, 2), None], 3, Decision::Wait),
            (vec![pop(7, 5), pop(9, 1), pop(8, 4), pop(7, 2), pop(9, 3)], 3, Decision::Hint),
            (vec![pop(7, 5)], 1, hold(7, 5)),
        ];
        for (pops, quorum, want) in table {
            assert_eq!(decide(&pops, quorum), want, "{pops:?} (quorum {quorum})");
        }
    }
}
