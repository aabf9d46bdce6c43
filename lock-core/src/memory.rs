//! The in-memory reference backend: every promise of the contract, in one process, for all three
//! lock kinds (exclusive, read-write, semaphore).
//!
//! Each lock keeps its holders, a fence counter that never goes backwards, and a FIFO queue of
//! waiters. A release (or the expiry of a vanished holder) hands the lock directly to the
//! waiters at the head of the queue that fit: one writer, a run of readers, or as many permits
//! as are free. Waiters are served in arrival order, so a queued writer is never starved by
//! readers that come after it. Fault switches ([`MemoryLock::set_server_down`],
//! [`MemoryLock::set_partitioned`], [`MemoryLock::evict`]) let tests play server loss, network
//! partitions and deleted entries without a network.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;
use tokio::time::{sleep_until, Instant};

use crate::audit::audited_force_release;
use crate::deadline::Deadline;
use crate::lease::{LeaseGrant, LeaseHandle, ReleaseOutcome, RenewOutcome};
use crate::wake::WakeHub;
use crate::{
    AcquireOptions, Capabilities, ChangeFeed, DistributedLock, DistributedRwLock, DistributedSemaphore, FencingToken,
    HolderInfo, Lease, LeaseModel, LockError, LockName, LockService, OwnerId, WakeMethod,
};

mod idle;
mod inspect;

const BACKEND: &str = "memory";

/// Which family a name belongs to: the same name used as a lock, a read-write lock and a
/// semaphore names three different things, as it does on every backend.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Family {
    Lock,
    Rw,
    Semaphore,
}

/// What a holder or waiter asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Alone: the exclusive lock, or a writer.
    Exclusive,
    /// Shared with other readers.
    Read,
    /// One of `n` permits.
    Permit(u32),
}

#[derive(Default)]
struct Server {
    locks: Mutex<HashMap<(Family, LockName), Entry>>,
    down: AtomicBool,
    /// The highest fence of every entry collected as idle (changed under `locks`): a new entry
    /// starts above it, so tokens never go back when a name's state was removed.
    floor: AtomicU64,
    /// The observers of exclusive locks, by name (`watch_changes`).
    changes: WakeHub,
}

#[derive(Default)]
struct Entry {
    holders: Vec<Held>,
    fence: u64,
    queue: VecDeque<Waiter>,
}

struct Held {
    owner: OwnerId,
    mode: Mode,
    expires: Instant,
    token: FencingToken,
    /// The acquirer's identity (docs/contract.md §5.6).
    who: Option<crate::Holder>,
}

struct Waiter {
    owner: OwnerId,
    mode: Mode,
    ttl: Duration,
    who: Option<crate::Holder>,
    tx: oneshot::Sender<Granted>,
}

struct Granted {
    token: FencingToken,
    at: Instant,
}

impl Entry {
    fn expire(&mut self, now: Instant) {
        self.holders.retain(|h| h.expires > now);
    }

    fn holder(&mut self, owner: OwnerId, now: Instant) -> Option<&mut Held> {
        self.expire(now);
        self.holders.iter_mut().find(|h| h.owner == owner)
    }

    /// Whether `mode` fits next to the current (live) holders.
    fn fits(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => self.holders.is_empty(),
            Mode::Read => self.holders.iter().all(|h| h.mode == Mode::Read),
            Mode::Permit(n) => self.holders.len() < n as usize,
        }
    }

    fn grant(
        &mut self,
        owner: OwnerId,
        mode: Mode,
        ttl: Duration,
        now: Instant,
        who: Option<&crate::Holder>,
    ) -> FencingToken {
        self.fence += 1;
        let token = FencingToken(self.fence);
        self.holders.push(Held { owner, mode, expires: now + ttl, token, who: who.cloned() });
        token
    }

    /// Serves the head of the queue while it fits: FIFO, so a waiting writer holds back the
    /// readers behind it.
    fn promote(&mut self, now: Instant) {
        self.expire(now);
        while let Some(w) = self.queue.front() {
            if w.tx.is_closed() {
                self.queue.pop_front();
                continue;
            }
            if !self.fits(w.mode) {
                return;
            }
            let Some(w) = self.queue.pop_front() else { return };
            let token = self.grant(w.owner, w.mode, w.ttl, now, w.who.as_ref());
            if w.tx.send(Granted { token, at: now }).is_err() {
                self.holders.retain(|h| h.owner != w.owner);
            }
        }
    }

    fn has_waiters(&mut self) -> bool {
        self.queue.retain(|w| !w.tx.is_closed());
        !self.queue.is_empty()
    }

    /// All users of one semaphore must agree on its number of permits.
    fn check_permits(&self, name: &LockName, mode: Mode) -> Result<(), LockError> {
        let Mode::Permit(n) = mode else { return Ok(()) };
        let other = self
            .holders
            .iter()
            .map(|h| h.mode)
            .chain(self.queue.iter().map(|w| w.mode))
            .find(|m| *m != Mode::Permit(n));
        match other {
            Some(Mode::Permit(m)) => Err(crate::kinds::permits_mismatch(name, m, n)),
            _ => Ok(()),
        }
    }
}

/// A client of an in-memory lock server. [`MemoryLock::new`] starts a fresh server;
/// [`MemoryLock::client`] makes another independent client of the same server;
/// [`MemoryLock::named`] shares one server per name across the process (`memory://name`).
/// It implements all three lock kinds.
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

    /// Fault switch: forgets the holder of the exclusive lock `name` (its fence counter stays),
    /// as an operator or an eviction deleting the entry behind the holder's back would. The
    /// holder's next renewal finds no entry and its lost signal fires; waiters are served.
    /// Returns whether there was a live holder.
    pub fn evict(&self, name: &LockName) -> bool {
        let now = Instant::now();
        self.with_entry(Family::Lock, name, |e| {
            e.expire(now);
            let had = !e.holders.is_empty();
            e.holders.clear();
            e.promote(now);
            had
        })
    }

    /// Forgets every lease and counter, as a server restart without persistence would.
    pub fn restart_server(&self) {
        self.server.locks.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.server.floor.store(0, Ordering::SeqCst);
        self.server.changes.wake_all();
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

    /// Runs `f` on the state of `name`; observers of an exclusive lock whose holder `f`
    /// changed (grant, release, hand-off, an expiry noticed) are woken.
    fn with_entry<R>(&self, family: Family, name: &LockName, f: impl FnOnce(&mut Entry) -> R) -> R {
        let mut locks = self.server.locks.lock().unwrap_or_else(|e| e.into_inner());
        let floor = self.server.floor.load(Ordering::SeqCst);
        let entry = locks.entry((family, name.clone())).or_insert_with(|| Entry { fence: floor, ..Entry::default() });
        let before = entry.holders.first().map(|h| h.token);
        let r = f(entry);
        let after = entry.holders.first().map(|h| h.token);
        drop(locks);
        if family == Family::Lock && before != after {
            self.server.changes.changed(name.as_str());
        }
        r
    }

    fn lease(
        &self,
        family: Family,
        name: &LockName,
        owner: OwnerId,
        token: FencingToken,
        at: Instant,
        opts: &AcquireOptions,
    ) -> Lease {
        let handle = Arc::new(MemoryHandle { client: self.clone(), family, name: name.clone(), owner });
        Lease::new(LeaseGrant::new(name.clone(), token, owner, at, handle), opts)
    }

    fn caps() -> Capabilities {
        Capabilities {
            rw_lock: true,
            semaphore: true,
            fifo: true,
            wake: WakeMethod::Notify,
            lease_model: LeaseModel::PerLock,
            durable_fencing: false,
            durable_leases: false,
            min_ttl: Duration::from_millis(3),
            inspect: true,
            list: true,
            notify_changes: true,
            ..Capabilities::default()
        }
    }

    /// One attempt: granted only if `mode` fits and nobody is queued ahead.
    #[tracing::instrument(name = "dlock.try_acquire", level = "debug", skip_all, fields(backend = BACKEND, lock = %name))]
    fn try_once(
        &self,
        family: Family,
        mode: Mode,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        opts.validate(&Self::caps())?;
        self.reachable()?;
        let owner = OwnerId::random();
        let now = Instant::now();
        let token = self.with_entry(family, name, |e| {
            e.check_permits(name, mode)?;
            e.expire(now);
            Ok::<_, LockError>(
                (e.fits(mode) && !e.has_waiters()).then(|| e.grant(owner, mode, opts.ttl, now, opts.holder.as_ref())),
            )
        })?;
        Ok(token.map(|t| self.lease(family, name, owner, t, now, opts)))
    }

    /// Waiting forever means forever (docs/contract.md §4): while the server is out of reach, try again
    /// with capped back-off. With a deadline, the first failure is the answer.
    async fn until_reachable(&self, deadline: Option<Instant>) -> Result<(), LockError> {
        let mut backoff = crate::backoff::Backoff::new(Duration::from_millis(5), Duration::from_millis(250));
        loop {
            match self.reachable() {
                Err(e) if deadline.is_none() => {
                    tracing::debug!(error = %e, "memory server out of reach; waiting forever retries");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                other => return other,
            }
        }
    }

    /// Waits in the FIFO queue until granted or until `opts.wait` ends.
    #[tracing::instrument(name = "dlock.acquire", level = "debug", skip_all, fields(backend = BACKEND, lock = %name))]
    async fn wait_for(
        &self,
        family: Family,
        mode: Mode,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        opts.validate(&Self::caps())?;
        // Queued means busy: at the deadline the answer is `Timeout`.
        let deadline = Deadline::new(opts.wait, Instant::now());
        self.until_reachable(deadline.at()).await?;
        let at = Instant::now();
        let owner = OwnerId::random();
        let (tx, rx) = oneshot::channel();
        let queued = self.with_entry(family, name, |e| {
            e.check_permits(name, mode)?;
            e.expire(at);
            if e.fits(mode) && !e.has_waiters() {
                return Ok(Err(e.grant(owner, mode, opts.ttl, at, opts.holder.as_ref())));
            }
            if deadline.passed(at) {
                return Ok(Ok(false));
            }
            e.queue.push_back(Waiter { owner, mode, ttl: opts.ttl, who: opts.holder.clone(), tx });
            Ok(Ok(true))
        })?;
        match queued {
            Err(token) => return Ok(self.lease(family, name, owner, token, at, opts)),
            Ok(false) => return Err(deadline.timeout(name)),
            Ok(true) => {}
        }
        let mut guard = QueueGuard { client: self, family, name, owner, rx: Some(rx) };
        loop {
            // Wake when the first holder's lease ends: a vanished holder frees its place then.
            // Re-read at least every 50 ms: a renewal may shorten a lease (`hold_at_least`).
            let next_expiry = self
                .with_entry(family, name, |e| e.holders.iter().map(|h| h.expires).min())
                .map(|h| h.min(Instant::now() + Duration::from_millis(50)));
            let wake_at = match (next_expiry, deadline.at()) {
                (Some(h), Some(d)) => Some(h.min(d)),
                (h, d) => h.or(d),
            };
            let Some(rx) = guard.rx.as_mut() else { break };
            tokio::select! {
                granted = rx => {
                    guard.rx = None;
                    return match granted {
                        Ok(g) => Ok(self.lease(family, name, owner, g.token, g.at, opts)),
                        Err(_) => Err(LockError::unavailable(BACKEND, "the in-memory server dropped the queue")),
                    };
                }
                _ = sleep_until(wake_at.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))) => {
                    let now = Instant::now();
                    self.with_entry(family, name, |e| e.promote(now));
                    if let Some(Ok(g)) = guard.rx.as_mut().map(|rx| rx.try_recv()) {
                        guard.rx = None;
                        return Ok(self.lease(family, name, owner, g.token, g.at, opts));
                    }
                    if deadline.passed(now) {
                        return Err(deadline.timeout(name));
                    }
                }
            }
        }
        Err(LockError::unavailable(BACKEND, "the in-memory wait ended without a grant"))
    }
}

fn permits(n: u32) -> Result<Mode, LockError> {
    crate::kinds::check_permits(n)?;
    Ok(Mode::Permit(n))
}

struct MemoryHandle {
    client: MemoryLock,
    family: Family,
    name: LockName,
    owner: OwnerId,
}

#[async_trait]
impl LeaseHandle for MemoryHandle {
    async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.client.reachable()?;
        let now = Instant::now();
        Ok(self.client.with_entry(self.family, &self.name, |e| match e.holder(self.owner, now) {
            Some(h) => {
                h.expires = now + ttl;
                RenewOutcome::Renewed
            }
            None => RenewOutcome::NotOwner,
        }))
    }

    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.client.reachable()?;
        let now = Instant::now();
        Ok(self.client.with_entry(self.family, &self.name, |e| {
            if e.holder(self.owner, now).is_none() {
                return ReleaseOutcome::NotOwner;
            }
            e.holders.retain(|h| h.owner != self.owner);
            e.promote(now);
            ReleaseOutcome::Released
        }))
    }
}

/// Removes our queue entry when an `acquire` ends without a grant; releases a grant that
/// arrived after the caller stopped waiting (cancel-safety).
struct QueueGuard<'a> {
    client: &'a MemoryLock,
    family: Family,
    name: &'a LockName,
    owner: OwnerId,
    rx: Option<oneshot::Receiver<Granted>>,
}

impl Drop for QueueGuard<'_> {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        let now = Instant::now();
        self.client.with_entry(self.family, self.name, |e| {
            // Under the entry's lock, as `promote` grants: looked at before it, a grant sent in
            // between was missed and the gone waiter held the lock for its ttl.
            let granted = rx.try_recv().is_ok();
            e.queue.retain(|w| w.owner != self.owner);
            if granted {
                e.holders.retain(|h| h.owner != self.owner);
            }
            e.promote(now);
        });
    }
}

impl LockService for MemoryLock {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Self::caps()
    }
}

#[async_trait]
impl DistributedLock for MemoryLock {
    async fn try_acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(Family::Lock, Mode::Exclusive, name, opts)
    }

    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(Family::Lock, Mode::Exclusive, name, opts).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        self.reachable()?;
        Ok(self.inspect_now(name))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HolderInfo>, LockError> {
        self.reachable()?;
        Ok(self.list_now(prefix, limit))
    }

    async fn force_release(&self, name: &LockName) -> Result<Option<FencingToken>, LockError> {
        self.reachable()?;
        let before = async { Ok(self.inspect_now(name)) };
        audited_force_release(BACKEND, name, before, async { Ok(self.force_release_now(name)) }).await
    }

    async fn watch_changes(&self, name: &LockName) -> Result<Option<ChangeFeed>, LockError> {
        self.reachable()?;
        Ok(Some(self.server.changes.observe(name.as_str(), ())))
    }
}

#[async_trait]
impl DistributedRwLock for MemoryLock {
    async fn try_acquire_read(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(Family::Rw, Mode::Read, name, opts)
    }

    async fn acquire_read(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(Family::Rw, Mode::Read, name, opts).await
    }

    async fn try_acquire_write(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        self.try_once(Family::Rw, Mode::Exclusive, name, opts)
    }

    async fn acquire_write(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
        self.wait_for(Family::Rw, Mode::Exclusive, name, opts).await
    }
}

#[async_trait]
impl DistributedSemaphore for MemoryLock {
    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits_total: u32,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        self.try_once(Family::Semaphore, permits(permits_total)?, name, opts)
    }

    async fn acquire_permit(
        &self,
        name: &LockName,
        permits_total: u32,
        opts: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        self.wait_for(Family::Semaphore, permits(permits_total)?, name, opts).await
    }
}

#[cfg(test)]
mod tests;
