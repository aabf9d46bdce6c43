//! Every checker must be able to fail (Curator's cluster test once had an inverted check whose
//! failures were swallowed). Each test here runs a case against a lease store with one
//! deliberate bug and asserts the case reports `failed`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_conformance::runner::{run_suite, Outcome, RunOptions};
use lock_conformance::{async_trait, ClientLink, DownSwitch, Fixture, LinkedClient, ServerControl};
use lock_core::{
    Capabilities, Claim, DistributedLock, FencingToken, LeaseStore, LockError, LockName, OwnerId, ReleaseOutcome,
    RenewOutcome, StoreLock, TryLock,
};
use tokio::time::Instant;

#[path = "mutants/kinds.rs"]
mod kinds;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bug {
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
}

impl Bug {
    fn queues(self) -> bool {
        matches!(self, Bug::Fair | Bug::FairOvertaken | Bug::FairHeadStuck) || self.hands_off()
    }

    fn hands_off(self) -> bool {
        matches!(self, Bug::HandOff | Bug::TrustsMessage | Bug::AbandonForgetsPlace)
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

#[derive(Default)]
struct State {
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
    fn hand_off(&mut self, name: &LockName, now: Instant) {
        let queue = self.queues.entry(name.clone()).or_default();
        queue.retain(|(_, exp)| *exp > now);
        if queue.is_empty() {
            return;
        }
        let (head, _) = queue.remove(0);
        let ttl = self.ttls.get(&head).copied().unwrap_or(ENTRY_LIFE);
        self.entries.insert(name.clone(), (head, now + ttl));
        let floor = self.floor;
        let fence = self.fences.entry(name.clone()).or_insert(floor);
        *fence += 1;
        let token = *fence;
        self.messages.insert(head, (name.clone(), token));
    }
}

struct Server {
    state: Mutex<State>,
    down: Arc<AtomicBool>,
    bug: Bug,
}

struct Store {
    server: Arc<Server>,
    cut: Arc<AtomicBool>,
    /// One-way delay of this client's link: each request reaches the server after it and its
    /// answer comes back after it again (a request dropped on the way is never applied).
    latency: Arc<Mutex<Duration>>,
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
    async fn try_lock_waiting(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.try_claim(&Claim::new(name, owner, ttl), true).await
    }
    /// Every attempt, single or waiting, comes here.
    async fn try_claim(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        self.delay().await;
        let answer = self.try_lock_queued(claim, waiting);
        self.delay().await;
        answer
    }
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.delay().await;
        let mut s = self.check()?;
        let key = self.key(name);
        if let Some(q) = s.queues.get_mut(&key) {
            q.retain(|(o, _)| *o != owner);
        }
        // A grant handed to this waiter meanwhile is withdrawn and passed on.
        if self.server.bug == Bug::HandOff && s.entries.get(&key).is_some_and(|(o, _)| *o == owner) {
            s.entries.remove(&key);
            s.hand_off(&key, Instant::now());
        }
        Ok(())
    }
    async fn try_lock(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<TryLock, LockError> {
        self.try_claim(&Claim::new(name, owner, ttl), false).await
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
                    s.hand_off(name, Instant::now());
                }
                Ok(ReleaseOutcome::Released)
            }
            _ => Ok(ReleaseOutcome::NotOwner),
        }
    }
}

struct Mutant(Arc<Server>);

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

async fn outcomes(bug: Bug, cases: &[&str]) -> Vec<(String, Outcome, String)> {
    let mut out = Vec::new();
    for case in cases {
        let fx = Arc::new(Mutant(Arc::new(Server { state: Mutex::default(), down: Arc::default(), bug })));
        let report = run_suite(fx, &RunOptions { filter: Some((*case).to_owned()), ..RunOptions::default() }).await;
        for c in report.cases.into_iter().filter(|c| c.name == format!("mutant::{case}")) {
            out.push((c.name, c.outcome, c.detail));
        }
    }
    out
}

async fn assert_fails(bug: Bug, cases: &[&str]) {
    let got = outcomes(bug, cases).await;
    assert_eq!(got.len(), cases.len(), "{bug:?}: not every case ran: {got:?}");
    for (name, outcome, detail) in got {
        assert_eq!(outcome, Outcome::Failed, "{bug:?}: {name} should fail, got {outcome:?}: {detail}");
        eprintln!("{bug:?}: {name} failed as it should: {detail}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_store_passes_the_cases_the_mutants_fail() {
    let cases = [
        "mutual_exclusion",
        "counter_exact",
        "fencing_monotonic",
        "manual_renew_extends",
        "renew_is_owner_checked",
        "release_is_owner_checked",
        "expiry_of_vanished_holder",
        "fault_server_restart",
        "fault_partition",
        "fault_entry_deleted",
        "fault_entry_deleted_among_many",
        // Each of these fails on a lease or a StoreLock without its fix (issue 10 items 5, 6, 8, 9):
        // the store's link latency keeps a release in flight when its caller goes away, and cuts
        // the last attempt before a deadline short.
        "release_cancelled",
        "release_retried_after_failure",
        "busy_at_deadline_is_timeout",
        "forever_survives_transient_errors",
        "long_name_prefixes",
        "slow_grant_renewed_in_time",
        "lost_by_valid_until",
        "idle_collected_tokens_rise",
    ];
    let not_passed: Vec<String> = outcomes(Bug::None, &cases)
        .await
        .into_iter()
        .filter(|(_, outcome, _)| *outcome != Outcome::Passed)
        .map(|(name, outcome, detail)| format!("{name}: {outcome:?}: {detail}"))
        .collect();
    assert!(not_passed.is_empty(), "a correct store must pass:\n{}", not_passed.join("\n"));
}

/// One test per mutant: the test's name, the bug, and the cases that must catch it.
macro_rules! caught {
    ($($(#[$doc:meta])* $name:ident: $bug:ident => [$($case:literal),+ $(,)?];)+) => {
        $(
            $(#[$doc])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                assert_fails(Bug::$bug, &[$($case),+]).await;
            }
        )+
    };
}

caught! {
    no_exclusion_is_caught: NoExclusion => [
        "mutual_exclusion", "counter_exact", "try_acquire_semantics", "acquire_timeout", "hostile_names", "nemesis",
    ];
    /// `hold_at_least` rests on an owner-checked renewal that moves the lease's end to `t0 + d`:
    /// a store whose renewal frees the lock lets the next holder in right after the early release.
    a_hold_that_frees_early_is_caught: RenewReleases => ["hold_at_least_early_release"];
    renew_that_releases_is_caught: RenewReleases => [
        "renew_is_owner_checked", "manual_renew_extends", "auto_renew_keeps_lock",
    ];
    release_without_owner_check_is_caught: ReleaseAnyOwner => ["release_is_owner_checked", "fault_partition"];
    repeated_tokens_are_caught: TokensRepeat => [
        "fencing_monotonic", "fenced_register_rejects_former_holder", "fencing_after_expiry", "fault_pause_past_ttl",
    ];
    a_lease_that_never_expires_is_caught: NeverExpires => ["expiry_of_vanished_holder", "fault_partition"];
    a_lease_that_expires_early_is_caught: ExpiresEarly => ["expiry_of_vanished_holder", "auto_renew_keeps_lock"];
    a_false_durable_fencing_claim_is_caught: ClaimsDurableFencing => ["fault_server_restart"];
    colliding_names_are_caught: StripsNames => ["independent_names", "hostile_names"];
    a_renewal_that_recreates_a_deleted_entry_is_caught: RenewUpserts => ["fault_entry_deleted"];
    truncated_names_are_caught: TruncatesNames => ["long_name_prefixes"];
    a_token_handed_out_twice_is_caught: RepeatsStolenToken => [
        "fencing_after_expiry", "fault_pause_past_ttl", "fault_partition",
    ];
    a_collection_that_resets_tokens_is_caught: CollectResetsTokens => ["idle_collected_tokens_rise"];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_false_fifo_claim_is_caught_or_lucky() {
    // Polling waiters come in a random order: 1 in 24 runs may happen to be in order, so try
    // a few times; FIFO must fail at least once.
    for _ in 0..3 {
        if outcomes(Bug::ClaimsFifo, &["fifo_order"]).await.iter().any(|(_, o, _)| *o == Outcome::Failed) {
            return;
        }
    }
    panic!("a polling store claiming fifo passed fifo_order three times");
}

/// The fairness cases pass on a correct queue and fail on a queue that newcomers overtake or
/// whose vanished head never expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_queue_passes_and_its_breaches_are_caught() {
    let fair = ["fifo_order", "fifo_no_overtaking", "fifo_vanished_head"];
    let got = outcomes(Bug::Fair, &fair).await;
    assert_eq!(got.len(), fair.len(), "not every case ran: {got:?}");
    for (name, outcome, detail) in got {
        assert_eq!(outcome, Outcome::Passed, "a fair queue must pass {name}: {detail}");
    }
    assert_fails(Bug::FairOvertaken, &["fifo_no_overtaking"]).await;
    assert_fails(Bug::FairHeadStuck, &["fifo_vanished_head"]).await;
}

/// A store that hands the lock to its queue's head with a message passes the grant cases;
/// one whose waiter trusts the message, and one whose departing waiter forgets it may have been
/// handed the lock, are caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_passes_and_its_breaches_are_caught() {
    let grants = ["forged_grant_ignored", "waiter_departed_at_grant", "mutual_exclusion", "fifo_order"];
    let got = outcomes(Bug::HandOff, &grants).await;
    assert_eq!(got.len(), grants.len(), "not every case ran: {got:?}");
    for (name, outcome, detail) in got {
        assert_eq!(outcome, Outcome::Passed, "a correct hand-off must pass {name}: {detail}");
    }
    assert_fails(Bug::TrustsMessage, &["forged_grant_ignored"]).await;
    assert_fails(Bug::AbandonForgetsPlace, &["waiter_departed_at_grant"]).await;
}

/// Renewals gathered into one request must still answer each lease: a batch answered with one
/// outcome keeps a deleted lease alive (or loses the live ones with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_renewals_answered_as_one_is_caught() {
    assert_fails(Bug::BatchAnsweredAsOne, &["fault_entry_deleted_among_many"]).await;
}

/// The kinds' fairness cases pass on a read-write lock and semaphore with a correct waiter queue,
/// and each breach is caught: single tries that overtake the queue, readers that join the current
/// readers ahead of a queued writer, a vanished waiter whose entry never lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_kinds_queue_passes_and_its_breaches_are_caught() {
    use kinds::{kinds_outcomes, KindsBug, KINDS_FIFO};
    let got = kinds_outcomes(KindsBug::None, &KINDS_FIFO).await;
    assert_eq!(got.len(), KINDS_FIFO.len(), "not every case ran: {got:?}");
    for (name, outcome, detail) in got {
        assert_eq!(outcome, Outcome::Passed, "a fair kinds queue must pass {name}: {detail}");
    }
    let must_fail: [(KindsBug, &[&str]); 3] = [
        (KindsBug::TryOvertakes, &["rw_fifo_order", "rw_fifo_no_overtaking", "semaphore_fifo_order"]),
        (KindsBug::ReadersJoin, &["rw_fifo_order", "rw_fifo_no_overtaking"]),
        (KindsBug::HeadStuck, &["kinds_fifo_vanished_head"]),
    ];
    for (bug, cases) in must_fail {
        let got = kinds_outcomes(bug, cases).await;
        assert_eq!(got.len(), cases.len(), "{bug:?}: not every case ran: {got:?}");
        for (name, outcome, detail) in got {
            assert_eq!(outcome, Outcome::Failed, "{bug:?}: {name} should fail, got {outcome:?}: {detail}");
            eprintln!("{bug:?}: {name} failed as it should: {detail}");
        }
    }
}

/// "One watchdog for all": a client whose leases renew through one task of its own, which tells
/// each lease's observer itself with nothing to catch a panic — what the runtime's watchdog
/// driver was before it contained them. One panicking hook ends that task, and with it the
/// renewals of every lease of the client.
mod one_watchdog {
    use std::sync::Arc;
    use std::time::Duration;

    use lock_conformance::{async_trait, Fixture};
    use lock_core::{
        AcquireOptions, Capabilities, DistributedLock, Lease, LeaseEvents, LeaseGrant, LeaseHandle, LeaseStore,
        LockError, LockName, OwnerId, ReleaseOutcome, RenewOutcome, TryLock, WaitPolicy,
    };
    use tokio::sync::{mpsc, oneshot};
    use tokio::time::Instant;

    use super::{Bug, Server, Store};

    type Answer = oneshot::Sender<Result<RenewOutcome, LockError>>;
    type Ask = (LockName, OwnerId, Duration, Option<Arc<dyn LeaseEvents>>, Answer);

    pub(super) struct Client {
        store: Arc<Store>,
        asks: mpsc::UnboundedSender<Ask>,
    }

    /// The one task that renews the leases of every client of a fixture (of its runtime).
    fn watchdog(store: Arc<Store>) -> mpsc::UnboundedSender<Ask> {
        let (asks, mut rx) = mpsc::unbounded_channel::<Ask>();
        tokio::spawn(async move {
            while let Some((name, owner, ttl, events, answer)) = rx.recv().await {
                let outcome = store.renew(&name, owner, ttl).await;
                if let (Ok(RenewOutcome::Renewed), Some(events)) = (&outcome, &events) {
                    events.renewed();
                }
                let _ = answer.send(outcome);
            }
        });
        asks
    }

    impl Client {
        fn lease(
            &self,
            name: &LockName,
            owner: OwnerId,
            token: lock_core::FencingToken,
            started: Instant,
            opts: &AcquireOptions,
        ) -> Lease {
            let mut opts = opts.clone();
            let events = opts.events.take().map(|e| e.0);
            let handle =
                Handle { store: Arc::clone(&self.store), asks: self.asks.clone(), name: name.clone(), owner, events };
            Lease::new(LeaseGrant::new(name.clone(), token, owner, started, Arc::new(handle)), &opts)
        }
    }

    struct Handle {
        store: Arc<Store>,
        asks: mpsc::UnboundedSender<Ask>,
        name: LockName,
        owner: OwnerId,
        events: Option<Arc<dyn LeaseEvents>>,
    }

    #[async_trait]
    impl LeaseHandle for Handle {
        async fn renew(&self, ttl: Duration) -> Result<RenewOutcome, LockError> {
            let (answer, rx) = oneshot::channel();
            let gone = || LockError::unavailable("mutant", "the client's one watchdog task is gone");
            self.asks.send((self.name.clone(), self.owner, ttl, self.events.clone(), answer)).map_err(|_| gone())?;
            rx.await.map_err(|_| gone())?
        }
        async fn release(&self) -> Result<ReleaseOutcome, LockError> {
            self.store.release(&self.name, self.owner).await
        }
    }

    #[async_trait]
    impl DistributedLock for Client {
        fn backend(&self) -> &str {
            "one-watchdog"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::new()
        }
        async fn try_acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Option<Lease>, LockError> {
            let (owner, started) = (OwnerId::random(), Instant::now());
            Ok(match self.store.try_lock(name, owner, opts.ttl).await? {
                TryLock::Acquired { token } => Some(self.lease(name, owner, token, started, opts)),
                _ => None,
            })
        }
        async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<Lease, LockError> {
            let begun = Instant::now();
            let deadline = opts.wait.deadline(begun);
            loop {
                if let Some(lease) = self.try_acquire(name, opts).await? {
                    return Ok(lease);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) || opts.wait == WaitPolicy::NoWait {
                    return Err(LockError::Timeout { name: name.as_str().to_owned(), waited: begun.elapsed() });
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    pub(super) struct OneWatchdog(
        pub(super) Arc<Server>,
        pub(super) std::sync::Mutex<Option<mpsc::UnboundedSender<Ask>>>,
    );

    impl OneWatchdog {
        fn store(&self) -> Arc<Store> {
            Arc::new(Store { server: Arc::clone(&self.0), cut: Arc::default(), latency: Arc::default() })
        }
    }

    #[async_trait]
    impl Fixture for OneWatchdog {
        fn backend(&self) -> &str {
            "one-watchdog"
        }
        async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
            let asks =
                self.1.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(|| watchdog(self.store())).clone();
            Ok(Arc::new(Client { store: self.store(), asks }))
        }
        fn base_ttl(&self) -> Duration {
            Duration::from_millis(500)
        }
    }

    pub(super) fn server() -> Arc<Server> {
        Arc::new(Server { state: Default::default(), down: Arc::default(), bug: Bug::None })
    }
}

/// A panicking observer on a client whose leases all renew through one task stops every lease:
/// `panicking_hook_loses_only_its_lease` catches it, and passes on a correct store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watchdog_for_all_is_caught() {
    let case = "panicking_hook_loses_only_its_lease";
    let run = |fx: Arc<dyn Fixture>| async move {
        let report = run_suite(fx, &RunOptions { filter: Some(case.to_owned()), ..RunOptions::default() }).await;
        let c = report.cases.into_iter().find(|c| c.name.ends_with(case)).expect("the case ran");
        (c.outcome, c.detail)
    };
    let (outcome, detail) = run(Arc::new(one_watchdog::OneWatchdog(one_watchdog::server(), Default::default()))).await;
    assert_eq!(outcome, Outcome::Failed, "one watchdog for all should fail {case}, got {outcome:?}: {detail}");
    eprintln!("OneWatchdog: {case} failed as it should: {detail}");
    let correct = Arc::new(Mutant(one_watchdog::server()));
    let (outcome, detail) = run(correct).await;
    assert_eq!(outcome, Outcome::Passed, "a correct store must pass {case}: {detail}");
}
