//! The lock recipes: ephemeral sequential nodes, herd-free watches, zxid fencing, and the
//! session-bound lease. One [`Attempt`] drives all three kinds; a [`Recipe`] only decides, from
//! a listing of the queue, whether our node holds or which nodes it waits for.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Backoff, Capabilities, DistributedLock, DistributedRwLock, DistributedSemaphore, FencingToken,
    Lease, LeaseGrant, LeaseHandle, LeaseModel, LockError, LockName, LossTrigger, LostSignal, OwnerId, ReleaseOutcome,
    RenewOutcome, WaitPolicy, WakeMethod,
};
use tokio::time::{sleep, sleep_until, timeout, Instant};
use zookeeper_client::{Acls, Client, CreateMode, EventType, SessionState};

use crate::config::{ZkOptions, ZkUrl};

type ZkError = zookeeper_client::Error;

const BACKEND: &str = "zookeeper";

/// Connects to a ZooKeeper ensemble and returns a lock client with its own session.
///
/// `url` is `zk://[user:password@]host1:port1,host2:port2/root`: the root path (default
/// `/dlock`) is created when missing; with `user:password` the session authenticates with
/// digest auth and every node it creates is readable and writable only by that user.
/// A malformed URL is `LockError::Config`; a server that cannot be reached within
/// `options.connect_timeout` is `LockError::Unavailable`.
pub async fn connect(url: &str, options: ZkOptions) -> Result<ZkLock, LockError> {
    options.validate()?;
    let url = ZkUrl::parse(url)?;
    let inner = Arc::new(Inner {
        url,
        options,
        session: tokio::sync::Mutex::new(None),
        watch_events: AtomicU64::new(0),
        parents: Mutex::new(HashSet::new()),
    });
    let lock = ZkLock { inner };
    let deadline = Instant::now() + lock.inner.options.connect_timeout;
    lock.session(deadline).await?;
    Ok(lock)
}

/// A ZooKeeper lock client: one session at a time (a new one is made lazily if the previous
/// one expired; leases of an expired session are lost). Cheap to clone; clones share the session.
#[derive(Clone)]
pub struct ZkLock {
    inner: Arc<Inner>,
}

struct Inner {
    url: ZkUrl,
    options: ZkOptions,
    session: tokio::sync::Mutex<Option<Session>>,
    watch_events: AtomicU64,
    /// Parents known to exist, so that acquires skip creating them.
    parents: Mutex<HashSet<String>>,
}

/// How many parents [`Inner::parents`] remembers.
const MAX_KNOWN_PARENTS: usize = 10_000;

#[derive(Clone)]
struct Session {
    client: Client,
    id: i64,
}

impl fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkLock").field("url", &self.inner.url).field("options", &self.inner.options).finish()
    }
}

/// How one request failed, sorted by what the recipe does about it.
enum Failure {
    /// The outcome is unknown (connection lost, no answer in time): look, then retry.
    Transient(LockError),
    /// The session is over: its ephemeral nodes are gone; start again with a new session.
    SessionGone,
    /// A definite answer from the server (no node, node exists, not authorised, …).
    Server(ZkError),
}

fn classify(e: ZkError) -> Failure {
    match e {
        ZkError::SessionExpired | ZkError::SessionMoved | ZkError::ClientClosed | ZkError::AuthFailed => {
            Failure::SessionGone
        }
        ZkError::ConnectionLoss
        | ZkError::Timeout
        | ZkError::Throttled
        | ZkError::NoHosts
        | ZkError::Custom(_)
        | ZkError::UnexpectedError(_) => {
            Failure::Transient(LockError::unavailable_from(BACKEND, "the connection to ZooKeeper was lost", e))
        }
        other => Failure::Server(other),
    }
}

/// Runs one request, bounded by `bound`.
async fn call<T>(bound: Duration, what: &str, fut: impl Future<Output = Result<T, ZkError>>) -> Result<T, Failure> {
    match timeout(bound, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(e)),
        Err(_) => {
            Err(Failure::Transient(LockError::unavailable(BACKEND, format!("{what} got no answer within {bound:?}"))))
        }
    }
}

fn server_error(e: ZkError, root: &str) -> LockError {
    match e {
        ZkError::NoAuth => LockError::config(format!(
            "not authorised to create lock nodes under {root}; give the right user:password in the zk:// URL"
        )),
        ZkError::BadArguments(_) => LockError::config(format!("ZooKeeper rejected a path under {root}: {e}")),
        other => LockError::backend(BACKEND, other),
    }
}

fn connected(state: SessionState) -> bool {
    matches!(state, SessionState::SyncConnected | SessionState::ConnectedReadOnly)
}

/// Which lock kind, and in it which side, an acquisition is for. The three kinds live under
/// different parents, so one name used as a lock, a read-write lock and a semaphore names three
/// independent things.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recipe {
    /// The exclusive lock: the lowest node holds.
    Exclusive,
    /// A reader: holds while no write node precedes it.
    Read,
    /// A writer: holds when it is the lowest node.
    Write,
    /// One of `n` permits: holds while fewer than `n` nodes precede it.
    Permit(u32),
}

/// What a node should do, given the queue.
enum Verdict {
    Hold,
    /// Wait for any of these nodes to be deleted.
    Wait(Vec<String>),
    /// Wait for this semaphore node to be deleted or granted: a permit node's data is
    /// rewritten when it is granted (its version turns 1).
    WaitGranted(String),
}

impl Recipe {
    /// The parent segment's kind marker. Escaped names never contain `~`, so `rw~x` and `sem~x`
    /// can never be the parent of an exclusive lock (whose segment is the bare escaped name).
    fn marker(self) -> &'static str {
        match self {
            Recipe::Exclusive => "",
            Recipe::Read | Recipe::Write => "rw~",
            Recipe::Permit(_) => "sem~",
        }
    }

    /// The word between the owner and the sequence in our node names.
    fn role(self) -> String {
        match self {
            Recipe::Exclusive => "lock".to_owned(),
            Recipe::Read => "read".to_owned(),
            Recipe::Write => "write".to_owned(),
            Recipe::Permit(n) => format!("permits{n}"),
        }
    }

    /// Whether a node with this role takes part in this kind's queue (foreign nodes do not).
    fn member(self, role: &str) -> bool {
        match self {
            Recipe::Exclusive => role == "lock",
            Recipe::Read | Recipe::Write => role == "read" || role == "write",
            Recipe::Permit(_) => permits_of(role).is_some(),
        }
    }

    /// The data stored in our node (the semaphore's permits, for operators to read).
    fn data(self) -> Vec<u8> {
        match self {
            Recipe::Permit(n) => n.to_string().into_bytes(),
            _ => Vec::new(),
        }
    }

    /// Whether the node at `index` of `queue` holds, or which nodes it waits for. An `index`
    /// of `queue.len()` asks whether a newcomer would hold at once. `InvalidOptions` when a
    /// semaphore node ahead of us was made with another number of permits.
    fn verdict(self, name: &LockName, queue: &[String], index: usize) -> Result<Verdict, LockError> {
        let ahead = &queue[..index.min(queue.len())];
        match self {
            Recipe::Exclusive | Recipe::Write => Ok(match ahead.last() {
                None => Verdict::Hold,
                Some(predecessor) => Verdict::Wait(vec![predecessor.clone()]),
            }),
            Recipe::Read => Ok(match ahead.iter().rev().find(|c| role_of(c) == Some("write")) {
                None => Verdict::Hold,
                Some(writer) => Verdict::Wait(vec![writer.clone()]),
            }),
            Recipe::Permit(n) => {
                if let Some(m) = ahead.iter().filter_map(|c| role_of(c).and_then(permits_of)).find(|m| *m != n) {
                    return Err(LockError::invalid_options(format!(
                        "the semaphore {:?} is in use with {m} permits, not {n}; every user of a semaphore must ask for the same number of permits",
                        name.as_str()
                    )));
                }
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                Ok(match ahead.len() {
                    k if k < n => Verdict::Hold,
                    // The first waiter: all `n` nodes ahead hold, and any of them leaving
                    // frees a place for us.
                    k if k == n => Verdict::Wait(ahead.to_vec()),
                    // Further back: we can only become the first waiter once our predecessor
                    // has left or been granted (which rewrites its data).
                    _ => Verdict::WaitGranted(ahead[ahead.len() - 1].clone()),
                })
            }
        }
    }
}

/// The permits of a semaphore node's role (`permits3` → 3).
fn permits_of(role: &str) -> Option<u32> {
    let digits = role.strip_prefix("permits")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// `_c_<uuid>-<role>-`, the naming of Curator's protected lock nodes: the unique part lets a
/// create whose reply was lost be found again, and the queue sorts on the sequence alone.
/// (Interoperation of the exclusive lock with Curator clients on the same path is plausible but
/// untested.)
fn node_prefix(owner: OwnerId, role: &str) -> String {
    let h = owner.to_hex();
    format!("_c_{}-{}-{}-{}-{}-{role}-", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The role and sequence number of a node (`…-lock-0000000042` → `("lock", 42)`), or `None`
/// for nodes that are not queue nodes.
///
/// The server's per-parent counter is a signed 32-bit number: after 2^31 creates under one
/// parent it continues at `-2147483648`, which is read as 2^31 so the queue order holds.
fn parse_node(child: &str) -> Option<(&str, i64)> {
    let (head, seq) = child.rsplit_once('-')?;
    if seq.len() < 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = seq.parse().ok()?;
    let (head, n) = match head.strip_suffix('-') {
        // Wrapped past i32::MAX: "-2147483648" follows 2147483647.
        Some(head) => (head, (1i64 << 32) - n),
        None => (head, n),
    };
    let role = head.rsplit('-').next().unwrap_or(head);
    Some((role, n))
}

fn role_of(child: &str) -> Option<&str> {
    parse_node(child).map(|(role, _)| role)
}

/// The nodes of `recipe`'s kind, in queue order.
fn queue(recipe: Recipe, mut children: Vec<String>) -> Vec<String> {
    children.retain(|c| parse_node(c).is_some_and(|(role, _)| recipe.member(role)));
    children.sort_by_key(|c| parse_node(c).map(|(_, seq)| seq));
    children
}

/// What a request step found out.
enum Step<T> {
    Done(T),
    /// The session ended or our node vanished: start over (with a new session).
    Restart(&'static str),
}

/// The per-acquisition state of `acquire`/`try_acquire`.
struct Attempt<'a> {
    lock: &'a ZkLock,
    recipe: Recipe,
    name: &'a LockName,
    opts: &'a AcquireOptions,
    begun: Instant,
    /// When waiting ends; `None` waits forever.
    deadline: Option<Instant>,
    /// Whether to queue at all (false for try_acquire and `WaitPolicy::NoWait`).
    wait: bool,
    unavailable_since: Option<Instant>,
    backoff: Backoff,
}

impl Attempt<'_> {
    fn per_request(&self) -> Duration {
        self.opts.request_timeout.min(self.lock.inner.options.request_timeout)
    }

    /// When this call must have answered: the end of the caller's wait, or for a single
    /// attempt (try_acquire, `NoWait`) one request timeout; `None` when waiting forever.
    fn limit(&self) -> Option<Instant> {
        if self.wait {
            self.deadline
        } else {
            Some(self.begun + self.per_request())
        }
    }

    /// The bound of one request: the request timeout, never beyond the call's limit (but at
    /// least a little, so that a request sent at the last moment can still be answered).
    fn bound(&self) -> Duration {
        match self.limit() {
            Some(l) => {
                self.per_request().min(l.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)))
            }
            None => self.per_request(),
        }
    }

    fn timeout_error(&self) -> LockError {
        LockError::Timeout { name: self.name.as_str().to_owned(), waited: self.begun.elapsed() }
    }

    /// After a transient failure: waits a little and says whether to retry. Gives up with
    /// `Unavailable` when the call's limit would pass, or the server has not answered for
    /// `connect_timeout` (which bounds an endless wait against a dead ensemble).
    async fn after_transient(&mut self, err: LockError) -> Result<(), LockError> {
        let now = Instant::now();
        let since = *self.unavailable_since.get_or_insert(now);
        let delay = self.backoff.next_delay();
        let out_of_time = self.limit().is_some_and(|l| now + delay >= l);
        if out_of_time || now.duration_since(since) >= self.lock.inner.options.connect_timeout {
            return Err(err);
        }
        tracing::debug!(lock = %self.name, error = %err, "zookeeper request failed; retrying");
        sleep(delay).await;
        Ok(())
    }

    fn answered(&mut self) {
        self.unavailable_since = None;
        self.backoff.reset(Duration::from_millis(20));
    }

    async fn run(mut self) -> Result<Option<Lease>, LockError> {
        loop {
            let session = {
                let now = Instant::now();
                let deadline = match self.limit() {
                    Some(l) => l.max(now + Duration::from_millis(1)),
                    None => now + self.lock.inner.options.connect_timeout,
                };
                self.lock.session(deadline).await?
            };
            match self.with_session(&session).await? {
                Step::Done(lease) => return Ok(lease),
                Step::Restart(why) => {
                    tracing::info!(lock = %self.name, why, "zookeeper acquire starts over");
                    if self.limit().is_some_and(|l| Instant::now() >= l) {
                        return Err(LockError::unavailable(
                            BACKEND,
                            format!("{why}, and no time is left for a new one"),
                        ));
                    }
                    sleep(self.backoff.next_delay()).await;
                }
            }
        }
    }

    async fn with_session(&mut self, session: &Session) -> Result<Step<Option<Lease>>, LockError> {
        let client = &session.client;
        let recipe = self.recipe;
        let parent = self.lock.parent(recipe, self.name);
        let root = &self.lock.inner.url.root;

        // try_acquire on a busy lock answers without creating (and deleting) a node, which
        // would otherwise wake the waiter behind it for nothing.
        if !self.wait {
            loop {
                match call(self.bound(), "listing lock nodes", client.list_children(&parent)).await {
                    Ok(children) => {
                        self.answered();
                        let children = queue(recipe, children);
                        if !matches!(recipe.verdict(self.name, &children, children.len())?, Verdict::Hold) {
                            return Ok(Step::Done(None));
                        }
                        break;
                    }
                    Err(Failure::Server(ZkError::NoNode)) => break,
                    Err(Failure::Server(e)) => return Err(server_error(e, root)),
                    Err(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                    Err(Failure::Transient(e)) => self.after_transient(e).await?,
                }
            }
        }

        let owner = OwnerId::random();
        let prefix = format!("{parent}/{}", node_prefix(owner, &recipe.role()));
        let mut guard = NodeGuard::new(client.clone(), parent.clone(), prefix.clone());
        let create_sent = Instant::now();
        let (path, czxid, mut listed) = match self.create(client, &parent, &prefix).await? {
            Step::Done(created) => created,
            Step::Restart(why) => return Ok(Step::Restart(why)),
        };
        guard.path = Some(path.clone());
        let own = path.rsplit('/').next().unwrap_or_default().to_owned();

        // valid_until counts from the create when the lock was free at once, else from the
        // listing that found us first after a wake-up: either way a request the server answered
        // while our node held the lock.
        let mut woken = false;
        loop {
            let sent = if woken { Instant::now() } else { create_sent };
            let listing = async {
                match listed.take() {
                    Some(children) => Ok(children),
                    None => client.list_children(&parent).await,
                }
            };
            let children = match call(self.bound(), "listing lock nodes", listing).await {
                Ok(c) => {
                    self.answered();
                    queue(recipe, c)
                }
                Err(Failure::Server(ZkError::NoNode)) => return Ok(Step::Restart("our lock node vanished")),
                Err(Failure::Server(e)) => return Err(server_error(e, root)),
                Err(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                Err(Failure::Transient(e)) => {
                    self.after_transient(e).await?;
                    continue;
                }
            };
            let Some(index) = children.iter().position(|c| *c == own) else {
                // Deleted by someone else, or the session expired under us.
                return Ok(Step::Restart("our lock node vanished"));
            };
            let (watched, until_granted) = match recipe.verdict(self.name, &children, index)? {
                Verdict::Hold => {
                    let mut token = czxid;
                    if let Recipe::Permit(_) = recipe {
                        // Mark our node granted, which wakes the waiter right behind us (it
                        // becomes the first waiter and must watch the holders, us included).
                        // The mark's zxid is the token: it follows the order in which grants
                        // complete, even where an earlier waiter learns of its permit after a
                        // later one (the nodes' czxids follow arrival order only).
                        let mark = client.set_data(&path, &recipe.data(), None);
                        match call(self.bound(), "marking our permit node granted", mark).await {
                            Ok(stat) => {
                                self.answered();
                                token = stat.mzxid;
                            }
                            Err(Failure::Server(ZkError::NoNode)) => {
                                return Ok(Step::Restart("our lock node vanished"))
                            }
                            Err(Failure::Server(e)) => return Err(server_error(e, root)),
                            Err(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                            Err(Failure::Transient(e)) => {
                                self.after_transient(e).await?;
                                continue;
                            }
                        }
                    }
                    guard.disarm();
                    let lease = self.lock.grant(session, self.name, owner, path, token, sent, self.opts);
                    return Ok(Step::Done(Some(lease)));
                }
                Verdict::Wait(watched) => (watched, false),
                Verdict::WaitGranted(predecessor) => (vec![predecessor], true),
            };
            if !self.wait {
                // Busy: `guard` deletes our node; acquire turns this into Timeout.
                return Ok(Step::Done(None));
            }
            // All watch requests go out before the first answer is awaited (one round trip).
            let paths: Vec<String> = watched.iter().map(|c| format!("{parent}/{c}")).collect();
            let requests: Vec<_> = paths.iter().map(|p| client.get_and_watch_data(p)).collect();
            let mut watchers = Vec::with_capacity(requests.len());
            let mut relist = false;
            let mut failure = None;
            for request in requests {
                match call(self.bound(), "watching the node we wait for", request).await {
                    // Granted already: we may be the first waiter now.
                    Ok((_, stat, _)) if until_granted && stat.version > 0 => relist = true,
                    Ok((_, _, w)) => watchers.push(w),
                    // That node left meanwhile: look again.
                    Err(Failure::Server(ZkError::NoNode)) => relist = true,
                    Err(f) => {
                        failure = Some(f);
                        break;
                    }
                }
            }
            match failure {
                None => self.answered(),
                Some(Failure::Server(e)) => return Err(server_error(e, root)),
                Some(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                Some(Failure::Transient(e)) => {
                    self.after_transient(e).await?;
                    continue;
                }
            }
            if relist || watchers.is_empty() {
                woken = true;
                continue;
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
            let event = match self.deadline {
                Some(d) => tokio::select! {
                    ev = changed => ev,
                    _ = sleep_until(d) => {
                        return Err(if connected(client.state()) {
                            self.timeout_error()
                        } else {
                            LockError::unavailable(BACKEND, format!(
                                "the connection to ZooKeeper was lost while waiting for {:?}", self.name.as_str()))
                        });
                    }
                },
                None => changed.await,
            };
            self.lock.inner.watch_events.fetch_add(1, Ordering::Relaxed);
            woken = true;
            tracing::trace!(lock = %self.name, event = ?event.event_type, path = %event.path, "watch fired");
            if event.event_type == EventType::Session {
                return Ok(Step::Restart("the ZooKeeper session ended"));
            }
        }
    }

    /// Creates our ephemeral sequential node (and the container parent if missing). A create
    /// whose outcome is unknown is looked for by its unique prefix before it is retried.
    /// Returns our node's path and czxid, and the queue as listed right after the create (when
    /// that listing succeeded).
    async fn create(
        &mut self,
        client: &Client,
        parent: &str,
        prefix: &str,
    ) -> Result<Step<(String, i64, Option<Vec<String>>)>, LockError> {
        let root = &self.lock.inner.url.root;
        let acls = self.lock.acls();
        let mut outcome_unknown = false;
        loop {
            if outcome_unknown {
                match find_ours(client, parent, prefix, self.bound()).await {
                    Ok(Some((path, czxid))) => {
                        self.answered();
                        return Ok(Step::Done((path, czxid, None)));
                    }
                    Ok(None) => {
                        self.answered();
                        outcome_unknown = false;
                    }
                    Err(Failure::Server(e)) => return Err(server_error(e, root)),
                    Err(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                    Err(Failure::Transient(e)) => {
                        self.after_transient(e).await?;
                        continue;
                    }
                }
            }
            let options = CreateMode::EphemeralSequential.with_acls(acls);
            // The listing is sent right behind the create and served after it (one session's
            // requests are ordered): a free lock is granted in one round trip.
            // Where the parent may be missing (first use of the name by this client, or the
            // server removed the empty container), it is created in the same round trip.
            let container = CreateMode::Container.with_acls(acls);
            let make_parent = (!self.lock.knows_parent(parent)).then(|| client.create(parent, &[], &container));
            let data = self.recipe.data();
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
            match call(self.bound(), "creating the lock node", both).await {
                Ok(((stat, seq), listed)) => {
                    self.answered();
                    let path = format!("{prefix}{seq}");
                    if stat.is_invalid() {
                        // Servers before 3.5 return no stat with the create.
                        match find_ours(client, parent, prefix, self.bound()).await {
                            Ok(Some((path, czxid))) => return Ok(Step::Done((path, czxid, None))),
                            Ok(None) => return Ok(Step::Restart("our lock node vanished")),
                            Err(Failure::Server(e)) => return Err(server_error(e, root)),
                            Err(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                            Err(Failure::Transient(e)) => {
                                self.after_transient(e).await?;
                                outcome_unknown = true;
                                continue;
                            }
                        }
                    }
                    self.lock.remember_parent(parent, true);
                    return Ok(Step::Done((path, stat.czxid, listed)));
                }
                Err(Failure::Server(ZkError::NoNode)) => {
                    self.answered();
                    self.lock.remember_parent(parent, false);
                    let options = CreateMode::Container.with_acls(acls);
                    match call(self.bound(), "creating the lock's parent node", client.create(parent, &[], &options))
                        .await
                    {
                        Ok(_) | Err(Failure::Server(ZkError::NodeExists)) => {}
                        Err(Failure::Server(ZkError::NoNode)) => {
                            // The root itself is gone (deleted by an operator): recreate it.
                            match call(self.bound(), "creating the root node", ensure_root(client, root, acls)).await {
                                Ok(()) => {}
                                Err(Failure::Server(e)) => return Err(server_error(e, root)),
                                Err(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                                Err(Failure::Transient(e)) => self.after_transient(e).await?,
                            }
                        }
                        Err(Failure::Server(e)) => return Err(server_error(e, root)),
                        Err(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                        Err(Failure::Transient(e)) => self.after_transient(e).await?,
                    }
                }
                Err(Failure::Server(e)) => return Err(server_error(e, root)),
                Err(Failure::SessionGone) => return Ok(Step::Restart("the ZooKeeper session ended")),
                Err(Failure::Transient(e)) => {
                    self.after_transient(e).await?;
                    outcome_unknown = true;
                }
            }
        }
    }
}

/// Finds the node created with `prefix` (unique per acquisition) and its czxid.
async fn find_ours(
    client: &Client,
    parent: &str,
    prefix: &str,
    bound: Duration,
) -> Result<Option<(String, i64)>, Failure> {
    let name = prefix.rsplit('/').next().unwrap_or_default();
    let children = match call(bound, "looking for our lock node", client.list_children(parent)).await {
        Ok(c) => c,
        Err(Failure::Server(ZkError::NoNode)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(child) = children.into_iter().find(|c| c.starts_with(name)) else { return Ok(None) };
    let path = format!("{parent}/{child}");
    match call(bound, "reading our lock node", client.check_stat(&path)).await? {
        Some(stat) => Ok(Some((path, stat.czxid))),
        None => Ok(None),
    }
}

/// Deletes our node if an acquisition ends without a grant (error, timeout, or the future being
/// dropped): in the background, retrying until the server answers or the session is over
/// (which deletes the node anyway).
struct NodeGuard {
    client: Option<Client>,
    parent: String,
    prefix: String,
    path: Option<String>,
}

impl NodeGuard {
    fn new(client: Client, parent: String, prefix: String) -> Self {
        NodeGuard { client: Some(client), parent, prefix, path: None }
    }

    fn disarm(&mut self) {
        self.client = None;
    }
}

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (parent, prefix, path) =
            (std::mem::take(&mut self.parent), std::mem::take(&mut self.prefix), self.path.take());
        rt.spawn(async move {
            // Requests of one session are served in order, so this listing sees a create that
            // was sent before the acquire was abandoned.
            let path = match path {
                Some(p) => Some(p),
                None => find_with_retry(&client, &parent, &prefix).await,
            };
            if let Some(path) = path {
                let _ = delete_with_retry(&client, &path).await;
            }
        });
    }
}

/// How long background clean-ups keep trying: past this the session has expired anyway (the
/// client gives up on a session after 7/5 of its timeout without contact).
fn cleanup_budget(client: &Client) -> Duration {
    client.session_timeout() * 2 + Duration::from_secs(5)
}

async fn find_with_retry(client: &Client, parent: &str, prefix: &str) -> Option<String> {
    let end = Instant::now() + cleanup_budget(client);
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
    while Instant::now() < end && !client.state().is_terminated() {
        match find_ours(client, parent, prefix, client.session_timeout()).await {
            Ok(found) => return found.map(|(p, _)| p),
            Err(Failure::Transient(_)) => sleep(backoff.next_delay()).await,
            Err(_) => return None,
        }
    }
    None
}

/// Deletes `path`: `Released` if it was there, `NotOwner` if it was gone (or the session is,
/// which deleted it).
async fn delete_with_retry(client: &Client, path: &str) -> Result<ReleaseOutcome, LockError> {
    let end = Instant::now() + cleanup_budget(client);
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
    let mut last = LockError::unavailable(BACKEND, "the lock node could not be deleted");
    while Instant::now() < end {
        if client.state().is_terminated() {
            return Ok(ReleaseOutcome::NotOwner);
        }
        match call(client.session_timeout(), "deleting the lock node", client.delete(path, None)).await {
            Ok(()) => return Ok(ReleaseOutcome::Released),
            Err(Failure::Server(ZkError::NoNode)) | Err(Failure::SessionGone) => return Ok(ReleaseOutcome::NotOwner),
            Err(Failure::Server(e)) => return Err(LockError::backend(BACKEND, e)),
            Err(Failure::Transient(e)) => {
                last = e;
                sleep(backoff.next_delay()).await;
            }
        }
    }
    Err(last)
}

impl ZkLock {
    /// How many watches fired in this client's waits (any lock kind), so that tests can count
    /// wake-ups: an exclusive-lock release wakes exactly one waiter, a writer's release the
    /// readers right behind it, a permit's release one waiter.
    pub fn watch_events(&self) -> u64 {
        self.inner.watch_events.load(Ordering::Relaxed)
    }

    /// The znode under which the queue of the exclusive lock `name` lives
    /// (`<root>/<escaped name>`).
    pub fn parent_path(&self, name: &LockName) -> String {
        self.parent(Recipe::Exclusive, name)
    }

    /// The znode under which the readers and writers of the read-write lock `name` queue
    /// (`<root>/rw~<escaped name>`).
    pub fn rw_parent_path(&self, name: &LockName) -> String {
        self.parent(Recipe::Read, name)
    }

    /// The znode under which the permit nodes of the semaphore `name` queue
    /// (`<root>/sem~<escaped name>`).
    pub fn semaphore_parent_path(&self, name: &LockName) -> String {
        self.parent(Recipe::Permit(1), name)
    }

    /// The id of the current session, if one is established (ZooKeeper's `ephemeralOwner`).
    pub async fn session_id(&self) -> Option<i64> {
        self.inner.session.lock().await.as_ref().map(|s| s.id)
    }

    fn knows_parent(&self, parent: &str) -> bool {
        self.inner.parents.lock().unwrap_or_else(|e| e.into_inner()).contains(parent)
    }

    fn remember_parent(&self, parent: &str, exists: bool) {
        let mut known = self.inner.parents.lock().unwrap_or_else(|e| e.into_inner());
        if !exists {
            known.remove(parent);
            return;
        }
        if known.len() >= MAX_KNOWN_PARENTS {
            // Only a hint: forgetting costs one extra request per name.
            known.clear();
        }
        known.insert(parent.to_owned());
    }

    fn parent(&self, recipe: Recipe, name: &LockName) -> String {
        format!("{}/{}{}", self.inner.url.root, recipe.marker(), name.escaped())
    }

    fn acls(&self) -> Acls<'static> {
        if self.inner.url.digest.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }

    /// The current session, or a new one if there is none or it ended (expired, closed).
    async fn session(&self, deadline: Instant) -> Result<Session, LockError> {
        // Another call may be establishing a session right now: wait for it, within our limit.
        let mut current = match tokio::time::timeout_at(deadline, self.inner.session.lock()).await {
            Ok(guard) => guard,
            Err(_) => {
                return Err(LockError::unavailable(
                    BACKEND,
                    format!("no ZooKeeper session with {} in time (another call is still connecting)", self.inner.url),
                ))
            }
        };
        if let Some(s) = current.as_ref() {
            if !s.client.state().is_terminated() {
                return Ok(s.clone());
            }
            tracing::warn!(session = s.id, state = %s.client.state(), "zookeeper session ended; starting a new one");
        }
        let bound = self.inner.options.connect_timeout.min(deadline.saturating_duration_since(Instant::now()));
        let session = self.new_session(bound).await?;
        *current = Some(session.clone());
        Ok(session)
    }

    async fn new_session(&self, bound: Duration) -> Result<Session, LockError> {
        let url = &self.inner.url;
        let started = Instant::now();
        let mut connector = Client::connector().with_session_timeout(self.inner.options.session_timeout);
        if let Some((user, pass)) = &url.digest {
            connector = connector.with_auth("digest", format!("{user}:{pass}").as_bytes());
        }
        let client = match timeout(bound, connector.connect(&url.hosts)).await {
            Err(_) => {
                return Err(LockError::unavailable(
                    BACKEND,
                    format!("no session with {url} within {bound:?} (connect_timeout)"),
                ))
            }
            Ok(Err(ZkError::AuthFailed)) => {
                return Err(LockError::config(format!(
                    "ZooKeeper authentication failed for {url}; check user:password in the URL"
                )))
            }
            Ok(Err(e)) => return Err(LockError::unavailable_from(BACKEND, format!("cannot connect to {url}"), e)),
            Ok(Ok(c)) => c,
        };
        let left = bound.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        match timeout(left, ensure_root(&client, &url.root, self.acls())).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(match classify(e) {
                    Failure::Server(e) => server_error(e, &url.root),
                    Failure::Transient(e) => e,
                    Failure::SessionGone => LockError::unavailable(BACKEND, "the new ZooKeeper session ended at once"),
                })
            }
            Err(_) => {
                return Err(LockError::unavailable(
                    BACKEND,
                    format!("creating the root {} took over {bound:?}", url.root),
                ))
            }
        }
        let id = client.session_id().0;
        tracing::debug!(session = id, timeout = ?client.session_timeout(), "zookeeper session established");
        Ok(Session { client, id })
    }

    #[allow(clippy::too_many_arguments)]
    fn grant(
        &self,
        session: &Session,
        name: &LockName,
        owner: OwnerId,
        path: String,
        zxid: i64,
        confirmed: Instant,
        opts: &AcquireOptions,
    ) -> Lease {
        let released = Arc::new(AtomicBool::new(false));
        let confirmed = Arc::new(Mutex::new(confirmed));
        let handle = Arc::new(ZkHandle {
            client: session.client.clone(),
            session_id: session.id,
            path: path.clone(),
            released: Arc::clone(&released),
            confirmed: Arc::clone(&confirmed),
        });
        // zxids are positive; the cast cannot change their order.
        let token = FencingToken(zxid.max(0) as u64);
        let lease = Lease::new(LeaseGrant::new(name.clone(), token, owner, confirmed_at(&confirmed), handle), opts);
        let monitor = Monitor {
            client: session.client.clone(),
            session_id: session.id,
            path,
            trigger: lease.loss_trigger(),
            lost: lease.lost(),
            released,
            confirmed,
        };
        tokio::spawn(monitor.run());
        lease
    }
}

/// Creates the root if missing. Only the root itself gets the credentials' ACL: the nodes above
/// it are a namespace shared with others, so they stay open.
async fn ensure_root(client: &Client, root: &str, acls: Acls<'static>) -> Result<(), ZkError> {
    if let Some((above, _)) = root.rsplit_once('/').filter(|(above, _)| !above.is_empty()) {
        client.mkdir(above, &CreateMode::Persistent.with_acls(Acls::anyone_all())).await?;
    }
    match client.create(root, &[], &CreateMode::Persistent.with_acls(acls)).await {
        Ok(_) | Err(ZkError::NodeExists) => Ok(()),
        Err(e) => Err(e),
    }
}

fn confirmed_at(c: &Mutex<Instant>) -> Instant {
    *c.lock().unwrap_or_else(|e| e.into_inner())
}

/// Renew and release of one granted node.
struct ZkHandle {
    client: Client,
    session_id: i64,
    path: String,
    released: Arc<AtomicBool>,
    /// When the last request that proved our node alive was sent (the server heard from our
    /// session no earlier than this).
    confirmed: Arc<Mutex<Instant>>,
}

#[async_trait]
impl LeaseHandle for ZkHandle {
    async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
        let state = self.client.state();
        if state.is_terminated() {
            return Ok(RenewOutcome::NotOwner);
        }
        if !connected(state) {
            // Requests would queue until the connection is back; answer now instead.
            return Err(LockError::unavailable(BACKEND, "the connection to ZooKeeper is suspended"));
        }
        let sent = Instant::now();
        match self.client.check_stat(&self.path).await {
            Ok(Some(stat)) if stat.ephemeral_owner == self.session_id => {
                let mut c = self.confirmed.lock().unwrap_or_else(|e| e.into_inner());
                *c = (*c).max(sent);
                Ok(RenewOutcome::Renewed)
            }
            Ok(_) => Ok(RenewOutcome::NotOwner),
            Err(e) => match classify(e) {
                Failure::SessionGone => Ok(RenewOutcome::NotOwner),
                Failure::Transient(e) => Err(e),
                Failure::Server(e) => Err(LockError::backend(BACKEND, e)),
            },
        }
    }

    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.released.store(true, Ordering::SeqCst);
        // In a task, so the deletion goes on if the caller stops waiting for it.
        let (client, path) = (self.client.clone(), self.path.clone());
        match tokio::spawn(async move { delete_with_retry(&client, &path).await }).await {
            Ok(r) => r,
            Err(e) => Err(LockError::backend(BACKEND, e)),
        }
    }
}

/// Fires a lease's lost signal when its session ends, its node is deleted, or the connection
/// stays suspended until the server may have expired the session; and deletes the node of a
/// lease that was lost but not released, so that nobody waits on a lock we no longer claim.
struct Monitor {
    client: Client,
    session_id: i64,
    path: String,
    trigger: LossTrigger,
    lost: LostSignal,
    released: Arc<AtomicBool>,
    confirmed: Arc<Mutex<Instant>>,
}

enum NodeEnd {
    Deleted,
    SessionEnded(SessionState),
    NotOurs,
}

impl Monitor {
    async fn run(self) {
        let session_timeout = self.client.session_timeout();
        let drift = session_timeout / 100 + Duration::from_millis(2);
        // The server keeps the session at least `session_timeout` after it last heard from us,
        // and it heard from us no earlier than when we sent a request it answered. Probing a few
        // times per session timeout keeps that instant fresh, and stopping to claim the lock at
        // `confirmed + session_timeout - drift` needs no assumption about round trips or about
        // when the client library notices a dead connection.
        let probe_every = (session_timeout / 5).max(Duration::from_millis(20));
        let mut next_probe = Instant::now() + probe_every;
        let mut states = self.client.state_watcher();
        let node_end = self.node_end();
        tokio::pin!(node_end);
        let lost = self.lost.fired();
        tokio::pin!(lost);
        loop {
            let expiry_risk =
                (confirmed_at(&self.confirmed) + session_timeout).checked_sub(drift).unwrap_or_else(Instant::now);
            tokio::select! {
                _ = &mut lost => break,
                end = &mut node_end => {
                    let reason = match end {
                        NodeEnd::Deleted => "our lock node was deleted".to_owned(),
                        NodeEnd::NotOurs => "our lock node belongs to another session".to_owned(),
                        NodeEnd::SessionEnded(s) => format!("the ZooKeeper session ended ({s})"),
                    };
                    self.fire(&reason);
                    return;
                }
                state = states.changed() => {
                    if state.is_terminated() {
                        self.fire(&format!("the ZooKeeper session ended ({state})"));
                        return;
                    }
                }
                _ = sleep_until(next_probe) => {
                    next_probe = Instant::now() + probe_every;
                    if !connected(self.client.state()) {
                        // The request would only queue until the connection is back.
                        continue;
                    }
                    let sent = Instant::now();
                    let probe = tokio::select! {
                        r = self.client.check_stat(&self.path) => Some(r),
                        _ = sleep_until(expiry_risk.min(sent + probe_every)) => None,
                    };
                    match probe.map(|r| r.map_err(classify)) {
                        Some(Ok(Some(stat))) if stat.ephemeral_owner == self.session_id => {
                            let mut c = self.confirmed.lock().unwrap_or_else(|e| e.into_inner());
                            *c = (*c).max(sent);
                        }
                        Some(Ok(_)) => {
                            self.fire("our lock node is gone or belongs to another session");
                            break;
                        }
                        Some(Err(Failure::SessionGone)) => {
                            self.fire("the ZooKeeper session ended");
                            return;
                        }
                        // No answer (yet): the deadline below decides.
                        _ => {}
                    }
                }
                _ = sleep_until(expiry_risk) => {
                    if Instant::now() >= (confirmed_at(&self.confirmed) + session_timeout).checked_sub(drift).unwrap_or_else(Instant::now) {
                        self.fire("ZooKeeper has not answered for so long that the session may have expired");
                        break;
                    }
                }
            }
        }
        if !self.released.load(Ordering::SeqCst) {
            // A lost lease is dropped without a release: free the node ourselves once the
            // server is reachable again (if the session survived).
            let _ = delete_with_retry(&self.client, &self.path).await;
        }
    }

    fn fire(&self, reason: &str) {
        // A release deletes the node itself: that is no loss.
        if !self.released.load(Ordering::SeqCst) {
            self.trigger.fire(reason);
        }
    }

    /// Resolves when our node is gone or no longer ours.
    async fn node_end(&self) -> NodeEnd {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
        loop {
            match self.client.get_and_watch_data(&self.path).await {
                Ok((_, stat, watcher)) => {
                    if stat.ephemeral_owner != self.session_id {
                        return NodeEnd::NotOurs;
                    }
                    let event = watcher.changed().await;
                    match event.event_type {
                        EventType::NodeDeleted => return NodeEnd::Deleted,
                        EventType::Session => return NodeEnd::SessionEnded(event.session_state),
                        _ => continue,
                    }
                }
                Err(e) => match classify(e) {
                    Failure::Server(ZkError::NoNode) => return NodeEnd::Deleted,
                    Failure::SessionGone => return NodeEnd::SessionEnded(self.client.state()),
                    _ => sleep(backoff.next_delay()).await,
                },
            }
        }
    }
}

fn capabilities() -> Capabilities {
    let mut caps = Capabilities::new();
    caps.rw_lock = true;
    caps.semaphore = true;
    caps.fifo = true;
    caps.wake = WakeMethod::Watch;
    caps.lease_model = LeaseModel::PerSession;
    // czxid is persisted with the node and zxids only grow, across restarts too.
    caps.durable_fencing = true;
    // Sessions and their ephemeral nodes are persisted: a restart within the session
    // timeout keeps the holder's lock.
    caps.durable_leases = true;
    caps
}

fn permits(n: u32) -> Result<Recipe, LockError> {
    if n == 0 {
        return Err(LockError::invalid_options("a semaphore needs at least one permit; ask for permits >= 1"));
    }
    Ok(Recipe::Permit(n))
}

impl ZkLock {
    /// One attempt (try_acquire*): `Ok(None)` when busy.
    async fn try_once(
        &self,
        recipe: Recipe,
        name: &LockName,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        options.validate(&capabilities())?;
        let attempt = Attempt {
            lock: self,
            recipe,
            name,
            opts: options,
            begun: Instant::now(),
            deadline: None,
            wait: false,
            unavailable_since: None,
            backoff: Backoff::new(Duration::from_millis(20), Duration::from_millis(500)),
        };
        attempt.run().await
    }

    /// Queues and waits (acquire*) until granted or `options.wait` ends (`Timeout`).
    async fn wait_for(&self, recipe: Recipe, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        options.validate(&capabilities())?;
        let begun = Instant::now();
        let (deadline, wait) = match options.wait {
            // A zero wait is one attempt, like NoWait (busy → Timeout), not an instant Unavailable.
            WaitPolicy::NoWait => (None, false),
            WaitPolicy::For(w) if w.is_zero() => (None, false),
            WaitPolicy::For(w) => (Some(begun + w), true),
            // Forever, and any policy added later: wait until granted.
            _ => (None, true),
        };
        let attempt = Attempt {
            lock: self,
            recipe,
            name,
            opts: options,
            begun,
            deadline,
            wait,
            unavailable_since: None,
            backoff: Backoff::new(Duration::from_millis(20), Duration::from_millis(500)),
        };
        match attempt.run().await? {
            Some(lease) => Ok(lease),
            None => Err(LockError::Timeout { name: name.as_str().to_owned(), waited: begun.elapsed() }),
        }
    }
}

#[async_trait]
impl DistributedLock for ZkLock {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn try_acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(Recipe::Exclusive, name, options).await
    }

    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(Recipe::Exclusive, name, options).await
    }
}

#[async_trait]
impl DistributedRwLock for ZkLock {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn try_acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(Recipe::Read, name, options).await
    }

    async fn acquire_read(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(Recipe::Read, name, options).await
    }

    async fn try_acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(Recipe::Write, name, options).await
    }

    async fn acquire_write(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(Recipe::Write, name, options).await
    }
}

#[async_trait]
impl DistributedSemaphore for ZkLock {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits_total: u32,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        self.try_once(permits(permits_total)?, name, options).await
    }

    async fn acquire_permit(
        &self,
        name: &LockName,
        permits_total: u32,
        options: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        self.wait_for(permits(permits_total)?, name, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_sort_by_sequence() {
        let p = node_prefix(OwnerId::random(), "lock");
        assert!(p.starts_with("_c_") && p.ends_with("-lock-") && p.len() == 3 + 36 + 6);
        let q = queue(
            Recipe::Exclusive,
            vec![
                format!("{p}0000000010"),
                "foreign".into(),
                "_c_x-lock-0000000002".into(),
                "x-lock-abc".into(),
                "readlock-0000000001".into(),
                "_c_y-read-0000000003".into(),
                "_c_y-permits2-0000000004".into(),
            ],
        );
        assert_eq!(q, vec!["_c_x-lock-0000000002".to_owned(), format!("{p}0000000010")]);
        let wrapped = queue(
            Recipe::Exclusive,
            vec!["_c_b-lock--2147483647".into(), "_c_a-lock-2147483647".into(), "_c_c-lock--2147483648".into()],
        );
        assert_eq!(
            wrapped,
            vec!["_c_a-lock-2147483647".to_owned(), "_c_c-lock--2147483648".into(), "_c_b-lock--2147483647".into()]
        );
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn waits_for(v: Result<Verdict, LockError>) -> Option<Vec<String>> {
        match v.expect("no error") {
            Verdict::Hold => None,
            Verdict::Wait(w) => Some(w),
            Verdict::WaitGranted(p) => Some(vec![format!("granted {p}")]),
        }
    }

    #[test]
    fn rw_verdicts_follow_the_recipe() {
        let n = LockName::new("rw").expect("valid");
        let all = vec![
            "_c_a-read-0000000001".to_owned(),
            "_c_b-foreign-0000000000".into(),
            "_c_c-write-0000000002".into(),
            "_c_d-read-0000000003".into(),
            "_c_e-read-0000000004".into(),
            "_c_f-write-0000000005".into(),
            "_c_g-read-0000000006".into(),
        ];
        let q = queue(Recipe::Read, all);
        assert_eq!(q.len(), 6, "the foreign node is not in the queue");
        // The first reader holds; the writer waits for its predecessor only.
        assert!(waits_for(Recipe::Read.verdict(&n, &q, 0)).is_none());
        assert_eq!(waits_for(Recipe::Write.verdict(&n, &q, 1)), Some(names(&["_c_a-read-0000000001"])));
        // Readers behind the writer wait for that writer only, not for the readers between.
        assert_eq!(waits_for(Recipe::Read.verdict(&n, &q, 3)), Some(names(&["_c_c-write-0000000002"])));
        assert_eq!(waits_for(Recipe::Write.verdict(&n, &q, 4)), Some(names(&["_c_e-read-0000000004"])));
        // The last reader waits for the nearest earlier writer.
        assert_eq!(waits_for(Recipe::Read.verdict(&n, &q, 5)), Some(names(&["_c_f-write-0000000005"])));
        // A newcomer: a reader is busy while any writer is queued, a writer while anyone is.
        assert!(waits_for(Recipe::Read.verdict(&n, &q[..1], 1)).is_none());
        assert!(waits_for(Recipe::Write.verdict(&n, &q[..1], 1)).is_some());
        assert!(waits_for(Recipe::Write.verdict(&n, &[], 0)).is_none());
    }

    #[test]
    fn permit_verdicts_count_and_agree() {
        let n = LockName::new("sem").expect("valid");
        let q = queue(
            Recipe::Permit(2),
            names(&[
                "_c_a-permits2-0000000001",
                "_c_b-permits2-0000000002",
                "_c_c-permits2-0000000003",
                "_c_d-permits2-0000000004",
                "_c_e-read-0000000000",
            ]),
        );
        assert_eq!(q.len(), 4);
        assert!(waits_for(Recipe::Permit(2).verdict(&n, &q, 1)).is_none());
        // The first waiter watches the holders; the next its predecessor's grant.
        assert_eq!(
            waits_for(Recipe::Permit(2).verdict(&n, &q, 2)),
            Some(names(&["_c_a-permits2-0000000001", "_c_b-permits2-0000000002"]))
        );
        assert_eq!(waits_for(Recipe::Permit(2).verdict(&n, &q, 3)), Some(names(&["granted _c_c-permits2-0000000003"])));
        assert!(matches!(Recipe::Permit(3).verdict(&n, &q, 4), Err(LockError::InvalidOptions { .. })));
        // Nodes behind us are not our business: they check against us.
        assert!(Recipe::Permit(3).verdict(&n, &q, 0).is_ok());
        assert_eq!(permits_of("permits"), None);
        assert_eq!(permits_of("permits0"), None);
        assert_eq!(permits_of("permits12"), Some(12));
        assert!(matches!(permits(0), Err(LockError::InvalidOptions { .. })));
    }

    #[test]
    fn kinds_never_share_a_parent() {
        // Escaped names never contain '~', so the kind markers cannot be forged by a name.
        for raw in ["rw~x", "sem~x", "~", "rw%7Ex"] {
            let escaped = LockName::new(raw).expect("valid").escaped();
            assert!(!escaped.contains('~'), "{escaped}");
        }
        assert_ne!(Recipe::Read.marker(), Recipe::Permit(1).marker());
        assert_eq!(Recipe::Read.marker(), Recipe::Write.marker());
        assert_eq!(Recipe::Exclusive.marker(), "");
    }
}
