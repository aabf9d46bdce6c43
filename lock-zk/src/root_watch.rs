//! The one watch of a session that holds many leases: a persistent recursive watch on the root
//! (ZooKeeper 3.6+) stands in for a watch per node. A watch per node costs the client a map
//! entry, a watcher vector and a channel per watched path, and the keeper a future per lease
//! (about 2 KiB a lease in all); under the root watch a held lease costs one map entry here.
//!
//! The price is traffic: the server sends this session every create, delete and data change
//! under the root, of every client. So the keeper turns it on only from [`SHARED_FROM`] held
//! leases (a session that holds that many sees much of the root's traffic anyway), and off
//! again once no lease is under it. Fewer leases keep their own node watch (`keeper::watch`).
//!
//! Loss detection is the same as with a node watch:
//! - our node deleted: its `NodeDeleted` event fires the lease's lost signal;
//! - the session ended: the watch's session event fires every lease's;
//! - a deletion the watch cannot report: one that came before the watch was registered or before
//!   the lease joined the map (its event found no entry), and any made while the connection was
//!   down (a persistent watch re-registered at reconnection replays nothing, ZOOKEEPER-4698). So
//!   every lease is checked once after it joins (one multi-read for many, through the keeper's
//!   renewal rounds), and all of them again after each reconnection; a check that finds the node
//!   gone or another session's fires the signal, one that fails is retried.
//!
//! A lease lost by time whose node is still there loses its node at the next sweep (every
//! [`SWEEP`]), as the node watch's future deletes it when the lost signal fires.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::{backend::LossTrigger, LostSignal};
use tokio::time::timeout;
use zookeeper_client::{AddWatchMode, Client, EventType, PersistentWatcher, SessionState, WatchedEvent};

use crate::node::{Held, Node};
use crate::session::ZkError;

/// From how many leases watched node by node a session moves further leases under the root
/// watch.
pub(crate) const SHARED_FROM: usize = 64;

/// How often leases under the root watch are swept: a released one leaves the map, one lost by
/// time loses its node.
pub(crate) const SWEEP: Duration = Duration::from_secs(1);

/// A lease under the root watch, found by its node's path.
struct Entry {
    node: Arc<Node>,
    trigger: LossTrigger,
    lost: LostSignal,
}

impl Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        &self.node.path
    }
}

impl Hash for Entry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that lookups by path (`Borrow<str>`) find the entry.
        (*self.node.path).hash(state);
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.node.path == other.node.path
    }
}

impl Eq for Entry {}

enum State {
    Off,
    /// The `addWatch` request is out.
    Arming(BoxFuture<'static, Result<PersistentWatcher, ZkError>>),
    On(PersistentWatcher),
}

/// What the keeper's loop must do after the root watch took a step.
pub(crate) enum Todo {
    Nothing,
    /// Check these nodes (through the renewal rounds): still there, and ours?
    Check(Vec<Arc<Node>>),
    /// The watch could not be set: watch these leases node by node.
    WatchEach(Vec<Held>),
}

/// The leases under the root watch, and the watch.
pub(crate) struct RootWatch {
    client: Client,
    root: String,
    bound: Duration,
    leases: HashSet<Entry>,
    state: State,
    /// The server cannot (before 3.6): every lease is watched on its own.
    unsupported: bool,
    /// The connection was lost since the last check of every lease.
    disconnected: bool,
}

impl RootWatch {
    pub(crate) fn new(client: Client, root: String, bound: Duration) -> RootWatch {
        RootWatch {
            client,
            root,
            bound,
            leases: HashSet::new(),
            state: State::Off,
            unsupported: false,
            disconnected: false,
        }
    }

    /// Whether a new lease goes under the root watch, given how many are watched node by node.
    pub(crate) fn takes(&self, per_node: usize) -> bool {
        !self.unsupported && (!matches!(self.state, State::Off) || per_node >= SHARED_FROM)
    }

    /// Adds a lease; the answer says whether to check its node now.
    pub(crate) fn insert(&mut self, held: Held) -> Todo {
        let Held { node, trigger, lost } = held;
        self.leases.insert(Entry { node: Arc::clone(&node), trigger, lost });
        match &self.state {
            State::On(_) => Todo::Check(vec![node]),
            // Checked, with every other lease, once the watch is set.
            State::Arming(_) => Todo::Nothing,
            State::Off => {
                let (client, root, bound) = (self.client.clone(), self.root.clone(), self.bound);
                self.state = State::Arming(Box::pin(async move {
                    match timeout(bound, client.watch(&root, AddWatchMode::PersistentRecursive)).await {
                        Ok(answer) => answer,
                        Err(_) => Err(ZkError::Timeout),
                    }
                }));
                Todo::Nothing
            }
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        !matches!(self.state, State::Off)
    }

    /// The next step of the watch: the `addWatch` answered, or an event came. Pending while off.
    pub(crate) async fn step(&mut self) -> Todo {
        match &mut self.state {
            State::Off => std::future::pending().await,
            State::Arming(arming) => {
                let armed = arming.await;
                self.armed(armed)
            }
            State::On(watcher) => {
                // `changed` panics once the session's terminal event was taken, which makes the
                // state `Off` here; caught all the same, so that the keeper task lives on.
                let event = match AssertUnwindSafe(watcher.changed()).catch_unwind().await {
                    Ok(event) => event,
                    Err(_) => {
                        let state = self.client.state();
                        self.session_ended(state);
                        return Todo::Nothing;
                    }
                };
                self.event(event)
            }
        }
    }

    fn armed(&mut self, armed: Result<PersistentWatcher, ZkError>) -> Todo {
        match armed {
            Ok(watcher) => {
                self.state = State::On(watcher);
                self.disconnected = false;
                Todo::Check(self.leases.iter().map(|e| Arc::clone(&e.node)).collect())
            }
            Err(e) => {
                if matches!(e, ZkError::Unimplemented | ZkError::MarshallingError) {
                    tracing::info!("this ZooKeeper has no persistent watches (3.6+); every lease watches its node");
                    self.unsupported = true;
                } else {
                    tracing::debug!(error = %e, "the root watch could not be set; the leases watch their nodes");
                }
                self.state = State::Off;
                Todo::WatchEach(
                    self.leases.drain().map(|e| Held { node: e.node, trigger: e.trigger, lost: e.lost }).collect(),
                )
            }
        }
    }

    fn event(&mut self, event: WatchedEvent) -> Todo {
        match event.event_type {
            EventType::NodeDeleted => {
                if let Some(entry) = self.leases.take(event.path.as_str()) {
                    fire(&entry, "our lock node was deleted");
                }
                Todo::Nothing
            }
            EventType::Session => match event.session_state {
                state if state.is_terminated() => {
                    self.session_ended(state);
                    Todo::Nothing
                }
                SessionState::Disconnected => {
                    self.disconnected = true;
                    Todo::Nothing
                }
                SessionState::SyncConnected | SessionState::ConnectedReadOnly if self.disconnected => {
                    self.disconnected = false;
                    Todo::Check(self.leases.iter().map(|e| Arc::clone(&e.node)).collect())
                }
                _ => Todo::Nothing,
            },
            // Creates and data changes (a permit's grant mark) take nothing from anyone.
            _ => Todo::Nothing,
        }
    }

    /// The session ended: every lease under the watch is lost.
    pub(crate) fn session_ended(&mut self, state: SessionState) {
        self.state = State::Off;
        let reason = format!("the ZooKeeper session ended ({state})");
        for entry in self.leases.drain() {
            fire(&entry, &reason);
        }
    }

    /// A check answered that `node` is no longer ours, for `reason`.
    pub(crate) fn lost(&mut self, node: &Node, reason: &str) {
        if let Some(entry) = self.leases.take(&*node.path) {
            fire(&entry, reason);
        }
    }

    /// Whether `node` is still under the watch (a failed check of it is worth retrying).
    pub(crate) fn holds(&self, node: &Node) -> bool {
        self.leases.contains(&*node.path)
    }

    /// Drops released leases, returns the nodes of leases lost otherwise (by time) for the caller
    /// to delete, and turns the watch off when no lease is left under it.
    pub(crate) fn sweep(&mut self) -> Vec<Arc<Node>> {
        let mut orphans = Vec::new();
        self.leases.retain(|e| {
            if e.node.is_released() {
                return false;
            }
            if e.lost.is_fired() {
                orphans.push(Arc::clone(&e.node));
                return false;
            }
            true
        });
        if self.leases.is_empty() && matches!(self.state, State::On(_)) {
            // Dropping the watcher removes the watch from the server.
            self.state = State::Off;
        }
        orphans
    }
}

/// Fires the lost signal of a lease that is not being released (a release deletes the node
/// itself: no loss).
fn fire(entry: &Entry, reason: &str) {
    if !entry.node.is_released() {
        entry.trigger.fire(reason);
    }
}
