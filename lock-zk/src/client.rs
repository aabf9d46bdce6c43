//! The lock client, [`ZkLock`], defined and implemented here: connection, the session it keeps
//! (re-made after an expiry), where each kind's queue lives, and every lock kind's entry points
//! (each kind is a [`Recipe`] run through the same acquire machinery, over the current
//! session's [`Scope`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Capabilities, ChangeFeed, DistributedLock, FencingToken, HolderInfo, Lease, LeaseModel, LockError,
    LockName, LockService, WakeMethod,
};
use tokio::time::{timeout, Instant};
use zookeeper_client::{Client, OneshotWatcher};

use lock_core::backend::{audited_force_release, QueueKind, QueueLock};

use crate::acl::{ensure_root, url_digest_id};
use crate::acquire::Attempt;
use crate::config::{ZkOptions, ZkUrl};
use crate::hints::Hints;
use crate::inspect::failed;
use crate::keeper::{Keeper, Session};
use crate::recipe::Recipe;
use crate::scope::Scope;
use crate::session::{classify, server_error, Failure, ZkError, BACKEND};
use crate::tls::Tls;
use crate::{inspect, observe};

/// Connects to a ZooKeeper ensemble and returns a lock client with its own session.
///
/// `url` is `zk://[user:password@]host1:port1,host2:port2/root`: the root path (default
/// `/dlock`) is created when missing; with `user:password` the session authenticates with
/// digest auth, every node it creates is readable and writable only by that user, and an
/// existing root that others may change is refused (`LockError::Config`; see the crate docs).
/// A malformed URL is `LockError::Config`; a server that cannot be reached within
/// `options.connect_timeout` is `LockError::Unavailable`.
pub async fn connect(url: &str, options: ZkOptions) -> Result<ZkLock, LockError> {
    options.validate()?;
    let url = ZkUrl::parse(url)?;
    let tls = Tls::load(&options).await?;
    let inner = Arc::new(Inner {
        url,
        options,
        tls,
        session: tokio::sync::Mutex::new(None),
        app_session: false,
        watch_events: AtomicU64::new(0),
        parents: Hints::default(),
        busy: Hints::default(),
    });
    let lock = ZkLock { inner };
    let deadline = Instant::now() + lock.inner.options.connect_timeout;
    lock.session(deadline).await?;
    Ok(lock)
}

/// A lock client over the application's own ZooKeeper session (`client`), for every lock kind;
/// lock nodes live under `root` (an absolute path, resolved within the client's chroot if it has
/// one; empty: `/dlock`), created when missing.
///
/// What this costs, and gives up, against [`connect`]: nothing per request (the session is the
/// application's, shared). But the session is not ours to replace: once it expires or is closed,
/// every request answers `Unavailable` (leases held under it are lost, as always with an expired
/// session) and the application builds a new lock client over a new session. The nodes are
/// created with open ACLs (`world:anyone`): for digest-protected nodes use [`connect`] with
/// credentials in the URL. `options.session_timeout`, `connect_timeout` and `tls_ca_file` do not
/// apply (the session exists); `request_timeout` does.
pub async fn from_client(client: Client, root: &str, options: ZkOptions) -> Result<ZkLock, LockError> {
    options.validate()?;
    let url = ZkUrl::app(root)?;
    let bound = options.connect_timeout.max(options.request_timeout);
    create_root(&client, &url.root, None, bound, "the application's ZooKeeper session has ended").await?;
    let tls = Tls::load(&ZkOptions { tls_ca_file: None, ..options.clone() }).await?;
    let id = client.session_id().0;
    let keeper = Keeper::start(client.clone(), id, url.root.clone(), options.request_timeout);
    let session = Session { id, client, keeper };
    let inner = Arc::new(Inner {
        url,
        options,
        tls,
        session: tokio::sync::Mutex::new(Some(session)),
        app_session: true,
        watch_events: AtomicU64::new(0),
        parents: Hints::default(),
        busy: Hints::default(),
    });
    Ok(ZkLock { inner })
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
    tls: Tls,
    session: tokio::sync::Mutex<Option<Session>>,
    /// The session is the application's ([`from_client`]): never replaced by one of ours.
    app_session: bool,
    watch_events: AtomicU64,
    /// Parents known to exist, so that acquires skip creating them.
    parents: Hints,
    /// Parents whose lock this client last found busy with a try (see `Attempt::busy_listing`).
    busy: Hints,
}

impl fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkLock").field("url", &self.inner.url).field("options", &self.inner.options).finish()
    }
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

    fn parent(&self, recipe: Recipe, name: &LockName) -> String {
        recipe.parent(&self.inner.url.root, name)
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
            if self.inner.app_session {
                return Err(LockError::unavailable(
                    BACKEND,
                    format!(
                        "the application's ZooKeeper session {:#x} has ended ({}); build a new lock client with \
                         lock_zk::from_client over a new session",
                        s.id,
                        s.client.state()
                    ),
                ));
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
        // A refused certificate looks like a server that does not answer: say where to look.
        let hint = if self.inner.tls.on() {
            "; with TLS, check that the URL names the secureClientPort and that tls_ca_file signed the \
             server's certificate for this host"
        } else {
            ""
        };
        let client = match timeout(bound, self.inner.tls.connect(connector, &url.hosts)).await {
            Err(_) => {
                return Err(LockError::unavailable(
                    BACKEND,
                    format!("no session with {url} within {bound:?} (connect_timeout){hint}"),
                ));
            }
            Ok(Err(ZkError::AuthFailed)) => {
                return Err(LockError::config(format!(
                    "ZooKeeper authentication failed for {url}; check user:password in the URL"
                )))
            }
            Ok(Err(e)) => {
                return Err(LockError::unavailable_from(BACKEND, format!("cannot connect to {url}{hint}"), e))
            }
            Ok(Ok(c)) => c,
        };
        let left = bound.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        let ours = url_digest_id(url);
        create_root(&client, &url.root, ours.as_deref(), left, "the new ZooKeeper session ended at once").await?;
        let id = client.session_id().0;
        tracing::debug!(session = id, timeout = ?client.session_timeout(), "zookeeper session established");
        let keeper = Keeper::start(client.clone(), id, url.root.clone(), self.inner.options.request_timeout);
        Ok(Session { client, id, keeper })
    }
}

/// Makes sure `root` exists (and, with `ours`, that only we may change it) within `within`;
/// `session_gone` says why a session that ends meanwhile is not retried.
async fn create_root(
    client: &Client,
    root: &str,
    ours: Option<&str>,
    within: Duration,
    session_gone: &'static str,
) -> Result<(), LockError> {
    match timeout(within, ensure_root(client, root, ours)).await {
        Ok(Ok(checked)) => checked,
        Ok(Err(e)) => Err(match classify(e) {
            Failure::Server(e) => server_error(e, root),
            Failure::Transient(e) => e,
            Failure::SessionGone => LockError::unavailable(BACKEND, session_gone),
        }),
        Err(_) => Err(LockError::unavailable(BACKEND, format!("creating the root {root} took over {within:?}"))),
    }
}

fn capabilities() -> Capabilities {
    let mut caps = Capabilities::new();
    caps.rw_lock = true;
    caps.semaphore = true;
    caps.fifo = true;
    caps.wake = WakeMethod::Watch;
    // Election observers: a children watch on the lock's node (crate::observe).
    caps.notify_changes = true;
    caps.lease_model = LeaseModel::PerSession;
    // czxid is persisted with the node and zxids only grow, across restarts too.
    caps.durable_fencing = true;
    // Sessions and their ephemeral nodes are persisted: a restart within the session
    // timeout keeps the holder's lock.
    caps.durable_leases = true;
    // The holder's identity is the data of its node (crate::inspect).
    caps.inspect = true;
    caps.list = true;
    caps
}

impl ZkLock {
    /// What an acquisition's next pass works over: the current session (a new one if it
    /// ended), made by `deadline`, and this client's URL, hints and counters.
    async fn scope(&self, deadline: Instant) -> Result<Scope<'_>, LockError> {
        let session = self.session(deadline).await?;
        let inner = &*self.inner;
        Ok(Scope {
            session,
            url: &inner.url,
            parents: &inner.parents,
            busy: &inner.busy,
            watch_events: &inner.watch_events,
        })
    }

    /// One attempt (try_acquire*): `Ok(None)` when busy.
    #[tracing::instrument(name = "dlock.try_acquire", level = "debug", skip_all, fields(backend = BACKEND, lock = %name, kind = ?recipe))]
    async fn try_once(
        &self,
        recipe: Recipe,
        name: &LockName,
        options: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        options.validate(&capabilities())?;
        Attempt::new(recipe, name, options, false, &self.inner.options).run(|d| self.scope(d)).await
    }

    /// Queues and waits (acquire*) until granted or `options.wait` ends (`Timeout`).
    #[tracing::instrument(name = "dlock.acquire", level = "debug", skip_all, fields(backend = BACKEND, lock = %name, kind = ?recipe))]
    async fn wait_for(&self, recipe: Recipe, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        options.validate(&capabilities())?;
        let attempt = Attempt::new(recipe, name, options, true, &self.inner.options);
        let deadline = attempt.deadline();
        match attempt.run(|d| self.scope(d)).await? {
            Some(lease) => Ok(lease),
            None => Err(deadline.timeout(name)),
        }
    }

    /// The bound of one read request, and by when its session must be there.
    fn read_bounds(&self) -> (Duration, Instant) {
        let bound = self.inner.options.request_timeout;
        (bound, Instant::now() + self.inner.options.connect_timeout + bound)
    }

    /// Lists `parent`'s queue behind a `sync` and leaves a watch on it, through the current
    /// session (see [`observe::arm`]).
    async fn arm(&self, parent: &str) -> Result<(Option<String>, OneshotWatcher), LockError> {
        let (bound, deadline) = self.read_bounds();
        let session = self.session(deadline).await?;
        observe::arm(&session.client, parent, bound).await.map_err(|f| failed(&self.inner.url.root, f))
    }
}

#[async_trait]
impl DistributedLock for ZkLock {
    async fn try_acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(Recipe::Exclusive, name, options).await
    }

    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(Recipe::Exclusive, name, options).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        let (bound, deadline) = self.read_bounds();
        let session = self.session(deadline).await?;
        inspect::holder_of(&session.client, &self.inner.url.root, name, bound).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        let (bound, deadline) = self.read_bounds();
        let session = self.session(deadline).await?;
        inspect::list(&session.client, &self.inner.url.root, prefix, limit, bound).await
    }

    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        let (bound, deadline) = self.read_bounds();
        let session = self.session(deadline).await?;
        let client = &session.client;
        let root = &self.inner.url.root;
        let before = inspect::holder_of(client, root, name, bound);
        audited_force_release(BACKEND, name, before, inspect::force_release(client, root, name, bound)).await
    }

    async fn watch_changes(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        let parent = self.parent(Recipe::Exclusive, name);
        let (seen, watcher) = self.arm(&parent).await?;
        let lock = self.clone();
        let rearm = move || {
            let (lock, parent) = (lock.clone(), parent.clone());
            async move { lock.arm(&parent).await }
        };
        Ok(Some(observe::feed(rearm, seen, watcher)))
    }
}

impl LockService for ZkLock {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }
}

/// The read-write lock and the semaphore come from these, under the lock's backend name and
/// capabilities (`lock_core::backend::QueueLock`).
#[async_trait]
impl QueueLock for ZkLock {
    async fn try_kind(
        &self,
        kind: QueueKind,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        self.try_once(kind.into(), name, opts).await
    }

    async fn acquire_kind(&self, kind: QueueKind, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(kind.into(), name, opts).await
    }
}
