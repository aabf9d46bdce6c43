//! The acquire state machine: a lease, our key queued in a transaction, then — until our key is
//! the oldest of the queue — a watch on the one key just ahead of ours.

use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, LeaseGrantOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use lock_core::{
    backend::{permits_mismatch, AcquireClock, LeaseGrant, Stop},
    AcquireOptions, FencingToken, Lease, LockError, LockName, OwnerId,
};
use tokio::time::{sleep, sleep_until, Instant};

use crate::client::{capabilities, EtcdLock};
use crate::error::{is_lease_gone, malformed, timed};
use crate::keepalive::KeepAlive;
use crate::keys::Entry;
use crate::lease::{ttl_secs, EtcdHandle, Pending};
use crate::recipe::{Recipe, Watch};
use crate::spare::Spare;

/// How long after a new lease's grant the transaction that queues our key on it is sent, on a
/// pass with no spare lease (a client's first acquisition with a ttl, or one after its spares
/// aged): enough for the server to take the grant first, almost always. Sent with no pause,
/// the transaction overtook the grant every time on a local etcd 3.4 (the server applies
/// requests of one connection in no fixed order), and waiting for the grant's answer instead
/// costs a whole round trip, which a grant over a slow link cannot spare (the suite's
/// `slow_grant_renewed_in_time`). A pass with a spare lease sends its transaction at once.
const STAGGER: Duration = Duration::from_millis(3);

/// What the server says of the keys ahead of ours.
enum Ahead {
    /// Our key is gone.
    Gone,
    /// None that blocks us: we hold the lock (read at the server, in the same transaction that
    /// checked our key).
    Nobody,
    /// Some block us: watch this.
    Blocked(Watch),
}

/// Our queued key.
struct Queued {
    pending: Pending,
    key: String,
    rev: i64,
    owner: OwnerId,
    /// The server (re)started the lease's ttl at or after this instant.
    refreshed: Instant,
    keep_alive: KeepAlive,
}

/// Our key just queued, and the create revision of the queue's oldest key as the queueing
/// transaction read it.
struct Enqueued {
    queued: Queued,
    rev: i64,
    head: i64,
}

/// The per-acquisition state of `acquire`/`try_acquire`.
pub(crate) struct Attempt<'a> {
    lock: &'a EtcdLock,
    recipe: Recipe,
    name: &'a LockName,
    opts: &'a AcquireOptions,
    /// When the call must have answered, whether it queues at all, and its retries: busy at
    /// the deadline is `Timeout`.
    clock: AcquireClock,
}

impl EtcdLock {
    /// One attempt: `Ok(None)` when busy.
    pub(crate) async fn try_once(
        &self,
        recipe: Recipe,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        opts.validate(&capabilities())?;
        Box::pin(Attempt::new(self, recipe, name, opts, false).run()).await
    }

    /// Waits as `opts.wait` says; `Timeout` when the lock stayed busy.
    pub(crate) async fn wait_for(
        &self,
        recipe: Recipe,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Lease, LockError> {
        opts.validate(&capabilities())?;
        let mut attempt = Attempt::new(self, recipe, name, opts, true);
        match Box::pin(attempt.run()).await? {
            Some(lease) => Ok(lease),
            None => Err(attempt.clock.timeout(name)),
        }
    }
}

impl<'a> Attempt<'a> {
    fn new(lock: &'a EtcdLock, recipe: Recipe, name: &'a LockName, opts: &'a AcquireOptions, queue: bool) -> Self {
        let clock = AcquireClock::new(queue, opts, lock.request_timeout(), lock.inner.options.connect_timeout);
        Attempt { lock, recipe, name, opts, clock }
    }

    /// Passes until an answer: a grant, busy (`None`), or an error. A transient failure starts
    /// a new pass after a back-off (the old lease is revoked by its `Pending`).
    async fn run(&mut self) -> Result<Option<Lease>, LockError> {
        loop {
            match Box::pin(self.pass()).await {
                Ok(answer) => return Ok(answer),
                Err(Stop::Restart(why)) => {
                    tracing::debug!(lock = %self.name, why, "etcd: queueing again");
                }
                Err(Stop::Fail(e)) if e.is_retryable() => self.clock.after_transient(e, self.name, "etcd").await?,
                Err(Stop::Fail(e)) => return Err(e),
            }
        }
    }

    /// One pass: a lease, our key queued, then hold, give up (single attempt) or wait.
    async fn pass(&mut self) -> Result<Option<Lease>, Stop> {
        let queued = Box::pin(self.queue_key()).await?;
        self.clock.answered();
        let (rev, head) = (queued.rev, queued.head);
        let queued = queued.queued;
        // The oldest key holds, whatever the kind; for the shared kinds a younger one may too.
        let holds = head == rev
            || match self.recipe {
                Recipe::Exclusive | Recipe::Write => false,
                Recipe::Read | Recipe::Permit(_) => match self.ahead(&queued).await {
                    Ok((Ahead::Nobody, _)) => true,
                    Ok((Ahead::Gone, _)) => return Err(Stop::Restart("our key vanished as it was queued")),
                    Ok(_) => false,
                    Err(e) => {
                        queued.pending.revoke_now().await;
                        return Err(Stop::Fail(e));
                    }
                },
            };
        if holds {
            let started = queued.refreshed;
            return Ok(Some(self.grant(queued, started)));
        }
        self.clock.busy();
        if !self.clock.waits() {
            queued.pending.revoke_now().await;
            return Ok(None);
        }
        Box::pin(self.wait_turn(queued)).await
    }

    /// Our key queued on a lease: a spare the client kept from an earlier grant (the queueing
    /// transaction and a keep-alive that restarts its ttl go out together: one round trip), or
    /// else a new lease, granted before the transaction that needs it is sent.
    async fn queue_key(&mut self) -> Result<Enqueued, Stop> {
        let client = self.lock.client();
        let secs = ttl_secs(self.opts.ttl);
        let spare = self.lock.spares().take(secs, self.opts.ttl);
        let lease = spare.as_ref().map_or_else(fresh_lease_id, |s| s.id);
        // Armed before anything is sent: a grant whose answer is lost is revoked too.
        let pending = Pending::new(client.clone(), lease, self.opts.ttl, self.clock.request_timeout());
        let owner = OwnerId::random();
        let key = self.lock.keys().waiter(self.recipe, self.name, lease);
        let sent = Instant::now();
        let (refreshed, keep_alive, (rev, head)) = match spare {
            Some(Spare { refreshed, keep_alive, .. }) => {
                let (alive, queued) =
                    tokio::join!(keep_alive.once(&client, lease, self.clock.bound()), self.enqueue(&key, lease, owner));
                let queued = queued?;
                match alive {
                    Ok(true) => (sent, keep_alive, queued),
                    // The lease ended between the two: our key went with it.
                    Ok(false) => return Err(Stop::Restart("our spare lease expired as our key was queued")),
                    // The ttl was not restarted: it still runs from the lease's last refresh.
                    Err(_) => (refreshed, KeepAlive::new(), queued),
                }
            }
            None => (sent, KeepAlive::new(), Box::pin(self.grant_and_enqueue(client, lease, &key, owner)).await?),
        };
        let queued = Queued { pending, key, rev, owner, refreshed, keep_alive };
        Ok(Enqueued { queued, rev, head })
    }

    /// A new lease and our key on it in one round trip: the lease's id is ours to choose, so the
    /// transaction that queues our key on it goes out [`STAGGER`] after the grant, without
    /// waiting for the grant's answer. Should it still reach the server first ("lease not
    /// found"), it is sent again once the grant is in.
    async fn grant_and_enqueue(
        &self,
        mut c: etcd_client::Client,
        lease: i64,
        key: &str,
        owner: OwnerId,
    ) -> Result<(i64, i64), Stop> {
        let grant_opts = LeaseGrantOptions::new().with_id(lease);
        let grant =
            timed(self.clock.bound(), "granting a lease", c.lease_grant(ttl_secs(self.opts.ttl), Some(grant_opts)));
        let enqueue = async {
            sleep(STAGGER).await;
            self.enqueue(key, lease, owner).await
        };
        let (granted, queued) = tokio::join!(grant, enqueue);
        match granted {
            Err(e) if e.to_string().contains("lease already exists") => return Err(Stop::Restart("lease id taken")),
            other => other?,
        };
        match queued {
            Err(Stop::Restart(_)) => {
                tracing::debug!(lock = %self.name, "etcd: the queueing transaction overtook the lease grant; sent again");
                self.enqueue(key, lease, owner).await
            }
            other => other,
        }
    }

    /// Creates our key (if absent: a retried transaction finds it) and reads, in the same
    /// transaction, the oldest key of the queue. Returns our key's create revision and the oldest's.
    async fn enqueue(&self, key: &str, lease: i64, owner: OwnerId) -> Result<(i64, i64), Stop> {
        let queue = self.lock.keys().queue_of(self.recipe, self.name);
        let oldest = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
        let value = Entry::encode(owner, self.opts.holder.as_ref(), self.recipe);
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))),
                TxnOp::get(queue.as_str(), Some(oldest.clone())),
            ])
            .or_else([TxnOp::get(key, None), TxnOp::get(queue.as_str(), Some(oldest))]);
        let mut c = self.lock.client();
        let resp = match timed(self.clock.bound(), "queueing our key", c.txn(txn)).await {
            Err(e) if is_lease_gone(&e) => return Err(Stop::Restart("our lease expired before our key was queued")),
            other => other?,
        };
        let ours = if resp.succeeded() {
            resp.header().map(|h| h.revision()).ok_or_else(|| malformed("a header"))?
        } else {
            match first_create_revision(&resp, 0)? {
                Some(rev) => rev,
                None => return Err(Stop::Restart("our key vanished as it was queued")),
            }
        };
        let head = first_create_revision(&resp, 1)?.ok_or_else(|| malformed("the queue's oldest key"))?;
        Ok((ours, head))
    }

    /// Waits, watching the key just ahead, until the server says no key is ahead of ours.
    async fn wait_turn(&mut self, mut q: Queued) -> Result<Option<Lease>, Stop> {
        let every = (self.opts.ttl / 3).max(Duration::from_millis(100));
        let mut next_keep_alive = q.refreshed + every;
        loop {
            let ahead = match self.ahead(&q).await {
                Ok(a) => a,
                Err(e) if !e.is_retryable() => {
                    q.pending.revoke_now().await;
                    return Err(Stop::Fail(e));
                }
                Err(e) => {
                    if let Err(e) = self.clock.after_transient(e, self.name, "etcd").await {
                        q.pending.revoke_now().await;
                        return if matches!(e, LockError::Timeout { .. }) { Ok(None) } else { Err(Stop::Fail(e)) };
                    }
                    continue;
                }
            };
            self.clock.answered();
            let (watch, seen) = match ahead {
                (Ahead::Gone, _) => return Err(Stop::Restart("our key vanished while we waited")),
                (Ahead::Nobody, _) => {
                    if q.refreshed.elapsed() > self.opts.ttl / 2 {
                        // Our keep-alives failed for a while: restart the ttl before granting.
                        let sent = Instant::now();
                        let lease = q.pending.id;
                        match q.keep_alive.once(&q.pending.client, lease, self.clock.bound()).await {
                            Ok(true) => q.refreshed = sent,
                            Ok(false) => return Err(Stop::Restart("our lease expired as we were granted")),
                            Err(_) => continue,
                        }
                    }
                    let started = q.refreshed;
                    return Ok(Some(self.grant(q, started)));
                }
                (Ahead::Blocked(watch), seen) => (watch, seen),
            };
            let mut c = self.lock.client();
            let opts = WatchOptions::new().with_start_revision(seen + 1).with_filters([WatchFilterType::NoPut]);
            let (target, opts) = match watch {
                Watch::Key(key) => (key, opts),
                Watch::Queue => (self.lock.keys().queue_of(self.recipe, self.name).into_bytes(), opts.with_prefix()),
            };
            let mut stream =
                match timed(self.clock.bound(), "watching the keys ahead", c.watch(target, Some(opts))).await {
                    Ok(s) => s,
                    Err(_) => {
                        sleep(self.clock.next_delay()).await;
                        continue;
                    }
                };
            // Until the key ahead is deleted (or the watch breaks: look again), keeping our
            // lease alive meanwhile.
            loop {
                let far = Instant::now() + Duration::from_secs(3600);
                let end = self.clock.deadline().at().unwrap_or(far);
                tokio::select! {
                    msg = stream.message() => match msg {
                        Ok(Some(resp)) if resp.canceled() || resp.events().iter().any(|e| e.event_type() == EventType::Delete) => break,
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => {
                            sleep(self.clock.next_delay()).await;
                            break;
                        }
                    },
                    () = sleep_until(next_keep_alive) => {
                        let sent = Instant::now();
                        match q.keep_alive.once(&q.pending.client, q.pending.id, self.clock.request_timeout()).await {
                            Ok(true) => {
                                q.refreshed = sent;
                                next_keep_alive = sent + every;
                            }
                            Ok(false) => return Err(Stop::Restart("our lease expired while we waited")),
                            Err(_) => {
                                next_keep_alive = Instant::now() + Duration::from_millis(200);
                                break;
                            }
                        }
                    }
                    () = sleep_until(end) => {
                        q.pending.revoke_now().await;
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Reads, in one transaction that first checks our key still exists, the keys ahead of
    /// ours that our kind waits for: the newest of them (exclusive, read, write), or all of them
    /// (a semaphore: fewer than `n` lets us in; each must agree on `n`). Returns what the server
    /// says, and the revision it read at.
    async fn ahead(&self, q: &Queued) -> Result<(Ahead, i64), LockError> {
        let blockers = self.lock.keys().blockers(self.recipe, self.name);
        let before = GetOptions::new().with_prefix().with_max_create_revision(q.rev - 1);
        let before = match self.recipe {
            Recipe::Permit(_) => before,
            _ => before.with_sort(SortTarget::Create, SortOrder::Descend).with_limit(1).with_keys_only(),
        };
        let txn = Txn::new()
            .when([Compare::create_revision(q.key.as_str(), CompareOp::Equal, q.rev)])
            .and_then([TxnOp::get(blockers.as_str(), Some(before))]);
        let mut c = self.lock.client();
        let resp = timed(self.clock.bound(), "reading the queue ahead of us", c.txn(txn)).await?;
        let seen = resp.header().map(|h| h.revision()).ok_or_else(|| malformed("a header"))?;
        if !resp.succeeded() {
            return Ok((Ahead::Gone, seen));
        }
        let Some(TxnOpResponse::Get(got)) = resp.op_responses().into_iter().next() else {
            return Err(malformed("the queue ahead of us"));
        };
        let ahead = match self.recipe {
            Recipe::Permit(n) => {
                for kv in got.kvs() {
                    match Entry::decode(kv.value()).permits {
                        Some(held) if held != n => return Err(permits_mismatch(self.name, held, n)),
                        _ => {}
                    }
                }
                if got.kvs().len() < usize::try_from(n).unwrap_or(usize::MAX) {
                    Ahead::Nobody
                } else {
                    Ahead::Blocked(Watch::Queue)
                }
            }
            _ => match got.kvs().first() {
                Some(kv) => Ahead::Blocked(Watch::Key(kv.key().to_vec())),
                None => Ahead::Nobody,
            },
        };
        Ok((ahead, seen))
    }

    /// The lease of a grant the server confirmed; `started` is when the server last (re)started
    /// the lease's ttl, at the latest.
    fn grant(&self, q: Queued, started: Instant) -> Lease {
        let Queued { pending, key, rev, owner, keep_alive, refreshed } = q;
        let handle = EtcdHandle {
            client: pending.client.clone(),
            key,
            rev,
            lease: AtomicI64::new(pending.id),
            keep_alive,
            bound: self.clock.request_timeout(),
            release_sent: AtomicBool::new(false),
            granted_lease: pending.id,
            secs: ttl_secs(self.opts.ttl),
            refreshed: std::sync::Mutex::new(refreshed),
            spares: self.lock.spares_handle(),
        };
        pending.disarm();
        // Revisions are positive; the cast keeps their order.
        let token = FencingToken(rev.max(0).unsigned_abs());
        Lease::new(LeaseGrant::new(self.name.clone(), token, owner, started, Arc::new(handle)), self.opts)
    }
}

/// The create revision of the first key of the `i`th (range) response of `resp`.
fn first_create_revision(resp: &TxnResponse, i: usize) -> Result<Option<i64>, LockError> {
    match resp.op_responses().into_iter().nth(i) {
        Some(TxnOpResponse::Get(got)) => Ok(got.kvs().first().map(|kv| kv.create_revision())),
        _ => Err(malformed("a range in the transaction")),
    }
}

/// A random lease id: positive (etcd's ids are positive int64s) and never 0 (which asks the
/// server to choose).
fn fresh_lease_id() -> i64 {
    let bits = OwnerId::random().as_u128() as u64 & (i64::MAX as u64);
    i64::try_from(bits.max(1)).unwrap_or(1)
}
