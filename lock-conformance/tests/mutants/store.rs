//! The mutant lease store: one in-process server whose every client is a `StoreLock` over a
//! [`Store`], correct (`Bug::None`) or with the one deliberate bug its [`Bug`] names, and the
//! [`Mutant`] fixture over it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_conformance::waiter_process::QueuedWaiter;
use lock_conformance::{async_trait, ClientLink, DownSwitch, Fixture, LinkedClient, ServerControl};
use lock_core::{
    backend::{Claim, LeaseStore, ReleaseOutcome, RenewOutcome, StoreLock, TryLock},
    AcquireOptions, Capabilities, DistributedLock, FencingToken, LockError, LockName, OwnerId,
};
use tokio::time::Instant;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Bug {
    None,
    NoExclusion,
    RenewReleases,
    ReleaseAnyOwner,
    TokensRepeat,
    NeverExpires,
    ExpiresEarly,
    ClaimsDurableFencing,
    ClaimsFifo,
    StripsNames,
    RenewUpserts,
    /// Keeps only the first 100 bytes of a name.
    TruncatesNames,
    /// Taking over an expired lease reuses the expired holder's token.
    RepeatsStolenToken,
    /// The idle-state collection drops a name's fence counter and restarts it at zero.
    CollectResetsTokens,
    /// Correct, with a waiter queue: declares `fifo` and keeps it.
    Fair,
    /// A waiter queue that only waiting attempts respect: a `try_acquire` (the releaser's, a
    /// newcomer's) takes a free lock ahead of queued waiters.
    FairOvertaken,
    /// A waiter queue whose entries never expire: a waiter that vanished blocks the lock for good.
    FairHeadStuck,
    /// A batch of renewals applies each one but answers every lease with the first one's outcome.
    BatchAnsweredAsOne,
    /// Correct, with a queue whose release hands the lock to the live head and tells it in a
    /// message (as PostgreSQL and Redis do); the message is a hint, the grant is read back.
    HandOff,
    /// `HandOff`, but a waiter takes a grant message for a grant: whoever can send one makes it
    /// hold, with the token the message names.
    TrustsMessage,
    /// `HandOff`, but a waiter that leaves withdraws only its queue place, having forgotten
    /// that it may have been handed the lock meanwhile: the grant stands until its ttl.
    AbandonForgetsPlace,
    /// `HandOff`, but a waiter that leaves (its deadline, a dropped future) does not withdraw at
    /// all: its queue place and any grant it was handed stand until they lapse.
    LeaveIgnored,
    /// `HandOff`, but the release's grant runs for the head's whole ttl instead of a short claim
    /// window: a head that died while queued keeps the lock from everyone for its ttl.
    GrantNotProvisional,
}

impl Bug {
    fn queues(self) -> bool {
        matches!(self, Bug::Fair | Bug::FairOvertaken | Bug::FairHeadStuck) || self.hands_off()
    }

    fn hands_off(self) -> bool {
        matches!(
            self,
            Bug::HandOff | Bug::TrustsMessage | Bug::AbandonForgetsPlace | Bug::LeaveIgnored | Bug::GrantNotProvisional
        )
    }

    /// What a store with this bug declares: the two `Claims…` bugs promise what they do not
    /// keep, a store with a queue declares `fifo`.
    fn capabilities(self) -> Capabilities {
        let mut c = Capabilities::new();
        c.durable_fencing = self == Bug::ClaimsDurableFencing;
        c.fifo = self == Bug::ClaimsFifo || self.queues();
        c
    }
}

/// How long a queue entry counts after the waiter's last attempt: StoreLock's waiters poll at
/// least every max_poll (125 ms for the 500 ms ttl), so this is many polls.
const ENTRY_LIFE: Duration = Duration::from_millis(600);

/// How long a grant the release hands to the queue's head lasts until the head claims it (the
/// head's next attempt extends it to its ttl): `min(ttl, CLAIM_WINDOW)`, as lock-sql and
/// lock-redis do with 1 s.
const CLAIM_WINDOW: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct State {
    entries: HashMap<LockName, (OwnerId, Instant)>,
    fences: HashMap<LockName, u64>,
    /// Per name, the waiters in arrival order and when each entry stops counting.
    queues: HashMap<LockName, Vec<(OwnerId, Instant)>>,
    /// The highest fence of every collected name: new counters start there.
    floor: u64,
    /// Grant messages waiting for each owner's client (name, token): genuine or forged.
    messages: HashMap<OwnerId, (LockName, u64)>,
    /// The ttl each queued waiter asked for, for the grant a hand-off gives it.
    ttls: HashMap<OwnerId, Duration>,
}

impl State {
    /// Hands `name` (just freed) to the first live waiter of its queue, if any, and sends it a
    /// grant message.
    fn hand_off(&mut self, name: &LockName, now: Instant, bug: Bug) {
        let queue = self.queues.entry(name.clone()).or_default();
        queue.retain(|(_, exp)| *exp > now);
        if queue.is_empty() {
            return;
        }
        let (head, _) = queue.remove(0);
        let ttl = self.ttls.get(&head).copied().unwrap_or(ENTRY_LIFE);
        // Provisional until the head claims it (its next attempt), unless the bug says otherwise.
        let window = if bug == Bug::GrantNotProvisional { ttl } else { ttl.min(CLAIM_WINDOW) };
        self.entries.insert(name.clone(), (head, now + window));
        let floor = self.floor;
        let fence = self.fences.entry(name.clone()).or_insert(floor);
        *fence += 1;
        let token = *fence;
        self.messages.insert(head, (name.clone(), token));
    }
}

pub(crate) struct Server {
    pub(crate) state: Mutex<State>,
    pub(crate) down: Arc<AtomicBool>,
    pub(crate) bug: Bug,
}

impl Server {
    /// A fresh server with `bug`.
    pub(crate) fn new(bug: Bug) -> Arc<Server> {
        Arc::new(Server { state: Mutex::default(), down: Arc::default(), bug })
    }
}

pub(crate) struct Store {
    pub(crate) server: Arc<Server>,
    pub(crate) cut: Arc<AtomicBool>,
    /// One-way delay of this client's link: each request reaches the server after it and its
    /// answer comes back after it again (a request dropped on the way is never applied).
    pub(crate) latency: Arc<Mutex<Duration>>,
}

impl Store {
    /// The careless key mapping of `Bug::StripsNames`: drops everything but letters and digits.
    fn key(&self, name: &LockName) -> LockName {
        if self.server.bug == Bug::TruncatesNames {
            let mut end = name.as_str().len().min(100);
            while !name.as_str().is_char_boundary(end) {
                end -= 1;
            }
            return LockName::new(&name.as_str()[..end]).unwrap_or_else(|_| name.clone());
        }
        if self.server.bug != Bug::StripsNames {
            return name.clone();
        }
        let k: String = name.as_str().chars().filter(|c| c.is_alphanumeric()).collect();
        LockName::new(if k.is_empty() { "x".to_owned() } else { k }).unwrap_or_else(|_| name.clone())
    }

    async fn delay(&self) {
        let latency = *self.latency.lock().unwrap_or_else(|e| e.into_inner());
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    fn check(&self) -> Result<std::sync::MutexGuard<'_, State>, LockError> {
        if self.server.down.load(Ordering::SeqCst) || self.cut.load(Ordering::SeqCst) {
            return Err(LockError::unavailable("mutant", "unreachable"));
        }
        Ok(self.server.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[async_trait]
impl LeaseStore for Store {
    fn backend(&self) -> &str {
        "mutant"
    }
    fn capabilities(&self) -> Capabilities {
        self.server.bug.capabilities()
    }
    async fn try_lock(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        self.delay().await;
        let answer = self.try_lock_queued(claim, waiting);
        self.delay().await;
        answer
    }
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.delay().await;
        let mut s = self.check()?;
        if self.server.bug == Bug::LeaveIgnored {
            return Ok(());
        }
        let key = self.key(name);
        if let Some(q) = s.queues.get_mut(&key) {
            q.retain(|(o, _)| *o != owner);
        }
        // A grant handed to this waiter meanwhile is withdrawn and passed on.
        let withdraws = matches!(self.server.bug, Bug::HandOff | Bug::GrantNotProvisional);
        if withdraws && s.entries.get(&key).is_some_and(|(o, _)| *o == owner) {
            s.entries.remove(&key);
            s.hand_off(&key, Instant::now(), self.server.bug);
        }
        Ok(())
    }
    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.delay().await;
        let answer = self.renew_now(name, owner, ttl);
        self.delay().await;
        answer
    }
    async fn renew_many(&self, leases: &[(LockName, OwnerId)], ttl: Duration) -> Vec<Result<RenewOutcome, LockError>> {
        self.delay().await;
        let mut answers: Vec<_> = leases.iter().map(|(name, owner)| self.renew_now(name, *owner, ttl)).collect();
        if self.server.bug == Bug::BatchAnsweredAsOne && answers.len() > 1 {
            let first = answers.remove(0);
            let as_one = |r: &Result<RenewOutcome, LockError>| match r {
                Ok(o) => Ok(*o),
                Err(_) => Err(LockError::unavailable("mutant", "unreachable")),
            };
            answers = std::iter::repeat_with(|| as_one(&first)).take(leases.len()).collect();
        }
        self.delay().await;
        answers
    }
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.delay().await;
        let answer = self.release_now(name, owner);
        self.delay().await;
        answer
    }
}

impl Store {
    /// With a queue (`Bug::queues`): granted only when no live waiter is queued ahead of
    /// `owner` (a caller not queued is behind all of them); a refused waiting attempt queues
    /// or refreshes its entry.
    fn try_lock_queued(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        let (name, owner, ttl, bug) = (claim.name, claim.owner, claim.ttl, self.server.bug);
        if !bug.queues() {
            return self.try_lock_now(name, owner, ttl);
        }
        let key = self.key(name);
        let now = Instant::now();
        if bug.hands_off() {
            let mut s = self.check()?;
            if waiting {
                s.ttls.insert(owner, ttl);
            }
            let message = s.messages.remove(&owner).filter(|(n, _)| *n == key);
            if let (Some((_, token)), Bug::TrustsMessage) = (message, bug) {
                return Ok(TryLock::Acquired { token: FencingToken(token) });
            }
            // Handed to us: confirmed by the server's entry, and started afresh from this attempt.
            if s.entries.get(&key).is_some_and(|(o, exp)| *o == owner && *exp > now) {
                s.entries.insert(key.clone(), (owner, now + ttl));
                let token = s.fences.get(&key).copied().unwrap_or_default();
                return Ok(TryLock::Acquired { token: FencingToken(token) });
            }
        }
        let blocked = {
            let s = self.check()?;
            let queue = s.queues.get(&key).map(Vec::as_slice).unwrap_or_default();
            let live = |exp: &Instant| *exp > now || bug == Bug::FairHeadStuck;
            let ahead = queue.iter().take_while(|(o, _)| *o != owner).any(|(_, exp)| live(exp));
            // The overtaken queue is only respected by waiting attempts.
            ahead && (waiting || bug != Bug::FairOvertaken)
        };
        let answer = if blocked {
            let s = self.check()?;
            let remaining =
                s.entries.get(&key).map(|(_, exp)| exp.saturating_duration_since(now)).filter(|r| !r.is_zero());
            TryLock::Held { remaining }
        } else {
            self.try_lock_now(name, owner, ttl)?
        };
        let mut s = self.check()?;
        let queue = s.queues.entry(key).or_default();
        match answer {
            TryLock::Acquired { .. } => queue.retain(|(o, _)| *o != owner),
            TryLock::Held { .. } if waiting => match queue.iter_mut().find(|(o, _)| *o == owner) {
                Some(entry) => entry.1 = now + ENTRY_LIFE,
                None => queue.push((owner, now + ENTRY_LIFE)),
            },
            _ => {}
        }
        Ok(answer)
    }

    fn try_lock_now(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        let bug = self.server.bug;
        let name = &self.key(name);
        let mut s = self.check()?;
        let now = Instant::now();
        let entry = s.entries.get(name).copied();
        let live = entry.filter(|(_, exp)| *exp > now || bug == Bug::NeverExpires);
        if let Some((o, exp)) = live {
            if o != owner && bug != Bug::NoExclusion {
                return Ok(TryLock::Held { remaining: Some(exp.saturating_duration_since(now)) });
            }
        }
        let stolen = entry.is_some_and(|(o, _)| o != owner) && live.is_none();
        let ttl = if bug == Bug::ExpiresEarly { ttl / 3 } else { ttl };
        s.entries.insert(name.clone(), (owner, now + ttl));
        let floor = s.floor;
        let f = s.fences.entry(name.clone()).or_insert(floor);
        if bug != Bug::TokensRepeat && !(bug == Bug::RepeatsStolenToken && stolen) {
            *f += 1;
        }
        Ok(TryLock::Acquired { token: FencingToken(*f) })
    }

    fn renew_now(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        let bug = self.server.bug;
        let name = &self.key(name);
        let mut s = self.check()?;
        let now = Instant::now();
        match s.entries.get(name) {
            Some((o, exp)) if *o == owner && (*exp > now || bug == Bug::NeverExpires) => {
                if bug == Bug::RenewReleases {
                    s.entries.remove(name);
                } else {
                    s.entries.insert(name.clone(), (owner, now + ttl));
                }
                Ok(RenewOutcome::Renewed)
            }
            // A renewal that re-creates a missing entry (an upsert without the owner check).
            None if bug == Bug::RenewUpserts => {
                s.entries.insert(name.clone(), (owner, now + ttl));
                Ok(RenewOutcome::Renewed)
            }
            _ => Ok(RenewOutcome::NotOwner),
        }
    }
    fn release_now(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        let bug = self.server.bug;
        let name = &self.key(name);
        let mut s = self.check()?;
        match s.entries.get(name) {
            Some((o, _)) if *o == owner || bug == Bug::ReleaseAnyOwner => {
                s.entries.remove(name);
                if bug.hands_off() {
                    s.hand_off(name, Instant::now(), bug);
                }
                Ok(ReleaseOutcome::Released)
            }
            _ => Ok(ReleaseOutcome::NotOwner),
        }
    }
}

pub(crate) struct Mutant(pub(crate) Arc<Server>);

struct Cut(Arc<AtomicBool>, Arc<Mutex<Duration>>);

#[async_trait]
impl ClientLink for Cut {
    async fn set_partitioned(&self, on: bool) {
        self.0.store(on, Ordering::SeqCst);
    }
    async fn set_latency(&self, latency: Duration) {
        *self.1.lock().unwrap_or_else(|e| e.into_inner()) = latency;
    }
    async fn reset_connections(&self) {}
}

#[async_trait]
impl Fixture for Mutant {
    fn backend(&self) -> &str {
        "mutant"
    }
    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        Ok(Arc::new(StoreLock::new(Store {
            server: self.0.clone(),
            cut: Arc::new(AtomicBool::new(false)),
            latency: Arc::default(),
        })))
    }
    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let cut = Arc::new(AtomicBool::new(false));
        let latency: Arc<Mutex<Duration>> = Arc::default();
        let client =
            Arc::new(StoreLock::new(Store { server: self.0.clone(), cut: cut.clone(), latency: latency.clone() }));
        Ok(Some(LinkedClient { client, link: Arc::new(Cut(cut, latency)) }))
    }
    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        let server = self.0.clone();
        let forget = move || *server.state.lock().unwrap_or_else(|e| e.into_inner()) = State::default();
        Some(Arc::new(DownSwitch::new(self.0.down.clone(), forget)))
    }
    fn base_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner()).entries.remove(name);
        Ok(true)
    }
    /// Queued waiters of a store that hands off get the message its release sends them.
    async fn forge_grant(&self, name: &LockName, token: u64) -> Result<Option<usize>, LockError> {
        if !self.0.bug.hands_off() {
            return Ok(None);
        }
        let mut s = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        let queued: Vec<OwnerId> = s.queues.get(name).map(|q| q.iter().map(|(o, _)| *o).collect()).unwrap_or_default();
        for owner in &queued {
            s.messages.insert(*owner, (name.clone(), token));
        }
        Ok(Some(queued.len()))
    }
    /// An in-process waiter "killed" as a process is: its link cut for good, then its future
    /// dropped, so no clean-up of its own reaches the server.
    async fn queued_waiter(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<Box<dyn QueuedWaiter>>, LockError> {
        let cut = Arc::new(AtomicBool::new(false));
        let client = StoreLock::new(Store { server: self.0.clone(), cut: cut.clone(), latency: Arc::default() });
        let (name, opts) = (name.clone(), opts.clone());
        let task = tokio::spawn(async move { client.acquire(&name, &opts).await.map(drop) });
        Ok(Some(Box::new(Doomed { cut, task })))
    }
    /// A departed waiter's abandon runs as its future drops.
    fn untaken_grant_bound(&self) -> Duration {
        self.base_ttl() / 2
    }
    async fn collect_idle(&self, name: &LockName) -> Result<bool, LockError> {
        let mut s = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        s.entries.remove(name);
        let fence = s.fences.remove(name).unwrap_or(0);
        if self.0.bug != Bug::CollectResetsTokens {
            s.floor = s.floor.max(fence);
        }
        Ok(true)
    }
}

/// The mutant's [`QueuedWaiter`]: a waiting task whose link the kill cuts before dropping it.
struct Doomed {
    cut: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<(), LockError>>,
}

#[async_trait]
impl QueuedWaiter for Doomed {
    async fn finished(&mut self) -> Option<String> {
        self.task.is_finished().then(|| "the waiting task ended (it got the lock or failed)".to_owned())
    }
    async fn kill(&mut self) -> Result<(), LockError> {
        self.cut.store(true, Ordering::SeqCst);
        self.task.abort();
        Ok(())
    }
}
