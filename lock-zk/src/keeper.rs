//! What a session does for all of its held leases at once. A ZooKeeper lease is the session: the
//! session's heartbeat keeps every node of it, so a held lease needs no request of its own while
//! nothing happens. Per session there is one task that watches the granted nodes (no task, timer
//! or probe per lease), and the renewals of the session's leases share rounds: one `sync` and,
//! behind it on the same connection, one multi-read of all their nodes.
//!
//! Loss detection, per lease: the node's watch fires when the node is deleted (by an operator, or
//! with the session) and when the session ends; the [`Lease`](lock_core::Lease) watchdog ends the
//! lease at `valid_until`, which never lies further than the session timeout (less the leader's
//! lag) after the last request the quorum answered for it (`lease::session_bound`). A suspended
//! connection therefore ends the lease by time, before the server can expire the session. The
//! first [`SHARED_FROM`](crate::root_watch::SHARED_FROM) leases of a session each watch their
//! node; further ones share one recursive watch on the root ([`crate::root_watch`]), which
//! detects the same losses for a fraction of the memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::{
    backend::{Backoff, Batcher, LossTrigger},
    LostSignal,
};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout};
use zookeeper_client::{Client, EventType, MultiReadResult, SessionState, Stat};

use crate::node::{Held, Node};
use crate::root_watch::{RootWatch, Todo, SWEEP};
use crate::session::{call, classify, Failure, ZkError};

/// How long a renewal round waits for more leases' renewals (short against any lease: a
/// renewal is due a third of a ttl before it is needed).
const GATHER: Duration = Duration::from_millis(5);

/// At most this many leases per renewal round.
const MAX_ROUND: usize = 512;

/// How long after its grant a lease's node watch is set. Most short holds are released before:
/// no `exists` request, watch bookkeeping or event for them (one request in four of a
/// try_acquire + release loop). The watch's own check finds a node deleted meanwhile, so a
/// loss right after the grant is told at most this much later.
const ARM_AFTER: Duration = Duration::from_millis(50);

/// A live session: its client, its id (the `ephemeralOwner` of its nodes) and the keeper of its
/// held leases.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) client: Client,
    pub(crate) id: i64,
    /// Watches and renews the session's held leases.
    pub(crate) keeper: Arc<Keeper>,
}

/// Whether a node exists under our session (`Ok(false)`: gone or another session's).
type Checked = Result<bool, ZkError>;

/// The keeper of one session's leases.
pub(crate) struct Keeper {
    pub(crate) client: Client,
    held: mpsc::UnboundedSender<Held>,
    checks: Arc<Batcher<Arc<Node>, Checked>>,
}

impl Keeper {
    /// Starts the session's watch task (on the current runtime, like the client's own). `sync_path`
    /// is a node that exists (the root); renewal rounds are bounded by `bound`.
    pub(crate) fn start(client: Client, session_id: i64, sync_path: String, bound: Duration) -> Arc<Keeper> {
        let (held, rx) = mpsc::unbounded_channel();
        let round_client = client.clone();
        let no_multi_read = Arc::new(AtomicBool::new(false));
        let root = sync_path.clone();
        let checks = Arc::new(Batcher::new(GATHER, MAX_ROUND, move |batch: Vec<Arc<Node>>| {
            let (client, sync_path, no_multi) = (round_client.clone(), sync_path.clone(), Arc::clone(&no_multi_read));
            async move { check_round(&client, session_id, &sync_path, bound, &no_multi, batch).await }
        }));
        let shared = RootWatch::new(client.clone(), root, bound);
        tokio::spawn(keep(client.clone(), session_id, rx, shared, Arc::clone(&checks), bound));
        Arc::new(Keeper { client, held, checks })
    }

    /// Watches `node` until it goes, the session ends, or the lease is lost otherwise.
    pub(crate) fn hold(&self, node: Arc<Node>, trigger: LossTrigger, lost: LostSignal) {
        // The task ends only when every sender is gone: a send cannot fail while we hold one.
        let _ = self.held.send(Held { node, trigger, lost });
    }

    /// Whether `node` is still ours, asked in the next round through the leader; `None` when
    /// the round ended without an answer.
    pub(crate) async fn check(&self, node: &Arc<Node>) -> Option<Checked> {
        self.checks.ask(Arc::clone(node)).await
    }
}

/// One renewal round: a `sync` first, so that the answers are not a lagging follower's memory,
/// then the nodes read behind it on the same connection (one session's requests are served in
/// order, so every read is answered from a state at least as new as the leader's when the `sync`
/// reached it). The reads go as one multi-read (ZooKeeper 3.6+): one request and one reply for
/// the whole round; a server that refuses it gets one `exists` per node, all sent at once.
async fn check_round(
    client: &Client,
    session_id: i64,
    sync_path: &str,
    bound: Duration,
    no_multi_read: &AtomicBool,
    batch: Vec<Arc<Node>>,
) -> Vec<Checked> {
    let ours = |stat: &Stat| stat.ephemeral_owner == session_id;
    let synced = client.sync(sync_path);
    let multi = !no_multi_read.load(Ordering::Relaxed);
    let reads = multi.then(|| {
        let mut reader = client.new_multi_reader();
        for node in &batch {
            // Our own paths, validated when the node was created.
            let _ = reader.add_get_data(&node.path);
        }
        reader.commit()
    });
    let checks: Vec<_> = match multi {
        false => batch.iter().map(|node| client.check_stat(&node.path)).collect(),
        true => Vec::new(),
    };
    let all = async move {
        let synced = synced.await;
        let read = match reads {
            Some(reads) => Some(reads.await),
            None => None,
        };
        (synced, read, futures::future::join_all(checks).await)
    };
    let answers = match timeout(bound, all).await {
        Err(_) => return batch.iter().map(|_| Err(ZkError::Timeout)).collect(),
        Ok((Err(e), _, _)) if e != ZkError::NoNode => return batch.iter().map(|_| Err(e.clone())).collect(),
        Ok((_, Some(Ok(read)), _)) if read.len() == batch.len() => read,
        Ok((_, Some(Ok(_)) | Some(Err(ZkError::Unimplemented | ZkError::MarshallingError)), _)) => {
            tracing::info!("this ZooKeeper cannot multi-read; renewals check each node on its own");
            no_multi_read.store(true, Ordering::Relaxed);
            return batch.iter().map(|_| Err(ZkError::Unimplemented)).collect();
        }
        Ok((_, Some(Err(e)), _)) => return batch.iter().map(|_| Err(e.clone())).collect(),
        Ok((_, None, stats)) => return stats.into_iter().map(|s| s.map(|s| s.as_ref().is_some_and(ours))).collect(),
    };
    answers
        .into_iter()
        .map(|answer| match answer {
            MultiReadResult::Data { stat, .. } => Ok(ours(&stat)),
            MultiReadResult::Error { err: ZkError::NoNode } => Ok(false),
            MultiReadResult::Error { err } => Err(err),
            _ => Err(ZkError::UnexpectedError("a multi-read answered with a listing".to_owned())),
        })
        .collect()
}

/// The session's watch task: a watch per held node, all in this one task, or for the leases
/// beyond the first few the root watch. Ends when the keeper and every lease handle are gone.
async fn keep(
    client: Client,
    session_id: i64,
    mut rx: mpsc::UnboundedReceiver<Held>,
    mut shared: RootWatch,
    checks: Arc<Batcher<Arc<Node>, Checked>>,
    bound: Duration,
) {
    let mut watching = FuturesUnordered::new();
    let mut checking = FuturesUnordered::new();
    // The session's own state, for every lease at once: a node watch sent around the moment the
    // session ends may never be answered (seen: one lease of 70 not told within 5 s).
    let mut states = client.state_watcher();
    let (ended_tx, ended) = tokio::sync::watch::channel(false);
    // Nodes under the root watch whose check failed: asked again at the next sweep.
    let mut recheck: Vec<Arc<Node>> = Vec::new();
    let mut sweep = tokio::time::interval(SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let check = |node: Arc<Node>| {
        let checks = Arc::clone(&checks);
        // Twice the round's own bound: a round that never began answers `None` too.
        async move { (Arc::clone(&node), timeout(bound * 2, checks.ask(node)).await.ok().flatten()) }
    };
    loop {
        let todo = tokio::select! {
            held = rx.recv() => match held {
                Some(held) if shared.takes(watching.len()) => shared.insert(held),
                Some(held) => {
                    watching.push(watch(&client, session_id, held, ended.clone()));
                    Todo::Nothing
                }
                None => return,
            },
            Some(()) = watching.next(), if !watching.is_empty() => Todo::Nothing,
            state = states.changed() => {
                if state.is_terminated() {
                    let _ = ended_tx.send(true);
                    shared.session_ended(state);
                }
                Todo::Nothing
            }
            todo = shared.step() => todo,
            Some((node, answer)) = checking.next(), if !checking.is_empty() => {
                let (node, answer): (Arc<Node>, Option<Checked>) = (node, answer);
                match answer {
                    Some(Ok(true)) => {}
                    Some(Ok(false)) => shared.lost(&node, "our lock node was deleted, or belongs to another session"),
                    Some(Err(e)) if matches!(classify(e.clone()), Failure::SessionGone) => {
                        shared.lost(&node, "the ZooKeeper session ended")
                    }
                    // No answer: the node may be gone unseen; ask again.
                    _ if shared.holds(&node) => recheck.push(node),
                    _ => {}
                }
                Todo::Nothing
            }
            _ = sweep.tick(), if shared.is_active() || !recheck.is_empty() => {
                for node in shared.sweep() {
                    let client = client.clone();
                    // A lost lease's node is rare; a task for each is no cost.
                    tokio::spawn(async move {
                        let _ = node.delete(&client).await;
                    });
                }
                Todo::Check(std::mem::take(&mut recheck).into_iter().filter(|n| shared.holds(n)).collect())
            }
        };
        match todo {
            Todo::Nothing => {}
            Todo::Check(nodes) => nodes.into_iter().for_each(|node| checking.push(check(node))),
            Todo::WatchEach(leases) => {
                leases.into_iter().for_each(|held| watching.push(watch(&client, session_id, held, ended.clone())))
            }
        }
    }
}

enum NodeEnd {
    Deleted,
    SessionEnded(SessionState),
    NotOurs,
}

/// Fires the lease's lost signal when its node goes or the session ends (a release deletes the
/// node itself: no loss), and deletes the node of a lease lost otherwise (by time) but not
/// released, so that nobody waits on a lock we no longer claim.
async fn watch(client: &Client, session_id: i64, held: Held, mut ended: tokio::sync::watch::Receiver<bool>) {
    let Held { node, trigger, lost } = held;
    let end = tokio::select! {
        _ = lost.fired() => None,
        Ok(_) = ended.wait_for(|ended| *ended) => Some(NodeEnd::SessionEnded(client.state())),
        end = async {
            sleep(ARM_AFTER).await;
            match node.is_released() {
                true => None,
                false => Some(node_end(client, session_id, &node).await),
            }
        } => end,
    };
    if node.is_released() {
        return;
    }
    match end {
        Some(end) => trigger.fire(&match end {
            NodeEnd::Deleted => "our lock node was deleted".to_owned(),
            NodeEnd::NotOurs => "our lock node belongs to another session".to_owned(),
            NodeEnd::SessionEnded(s) => format!("the ZooKeeper session ended ({s})"),
        }),
        None => {
            // Boxed: inline, the delete's retries would make every watching future ~2 KiB
            // for a step that few leases take.
            let _ = Box::pin(node.delete(client)).await;
        }
    }
}

/// Resolves when `node` is gone or no longer ours, or the session ended.
async fn node_end(client: &Client, session_id: i64, node: &Node) -> NodeEnd {
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
    loop {
        // Boxed, like the pause below: the future that waits out the lease stays small.
        let watching =
            Box::pin(call(client.session_timeout(), "watching our lock node", client.check_and_watch_stat(&node.path)));
        match watching.await {
            Ok((None, _)) => return NodeEnd::Deleted,
            Ok((Some(stat), _)) if stat.ephemeral_owner != session_id => return NodeEnd::NotOurs,
            Ok((Some(_), watcher)) => {
                let event = watcher.changed().await;
                match event.event_type {
                    EventType::NodeDeleted => return NodeEnd::Deleted,
                    EventType::Session => return NodeEnd::SessionEnded(event.session_state),
                    // Its data changed (a permit's grant mark): watch again.
                    _ => continue,
                }
            }
            Err(Failure::SessionGone) => return NodeEnd::SessionEnded(client.state()),
            Err(_) => Box::pin(sleep(backoff.next_delay())).await,
        }
    }
}
