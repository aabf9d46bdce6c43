//! The acquire state machine: create our node, list the queue, hold or watch what the recipe
//! says, start over with a new session when the old one ended. One pass works over one
//! session's [`Scope`]; the lock client hands a new scope to each pass.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::{
    backend::{AcquireClock, Deadline, Stop},
    AcquireOptions, Lease, LockError, LockName, OwnerId,
};
use tokio::time::{sleep, sleep_until, Instant};
use zookeeper_client::{CreateMode, EventType};

use crate::acl::{ensure_root, node_acls, url_digest_id};
use crate::config::ZkOptions;
use crate::inspect::node_data;
use crate::lease::{grant, Granted};
use crate::node::Node;
use crate::recipe::{node_prefix, queue, sort_out, Recipe, Verdict};
use crate::scope::Scope;
use crate::session::{call, connected, find_ours, server_error, Failure, NodeGuard, ZkError, BACKEND};

const SESSION_ENDED: &str = "the ZooKeeper session ended";
const NODE_VANISHED: &str = "our lock node vanished";

/// A failed request the pass goes on from.
enum Settled {
    /// The server said the node is not there.
    NoNode,
    /// The outcome is unknown; we waited a little: look again.
    Retry,
}

/// Our node, once created: its path, its czxid, the queue as listed right behind the create
/// with when that create was sent, and whether the create was the acquisition's only one (sent
/// once, answered).
struct Created {
    path: String,
    czxid: i64,
    listed: Option<Listed>,
    clean: bool,
}

/// A listing of the queue, and when the request that proves it was sent: the create it was
/// pipelined behind, or the `sync` it was sent behind.
type Listed = (Vec<String>, Instant);

/// Our node in the queue, from its create until the pass ends.
struct Queued {
    owner: OwnerId,
    /// The acquisition's unique path prefix (`<parent>/_c_<owner>-<role>-`).
    prefix: String,
    path: String,
    /// The last segment of `path`, as the queue lists it.
    own: String,
    czxid: i64,
    /// The queue as listed right behind the create, for the first look.
    listed: Option<Listed>,
    /// Deletes our node if the pass ends without a grant; its `clean` says whether the node is
    /// the acquisition's only one.
    guard: NodeGuard,
}

/// The per-acquisition state of `acquire`/`try_acquire`.
pub(crate) struct Attempt<'a> {
    recipe: Recipe,
    name: &'a LockName,
    opts: &'a AcquireOptions,
    /// The lock client's options (its request and connect timeouts).
    client: &'a ZkOptions,
    /// When the call must have answered (for a single try, one request timeout), whether it
    /// queues at all, and its retries: busy at the deadline is `Timeout`, even when the last
    /// request was cut short by it (contract §4).
    clock: AcquireClock,
}

impl<'a> Attempt<'a> {
    /// An attempt that starts now; `queue` is false for a single try (`try_acquire*`), true to
    /// wait as `opts.wait` says (`acquire*`). `client` are the lock client's options.
    pub(crate) fn new(
        recipe: Recipe,
        name: &'a LockName,
        opts: &'a AcquireOptions,
        queue: bool,
        client: &'a ZkOptions,
    ) -> Self {
        let clock = AcquireClock::new(queue, opts, client.request_timeout, client.connect_timeout);
        Attempt { recipe, name, opts, client, clock }
    }

    /// The attempt's deadline (its `Timeout` counts from when the attempt started).
    pub(crate) fn deadline(&self) -> Deadline {
        self.clock.deadline()
    }
}

impl Attempt<'_> {
    /// When this call must have answered: the end of the caller's wait, or for a single
    /// attempt (try_acquire, `NoWait`) one request timeout; `None` when waiting forever.
    fn limit(&self) -> Option<Instant> {
        self.clock.deadline().at()
    }

    async fn after_transient(&mut self, err: LockError) -> Result<(), LockError> {
        self.clock.after_transient(err, self.name, BACKEND).await
    }

    /// The failure ladder, written once: a definite "no node" is for the caller to judge, any
    /// other server answer is the caller's error, an ended session starts over, and an unknown
    /// outcome waits a little before the caller looks again.
    async fn settle(&mut self, failure: Failure, root: &str) -> Result<Settled, Stop> {
        match failure {
            Failure::Server(ZkError::NoNode) => {
                self.clock.answered();
                Ok(Settled::NoNode)
            }
            Failure::Server(e) => Err(Stop::Fail(server_error(e, root))),
            Failure::SessionGone => Err(Stop::Restart(SESSION_ENDED)),
            Failure::Transient(e) => {
                self.after_transient(e).await?;
                Ok(Settled::Retry)
            }
        }
    }

    /// One bounded request through the ladder.
    async fn ask<T>(
        &mut self,
        root: &str,
        what: &str,
        request: impl Future<Output = Result<T, ZkError>>,
    ) -> Result<Result<T, Settled>, Stop> {
        match call(self.clock.bound(), what, request).await {
            Ok(v) => {
                self.clock.answered();
                Ok(Ok(v))
            }
            Err(f) => self.settle(f, root).await.map(Err),
        }
    }

    /// Runs passes until one answers, each over the scope `open` gives it (the client's
    /// current session, or a new one after the last ended) by the deadline it is passed.
    pub(crate) async fn run<'s, O, F>(mut self, open: O) -> Result<Option<Lease>, LockError>
    where
        O: Fn(Instant) -> F,
        F: Future<Output = Result<Scope<'s>, LockError>>,
    {
        loop {
            let now = Instant::now();
            let deadline = match self.limit() {
                Some(l) => l.max(now + Duration::from_millis(1)),
                None => now + self.client.connect_timeout,
            };
            let scope = match open(deadline).await {
                Ok(scope) => scope,
                Err(e) if self.limit().is_none() && e.is_retryable() => {
                    tracing::debug!(lock = %self.name, error = %e, "no zookeeper session yet; waiting forever");
                    sleep(self.clock.next_delay()).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match self.with_session(&scope).await {
                Ok(lease) => return Ok(lease),
                Err(Stop::Fail(e)) => return Err(e),
                Err(Stop::Restart(why)) => {
                    tracing::info!(lock = %self.name, why, "zookeeper acquire starts over");
                    if self.limit().is_some_and(|l| Instant::now() >= l) {
                        if self.clock.waits() && self.clock.deadline().seen_busy() {
                            return Err(self.clock.timeout(self.name));
                        }
                        return Err(LockError::unavailable(
                            BACKEND,
                            format!("{why}, and no time is left for a new one"),
                        ));
                    }
                    sleep(self.clock.next_delay()).await;
                }
            }
        }
    }

    /// One pass over one session, in phases: (a try on a lock last found busy) list first;
    /// create our node; then list, decide and, while waiting, watch, until granted.
    async fn with_session(&mut self, scope: &Scope<'_>) -> Result<Option<Lease>, Stop> {
        let parent = self.recipe.parent(&scope.url.root, self.name);
        let busy_before = !self.clock.waits() && scope.busy.contains(&parent);
        if busy_before && !self.busy_listing(scope, &parent).await? {
            return Ok(None);
        }
        let mut queued = self.enqueue(scope, &parent).await?;

        // valid_until counts from the request that found our node holding: the create, when the
        // listing pipelined behind it did, else the listing that did (after a wake-up, a retry,
        // or a create whose answer was lost). The create is a write, so the leader has heard
        // from our session; a later listing is a follower's local read and proves that only
        // behind a `sync` (sent in the same round trip: one session's requests are served in
        // order). Never from an earlier create whose listing was not used: a create held up
        // by a stalled link would start the lease already spent.
        loop {
            let Some((children, sent)) = self.list(scope, &parent, &mut queued).await? else { continue };
            let Some(index) = children.iter().position(|c| *c == queued.own) else {
                // Deleted by someone else, or the session expired under us.
                return Err(Stop::Restart(NODE_VANISHED));
            };
            let (watched, until_granted) = match self.recipe.verdict(self.name, &children, index)? {
                Verdict::Hold => match self.hold(scope, &parent, &mut queued, sent, busy_before).await? {
                    Some(lease) => return Ok(Some(lease)),
                    None => continue,
                },
                Verdict::Wait(watched) => (watched, false),
                Verdict::WaitGranted(predecessor) => (vec![predecessor], true),
            };
            self.clock.busy();
            if !self.clock.waits() {
                // Busy: the guard deletes our node; acquire turns this into Timeout.
                scope.busy.note(&parent, true);
                return Ok(None);
            }
            let paths: Vec<String> = watched.iter().map(|c| format!("{parent}/{c}")).collect();
            self.watch(scope, &paths, until_granted).await?;
        }
    }

    /// The list phase of a try on a lock this client last found busy: rather than create and
    /// delete a node each time a client polls a busy lock, list the queue first; false when it
    /// is still busy (the answer is then "busy", with no node made).
    ///
    /// (A try otherwise creates its node and lists the queue in one round trip: a free lock is
    /// granted with no more. On a busy lock that node is deleted at once, in the background: the
    /// delete is sent before the answer, so this session's later requests come after it. It sat
    /// at the tail, behind every waiter, so it woke nobody unless a waiter queued behind it
    /// meanwhile, which wakes once and watches its new predecessor, and an observer's feed does
    /// not fire, as the lowest node did not change.) This listing goes behind a `sync`
    /// (pipelined, one round trip): a follower answers reads from its own state, which may not
    /// yet hold the leader's commit of a release that already completed.
    async fn busy_listing(&mut self, scope: &Scope<'_>, parent: &str) -> Result<bool, Stop> {
        let client = &scope.session.client;
        loop {
            let listing = async {
                let (synced, children) = tokio::join!(client.sync(parent), client.list_children(parent));
                synced.and(children)
            };
            match self.ask(&scope.url.root, "listing lock nodes", listing).await? {
                Ok(children) => {
                    let children = queue(self.recipe, children);
                    return Ok(matches!(self.recipe.verdict(self.name, &children, children.len())?, Verdict::Hold));
                }
                Err(Settled::NoNode) => return Ok(true),
                Err(Settled::Retry) => {}
            }
        }
    }

    /// The create phase: our node joins the queue, guarded so that a pass ending without a
    /// grant deletes it.
    async fn enqueue(&mut self, scope: &Scope<'_>, parent: &str) -> Result<Queued, Stop> {
        let owner = OwnerId::random();
        let prefix = format!("{parent}/{}", node_prefix(owner, &self.recipe.role()));
        let mut guard = NodeGuard::new(scope.session.client.clone(), parent.to_owned(), prefix.clone());
        let Created { path, czxid, listed, clean } = self.create(scope, parent, &prefix).await?;
        guard.path = Some(path.clone());
        guard.clean = clean;
        let own = path.rsplit('/').next().unwrap_or_default().to_owned();
        Ok(Queued { owner, prefix, path, own, czxid, listed, guard })
    }

    /// The list phase: the queue as it stands (the listing made with the create the first
    /// time, else one behind a `sync`), ours and the other kinds' nodes sorted out, with any
    /// earlier node of this acquisition deleted, and when the request that proves the listing
    /// was sent. `None`: look again.
    async fn list(&mut self, scope: &Scope<'_>, parent: &str, queued: &mut Queued) -> Result<Option<Listed>, Stop> {
        let client = &scope.session.client;
        let (listed, sent) = match queued.listed.take() {
            Some((children, sent)) => (Some(children), sent),
            None => (None, Instant::now()),
        };
        let listing = async {
            match listed {
                Some(children) => Ok(children),
                None => {
                    let (synced, children) = tokio::join!(client.sync(parent), client.list_children(parent));
                    synced.and(children)
                }
            }
        };
        let ours = queued.prefix.rsplit('/').next().unwrap_or_default();
        let (children, strays) = match self.ask(&scope.url.root, "listing lock nodes", listing).await? {
            Ok(c) => sort_out(self.recipe, c, ours, &queued.own),
            Err(Settled::NoNode) => return Err(Stop::Restart(NODE_VANISHED)),
            Err(Settled::Retry) => return Ok(None),
        };
        if !strays.is_empty() {
            queued.guard.clean = false;
            if !self.delete_strays(scope, parent, &strays).await? {
                return Ok(None);
            }
        }
        Ok(Some((children, sent)))
    }

    /// The decide phase's grant: our node holds. A permit is marked granted first; then the
    /// lease starts, counted from `sent` (when the request that proved it holding went out).
    /// `None`: the mark's outcome is unknown, look again.
    async fn hold(
        &mut self,
        scope: &Scope<'_>,
        parent: &str,
        queued: &mut Queued,
        sent: Instant,
        busy_before: bool,
    ) -> Result<Option<Lease>, Stop> {
        let mut token = queued.czxid;
        if let Recipe::Permit(_) = self.recipe {
            // Mark our node granted, which wakes the waiter right behind us (it becomes the
            // first waiter and must watch the holders, us included). The mark's zxid is the
            // token: it follows the order in which grants complete, even where an earlier
            // waiter learns of its permit after a later one (the nodes' czxids follow arrival
            // order only).
            let mark = scope.session.client.set_data(&queued.path, &self.recipe.data(), None);
            match self.ask(&scope.url.root, "marking our permit node granted", mark).await? {
                Ok(stat) => token = stat.mzxid,
                Err(Settled::NoNode) => return Err(Stop::Restart(NODE_VANISHED)),
                Err(Settled::Retry) => return Ok(None),
            }
        }
        queued.guard.disarm();
        if busy_before {
            scope.busy.note(parent, false);
        }
        let node = Node::new(&queued.prefix, std::mem::take(&mut queued.path), queued.guard.clean);
        let granted = Granted { owner: queued.owner, zxid: token, confirmed: sent };
        Ok(Some(grant(&scope.session, self.name, node, granted, self.opts, self.client.tick_time)))
    }

    /// The watch phase: watches `paths` (the nodes the recipe says we wait for; with
    /// `until_granted`, a predecessor we wait on until it is granted) and waits for the first
    /// to fire; then (or after a failure that was waited out) the queue is listed again.
    async fn watch(&mut self, scope: &Scope<'_>, paths: &[String], until_granted: bool) -> Result<(), Stop> {
        let client = &scope.session.client;
        // All watch requests go out before the first answer is awaited (one round trip).
        let requests: Vec<_> = paths.iter().map(|p| client.get_and_watch_data(p)).collect();
        let mut watchers = Vec::with_capacity(requests.len());
        let mut relist = false;
        for request in requests {
            match call(self.clock.bound(), "watching the node we wait for", request).await {
                // Granted already: we may be the first waiter now.
                Ok((_, stat, _)) if until_granted && stat.version > 0 => relist = true,
                Ok((_, _, w)) => watchers.push(w),
                // That node left meanwhile: look again.
                Err(Failure::Server(ZkError::NoNode)) => relist = true,
                Err(f) => {
                    self.settle(f, &scope.url.root).await?;
                    return Ok(());
                }
            }
        }
        self.clock.answered();
        if relist || watchers.is_empty() {
            return Ok(());
        }
        let mut pending: Vec<_> = watchers.into_iter().map(|w| Box::pin(w.changed())).collect();
        let changed = std::future::poll_fn(|cx| {
            for w in pending.iter_mut() {
                if let std::task::Poll::Ready(event) = w.as_mut().poll(cx) {
                    return std::task::Poll::Ready(event);
                }
            }
            std::task::Poll::Pending
        });
        let event = match self.limit() {
            Some(d) => tokio::select! {
                ev = changed => ev,
                _ = sleep_until(d) => {
                    return Err(Stop::Fail(if connected(client.state()) {
                        self.clock.timeout(self.name)
                    } else {
                        LockError::unavailable(BACKEND, format!(
                            "the connection to ZooKeeper was lost while waiting for {:?}", self.name.as_str()))
                    }));
                }
            },
            None => changed.await,
        };
        scope.watch_events.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(lock = %self.name, event = ?event.event_type, path = %event.path, "watch fired");
        if event.event_type == EventType::Session {
            return Err(Stop::Restart(SESSION_ENDED));
        }
        Ok(())
    }

    /// Deletes nodes of this acquisition other than our own (see [`sort_out`]); false when a
    /// delete's outcome is unknown, so the caller lists again.
    async fn delete_strays(&mut self, scope: &Scope<'_>, parent: &str, strays: &[String]) -> Result<bool, Stop> {
        tracing::info!(lock = %self.name, ?strays, "deleting earlier nodes of this acquisition");
        for stray in strays {
            let path = format!("{parent}/{stray}");
            let delete = scope.session.client.delete(&path, None);
            if let Err(Settled::Retry) = self.ask(&scope.url.root, "deleting an earlier node of ours", delete).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Creates our ephemeral sequential node (and the container parent if missing). A create
    /// whose outcome is unknown is looked for by its unique prefix before it is retried.
    async fn create(&mut self, scope: &Scope<'_>, parent: &str, prefix: &str) -> Result<Created, Stop> {
        let client = &scope.session.client;
        let root = &scope.url.root;
        let acls = node_acls(scope.url);
        let mut outcome_unknown = false;
        // Whether a create of ours went unanswered: then another node with our prefix may exist.
        let mut clean = true;
        loop {
            if outcome_unknown {
                clean = false;
                match find_ours(client, parent, prefix, self.clock.bound()).await {
                    Ok(Some((path, czxid))) => {
                        self.clock.answered();
                        return Ok(Created { path, czxid, listed: None, clean });
                    }
                    Ok(None) => {
                        self.clock.answered();
                        outcome_unknown = false;
                    }
                    Err(f) => {
                        self.settle(f, root).await?;
                        continue;
                    }
                }
            }
            let options = CreateMode::EphemeralSequential.with_acls(acls);
            let sent = Instant::now();
            // The listing is sent right behind the create and served after it (one session's
            // requests are ordered): a free lock is granted in one round trip.
            // Where the parent may be missing (first use of the name by this client, or the
            // server removed the empty container), it is created in the same round trip.
            let container = CreateMode::Container.with_acls(acls);
            let make_parent = (!scope.parents.contains(parent)).then(|| client.create(parent, &[], &container));
            let data = node_data(self.recipe, self.opts);
            let create = client.create(prefix, &data, &options);
            let listing = client.list_children(parent);
            let both = async {
                if let Some(make_parent) = make_parent {
                    // Its answer does not matter: the create below tells what happened.
                    let _ = make_parent.await;
                }
                let (created, listed) = tokio::join!(create, listing);
                created.map(|c| (c, listed.ok()))
            };
            match self.ask(root, "creating the lock node", both).await? {
                Ok(((stat, seq), listed)) => {
                    let path = format!("{prefix}{seq}");
                    if stat.is_invalid() {
                        // Servers before 3.5 return no stat with the create.
                        match find_ours(client, parent, prefix, self.clock.bound()).await {
                            Ok(Some((path, czxid))) => return Ok(Created { path, czxid, listed: None, clean: false }),
                            Ok(None) => return Err(Stop::Restart(NODE_VANISHED)),
                            Err(f) => {
                                self.settle(f, root).await?;
                                outcome_unknown = true;
                                continue;
                            }
                        }
                    }
                    scope.parents.note(parent, true);
                    return Ok(Created { path, czxid: stat.czxid, listed: listed.map(|l| (l, sent)), clean });
                }
                Err(Settled::NoNode) => self.make_parent(scope, parent).await?,
                Err(Settled::Retry) => outcome_unknown = true,
            }
        }
    }

    /// The parent of our node is missing: creates it (a container), and the root too if an
    /// operator deleted it.
    async fn make_parent(&mut self, scope: &Scope<'_>, parent: &str) -> Result<(), Stop> {
        let client = &scope.session.client;
        let root = &scope.url.root;
        scope.parents.note(parent, false);
        let options = CreateMode::Container.with_acls(node_acls(scope.url));
        let make_parent = client.create(parent, &[], &options);
        match call(self.clock.bound(), "creating the lock's parent node", make_parent).await {
            Ok(_) | Err(Failure::Server(ZkError::NodeExists)) => self.clock.answered(),
            Err(f) => {
                if let Settled::NoNode = self.settle(f, root).await? {
                    // The root itself is gone (deleted by an operator): recreate it.
                    let ours = url_digest_id(scope.url);
                    let make_root = ensure_root(client, root, ours.as_deref());
                    match call(self.clock.bound(), "creating the root node", make_root).await {
                        Ok(Ok(())) => {}
                        Ok(Err(refused)) => return Err(Stop::Fail(refused)),
                        Err(f) => {
                            self.settle(f, root).await?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
