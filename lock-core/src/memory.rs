//! The in-memory reference backend: every promise of the contract, in one process.
//!
//! Each lock keeps a holder, a fence counter that never goes backwards, and a FIFO queue of
//! waiters. A release (or the expiry of a vanished holder) hands the lock directly to the first
//! waiter that is still waiting: exactly one waiter is woken, in arrival order. Fault switches
//! ([`MemoryLock::set_server_down`], [`MemoryLock::set_partitioned`]) let tests play server loss
//! and network partitions without a network.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;
use tokio::time::{sleep_until, Instant};

use crate::{
    AcquireOptions, Capabilities, DistributedLock, FencingToken, Lease, LeaseGrant, LeaseHandle, LeaseModel, LockError,
    LockName, OwnerId, ReleaseOutcome, RenewOutcome, WakeMethod,
};

const BACKEND: &str = "memory";

#[derive(Default)]
struct Server {
    locks: Mutex<HashMap<LockName, Entry>>,
    down: AtomicBool,
}

#[derive(Default)]
struct Entry {
    holder: Option<Holder>,
    fence: u64,
    queue: VecDeque<Waiter>,
}

struct Holder {
    owner: OwnerId,
    expires: Instant,
}

struct Waiter {
    owner: OwnerId,
    ttl: Duration,
    tx: oneshot::Sender<Granted>,
}

struct Granted {
    token: FencingToken,
    at: Instant,
}

impl Entry {
    fn live_holder(&mut self, now: Instant) -> Option<&Holder> {
        if self.holder.as_ref().is_some_and(|h| h.expires <= now) {
            self.holder = None;
        }
        self.holder.as_ref()
    }

    fn grant(&mut self, owner: OwnerId, ttl: Duration, now: Instant) -> FencingToken {
        self.fence += 1;
        self.holder = Some(Holder { owner, expires: now + ttl });
        FencingToken(self.fence)
    }

    /// If the lock is free, hands it to the first waiter still waiting.
    fn promote(&mut self, now: Instant) {
        if self.live_holder(now).is_some() {
            return;
        }
        while let Some(w) = self.queue.pop_front() {
            if w.tx.is_closed() {
                continue;
            }
            let token = self.grant(w.owner, w.ttl, now);
            if w.tx.send(Granted { token, at: now }).is_ok() {
                return;
            }
            self.holder = None;
        }
    }

    fn has_waiters(&mut self) -> bool {
        self.queue.retain(|w| !w.tx.is_closed());
        !self.queue.is_empty()
    }
}

/// A client of an in-memory lock server. [`MemoryLock::new`] starts a fresh server;
/// [`MemoryLock::client`] makes another independent client of the same server;
/// [`MemoryLock::named`] shares one server per name across the process (`memory://name`).
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, DistributedLock, LockName, MemoryLock};
/// let a = MemoryLock::new();
/// let b = a.client();
/// let name = LockName::new("red-envelope")?;
/// let opts = AcquireOptions::new(Duration::from_secs(5));
/// let first = a.try_acquire(&name, &opts).await?.expect("free");
/// assert!(b.try_acquire(&name, &opts).await?.is_none());
/// first.release().await?;
/// let second = b.try_acquire(&name, &opts).await?.expect("free again");
/// assert!(second.token() > first.token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryLock {
    server: Arc<Server>,
    partitioned: Arc<AtomicBool>,
}

impl Default for MemoryLock {
    fn default() -> Self {
        Self::new()
    }
}

fn registry() -> &'static Mutex<HashMap<String, Weak<Server>>> {
    static REG: OnceLock<Mutex<HashMap<String, Weak<Server>>>> = OnceLock::new();
    REG.get_or_init(Default::default)
}

impl MemoryLock {
    /// A client of a new, empty server.
    pub fn new() -> Self {
        MemoryLock { server: Arc::new(Server::default()), partitioned: Arc::new(AtomicBool::new(false)) }
    }

    /// A client of the process-wide server called `name` (created on first use, dropped when its
    /// last client is).
    pub fn named(name: &str) -> Self {
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        reg.retain(|_, w| w.strong_count() > 0);
        let server = match reg.get(name).and_then(Weak::upgrade) {
            Some(s) => s,
            None => {
                let s = Arc::new(Server::default());
                reg.insert(name.to_owned(), Arc::downgrade(&s));
                s
            }
        };
        MemoryLock { server, partitioned: Arc::new(AtomicBool::new(false)) }
    }

    /// Another client of the same server, with its own network (see [`Self::set_partitioned`]).
    pub fn client(&self) -> Self {
        MemoryLock { server: Arc::clone(&self.server), partitioned: Arc::new(AtomicBool::new(false)) }
    }

    /// Fault switch: while down, every request of every client fails with `Unavailable`.
    pub fn set_server_down(&self, down: bool) {
        self.server.down.store(down, Ordering::SeqCst);
    }

    /// Fault switch: while partitioned, every request of this client fails with `Unavailable`.
    pub fn set_partitioned(&self, cut: bool) {
        self.partitioned.store(cut, Ordering::SeqCst);
    }

    /// Fault switch: forgets the holder of `name` (its fence counter stays), as an operator or
    /// an eviction deleting the entry behind the holder's back would. The holder's next renewal
    /// finds no entry and its lost signal fires; waiters are served. Returns whether there was
    /// a live holder.
    pub fn evict(&self, name: &LockName) -> bool {
        let now = Instant::now();
        self.with_entry(name, |e| {
            let had = e.live_holder(now).is_some();
            e.holder = None;
            e.promote(now);
            had
        })
    }

    /// Forgets every lease and counter, as a server restart without persistence would.
    pub fn restart_server(&self) {
        self.server.locks.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn reachable(&self) -> Result<(), LockError> {
        if self.server.down.load(Ordering::SeqCst) {
            return Err(LockError::unavailable(BACKEND, "the in-memory server is switched off"));
        }
        if self.partitioned.load(Ordering::SeqCst) {
            return Err(LockError::unavailable(BACKEND, "this client is partitioned from the in-memory server"));
        }
        Ok(())
    }

    fn with_entry<R>(&self, name: &LockName, f: impl FnOnce(&mut Entry) -> R) -> R {
        let mut locks = self.server.locks.lock().unwrap_or_else(|e| e.into_inner());
        f(locks.entry(name.clone()).or_default())
    }

    fn lease(&self, name: &LockName, owner: OwnerId, token: FencingToken, at: Instant, opts: &AcquireOptions) -> Lease {
        let handle = Arc::new(MemoryHandle { client: self.clone(), name: name.clone(), owner });
        Lease::new(LeaseGrant::new(name.clone(), token, owner, at, handle), opts)
    }
}

struct MemoryHandle {
    client: MemoryLock,
    name: LockName,
    owner: OwnerId,
}

#[async_trait]
impl LeaseHandle for MemoryHandle {
    async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.client.reachable()?;
        let now = Instant::now();
        Ok(self.client.with_entry(&self.name, |e| match e.live_holder(now) {
            Some(h) if h.owner == self.owner => {
                e.holder = Some(Holder { owner: self.owner, expires: now + ttl });
                RenewOutcome::Renewed
            }
            _ => RenewOutcome::NotOwner,
        }))
    }

    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.client.reachable()?;
        let now = Instant::now();
        Ok(self.client.with_entry(&self.name, |e| match e.live_holder(now) {
            Some(h) if h.owner == self.owner => {
                e.holder = None;
                e.promote(now);
                ReleaseOutcome::Released
            }
            _ => ReleaseOutcome::NotOwner,
        }))
    }
}

/// Removes our queue entry when an `acquire` ends without a grant; releases a grant that
/// arrived after the caller stopped waiting (cancel-safety).
struct QueueGuard<'a> {
    client: &'a MemoryLock,
    name: &'a LockName,
    owner: OwnerId,
    rx: Option<oneshot::Receiver<Granted>>,
}

impl Drop for QueueGuard<'_> {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        let granted = rx.try_recv().is_ok();
        drop(rx);
        let now = Instant::now();
        self.client.with_entry(self.name, |e| {
            e.queue.retain(|w| w.owner != self.owner);
            if granted && e.holder.as_ref().is_some_and(|h| h.owner == self.owner) {
                e.holder = None;
            }
            e.promote(now);
        });
    }
}

#[async_trait]
impl DistributedLock for MemoryLock {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fifo: true,
            wake: WakeMethod::Notify,
            lease_model: LeaseModel::PerLock,
            durable_fencing: false,
            durable_leases: false,
            min_ttl: Duration::from_millis(1),
            ..Capabilities::default()
        }
    }

    async fn try_acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        opts.validate(&self.capabilities())?;
        self.reachable()?;
        let owner = OwnerId::random();
        let now = Instant::now();
        let token = self.with_entry(name, |e| {
            (e.live_holder(now).is_none() && !e.has_waiters()).then(|| e.grant(owner, opts.ttl, now))
        });
        Ok(token.map(|t| self.lease(name, owner, t, now, opts)))
    }

    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        opts.validate(&self.capabilities())?;
        self.reachable()?;
        let begun = Instant::now();
        let deadline = opts.wait.deadline(begun);
        let owner = OwnerId::random();
        let (tx, rx) = oneshot::channel();
        let queued = self.with_entry(name, |e| {
            if e.live_holder(begun).is_none() && !e.has_waiters() {
                return Err(e.grant(owner, opts.ttl, begun));
            }
            if deadline.is_some_and(|d| d <= begun) {
                return Ok(false);
            }
            e.queue.push_back(Waiter { owner, ttl: opts.ttl, tx });
            Ok(true)
        });
        match queued {
            Err(token) => return Ok(self.lease(name, owner, token, begun, opts)),
            Ok(false) => return Err(LockError::Timeout { name: name.as_str().to_owned(), waited: Duration::ZERO }),
            Ok(true) => {}
        }
        let mut guard = QueueGuard { client: self, name, owner, rx: Some(rx) };
        loop {
            let holder_expiry = self.with_entry(name, |e| e.holder.as_ref().map(|h| h.expires));
            let wake_at = match (holder_expiry, deadline) {
                (Some(h), Some(d)) => Some(h.min(d)),
                (h, d) => h.or(d),
            };
            let Some(rx) = guard.rx.as_mut() else { break };
            tokio::select! {
                granted = rx => {
                    guard.rx = None;
                    return match granted {
                        Ok(g) => Ok(self.lease(name, owner, g.token, g.at, opts)),
                        Err(_) => Err(LockError::unavailable(BACKEND, "the in-memory server dropped the queue")),
                    };
                }
                _ = sleep_until(wake_at.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))) => {
                    let now = Instant::now();
                    self.with_entry(name, |e| e.promote(now));
                    if let Some(Ok(g)) = guard.rx.as_mut().map(|rx| rx.try_recv()) {
                        guard.rx = None;
                        return Ok(self.lease(name, owner, g.token, g.at, opts));
                    }
                    if deadline.is_some_and(|d| now >= d) {
                        return Err(LockError::Timeout { name: name.as_str().to_owned(), waited: now - begun });
                    }
                }
            }
        }
        Err(LockError::unavailable(BACKEND, "the in-memory wait ended without a grant"))
    }
}
