//! The cases of the suite (docs/contract.md §7), each a plain `pub async fn case(fx: &dyn Fixture) -> CaseResult`,
//! grouped by theme. [`all_cases`] lists them in report order.
//!
//! Rules every case follows:
//! - lock names are unique per case and run ([`Ctx::name`]), so cases can share one server;
//! - timing bounds are multiples of [`Fixture::base_ttl`] / [`Fixture::expiry_bound`], generous
//!   on purpose (two cores, parallel tests); a case waits on events, never on a sleep race;
//! - a case answers `NotApplicable` only with a reason taken from the backend's
//!   [`Capabilities`] or from a fault hook the fixture lacks, and the reason is always reported.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use lock_core::{AcquireOptions, Capabilities, DistributedLock, Lease, LeaseModel, LockError, LockName};
use tokio::time::Instant;

use crate::{ClientLink, Fixture};

pub mod contained;
pub mod departure;
pub mod election;
pub mod exclusion;
pub mod fairness;
pub mod faults;
pub mod fencing;
pub mod grants;
pub mod handles;
pub mod hold;
pub mod idle;
pub mod inspect;
pub mod kinds;
pub mod kinds_faults;
pub mod kinds_fifo;
pub mod lease;
pub mod multi;
pub mod names;
pub mod nemesis;
pub mod regrant;
pub mod restart;
pub mod slow_grant;
pub mod validity;
pub mod waiting;

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseError {
    /// A promise of the contract was broken; the text says which and what was observed.
    Failed(String),
    /// The case does not apply to this backend or fixture; the text says why.
    NotApplicable(String),
    /// The case could not run (the fixture failed to make a client, …); counts as not ok.
    Skipped(String),
}

/// How every `NotApplicable` reason that comes from a fault hook the fixture lacks begins (as
/// opposed to a reason taken from the backend's capabilities). Strict mode of
/// [`conformance_tests!`](crate::conformance_tests) fails on these.
pub const MISSING_HOOK: &str = "missing fault hook: ";

/// `NotApplicable` because the fixture lacks a fault hook.
pub fn missing_hook(why: impl std::fmt::Display) -> CaseError {
    CaseError::NotApplicable(format!("{MISSING_HOOK}{why}"))
}

/// The outcome of one case: `Ok(detail)` (measurements, may be empty) or why it did not pass.
pub type CaseResult = Result<String, CaseError>;

impl From<LockError> for CaseError {
    fn from(e: LockError) -> Self {
        CaseError::Failed(format!("unexpected error: {e}{}", source_chain(&e)))
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(&format!(" (caused by: {s})"));
        cur = s.source();
    }
    out
}

/// Fails the case with a formatted message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::cases::CaseError::Failed(format!($($fmt)+)));
        }
    };
}
pub(crate) use ensure;

/// Fails the case with a formatted message.
macro_rules! fail {
    ($($fmt:tt)+) => {
        return Err($crate::cases::CaseError::Failed(format!($($fmt)+)))
    };
}
pub(crate) use fail;

/// One case of the suite.
#[derive(Clone, Copy)]
pub struct Case {
    /// The case name, as in `<backend>::<name>`.
    pub name: &'static str,
    /// One line on what it checks.
    pub about: &'static str,
    /// How many `max(base_ttl, expiry_bound)` the case may take before the runner stops it.
    pub budget: u32,
    run: fn(Arc<dyn Fixture>) -> BoxFuture<'static, CaseResult>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case").field("name", &self.name).field("about", &self.about).finish()
    }
}

impl Case {
    /// Runs the case against `fixture` (without the runner's timeout).
    pub fn run(&self, fixture: Arc<dyn Fixture>) -> BoxFuture<'static, CaseResult> {
        (self.run)(fixture)
    }

    /// The overall limit the runner puts on this case for `fixture`.
    pub fn time_limit(&self, fixture: &dyn Fixture) -> Duration {
        let unit = fixture.base_ttl().max(fixture.expiry_bound());
        let extra = if matches!(self.name, "nemesis" | "kinds_nemesis" | "election_nemesis") {
            nemesis::duration()
        } else {
            Duration::ZERO
        };
        unit.saturating_mul(self.budget).saturating_add(extra).saturating_add(Duration::from_secs(20))
    }
}

macro_rules! registry {
    ($( $module:ident :: $case:ident, $budget:expr, $about:expr; )*) => {
        static CASES: &[Case] = &[
            $( Case {
                name: stringify!($case),
                about: $about,
                budget: $budget,
                run: |fx| Box::pin(async move { $module::$case(&*fx).await }),
            }, )*
        ];
    };
}

registry! {
    exclusion::mutual_exclusion, 30, "several clients contend; a shared cell detects two holders at once";
    exclusion::counter_exact, 30, "read-sleep-write of a shared counter under the lock ends exact";
    exclusion::independent_names, 6, "distinct names never block each other, even lookalikes";
    fencing::fencing_monotonic, 10, "tokens strictly increase over acquisitions by several clients";
    fencing::fenced_register_rejects_former_holder, 10, "a former holder's late write is rejected by a fenced register";
    fencing::fencing_after_expiry, 10, "a lease taken over after expiry gets a greater token";
    lease::lease_validity, 4, "valid_until lies in (now, t0 + ttl]; is_valid holds";
    lease::auto_renew_keeps_lock, 10, "auto-renewal keeps a lock past several ttls";
    lease::manual_renew_extends, 10, "renew() extends the lease on the server";
    lease::expiry_of_vanished_holder, 10, "a vanished holder's lock frees after expiry, never before its validity";
    lease::release_is_owner_checked, 10, "releasing a lost lease returns Lost and never frees the new holder's lock";
    lease::renew_is_owner_checked, 10, "renewing a lost lease returns Lost and does not steal the lock back";
    lease::lost_signal, 10, "the lost signal fires exactly once and is_valid turns false";
    lease::release_idempotent, 6, "release twice is fine and never frees someone else's lock";
    lease::drop_releases, 6, "dropping a lease releases it in the background, well before its ttl";
    lease::run_locked, 10, "run_locked returns the value, releases, and returns Lost when the lease is lost";
    waiting::try_acquire_semantics, 4, "try_acquire returns None while held and a lease when free";
    waiting::acquire_timeout, 6, "acquire gives Timeout after the caller's wait, not much later";
    waiting::cancel_safety, 12, "a dropped acquire future leaves no lock and no queue entry behind";
    waiting::wake_latency, 8, "a waiter gets the lock soon after release";
    waiting::fifo_order, 10, "waiters are served in arrival order when the backend declares fifo";
    waiting::fifo_no_overtake, 10, "a newcomer polling try_acquire never overtakes a queued waiter (fifo)";
    names::hostile_names, 12, "hostile names work and never collide";
    names::invalid_input, 4, "invalid names and options give typed errors, never a panic";
    names::declared_kinds, 1, "every lock kind the capabilities declare is checked";
    kinds::rw_lock, 16, "read-write lock: readers share, writers alone and not starved, tokens increase";
    kinds::semaphore, 16, "semaphore: at most n holders, each with its own lease and increasing token";
    faults::fault_pause_past_ttl, 10, "a holder stops renewing past its ttl: another acquires, the old one is fenced off";
    faults::fault_connection_cut, 12, "resetting a client's connections neither breaks a held lease unnoticed nor a waiter";
    faults::fault_partition, 12, "a holder cut off longer than its ttl loses the lock safely";
    faults::fault_latency, 10, "added network latency keeps leases correct";
    faults::fault_server_pause, 12, "a paused server makes holders lose their leases on time, not hang";
    faults::fault_server_restart, 16, "fencing stays monotonic and declared durability holds across a restart";
    faults::fault_unavailable, 10, "a server that is down gives Unavailable within the caller's wait";
    faults::fault_entry_deleted, 8, "a lock entry deleted behind the holder's back: loss signalled, fencing kept";
    faults::fault_entry_deleted_among_many, 8, "one of several held leases deleted: only it is lost (renewal batches answer each lease)";
    nemesis::nemesis, 10, "random faults while clients contend: no overlapping windows, increasing tokens";
    multi::acquire_all_holds_every_name, 6, "acquire_all holds every name of the set until released";
    multi::acquire_all_releases_on_failure, 6, "acquire_all that fails leaves none of the names held";
    multi::acquire_all_opposite_orders, 12, "acquire_all in opposite orders from two clients never deadlocks";
    validity::validity_within_server_bound, 6, "valid_until never exceeds what the server keeps (ttl, or the session for per-session leases)";
    regrant::regrant_extends_lease, 12, "a re-grant to the same owner extends the server-side lease like a fresh grant";
    restart::fault_restart_quiet_period, 14, "after an empty restart nothing is granted while a forgotten lease may be believed";
    lease::release_cancelled, 12, "a release() dropped at any await point still frees the lock well before its ttl";
    lease::release_retried_after_failure, 10, "a release after a failed release reaches the server; Ok means freed";
    lease::release_reply_lost, 10, "a release whose answer was lost with the connection is Ok, never Lost";
    waiting::busy_at_deadline_is_timeout, 10, "a lock busy at the deadline is Timeout, never Unavailable, over a slow link";
    waiting::forever_survives_transient_errors, 12, "WaitPolicy::Forever retries transient errors until granted";
    names::long_name_prefixes, 6, "long names differing only in their last byte or character are independent locks";
    kinds_faults::kinds_pause_past_ttl, 12, "rw and semaphore holders that stop renewing: successors only after expiry, greater tokens";
    kinds_faults::kinds_server_pause, 12, "a paused server: writers and permit holders lose their leases on time";
    kinds_faults::kinds_nemesis, 10, "random server faults while rw and semaphore clients contend: the kind checkers hold";
    slow_grant::slow_grant_renewed_in_time, 8, "a grant that took a third of its ttl to arrive is renewed in time, not lost";
    lease::lost_by_valid_until, 12, "the lost signal fires by valid_until, for a holder that stops renewing or whose renewals go unanswered";
    election::election_nemesis, 10, "five election candidates under random faults: never two valid leaders, epochs strictly rise";
    election::election_resign_hands_over, 20, "a resigning leader hands over to a waiting candidate within the wake bound";
    election::election_observers_converge, 20, "observers report each new leader within one ttl of its election (needs inspect)";
    election::election_observers_notified, 10, "an observer that polls hourly reports a hand-over and a release in time (needs notify_changes)";
    hold::hold_at_least_early_release, 12, "a lease released or dropped before t0 + hold_at_least keeps the lock until then, and not much longer";
    hold::hold_at_least_late_release, 6, "a lease released after t0 + hold_at_least frees the lock at once";
    inspect::inspect_reports_holder, 6, "inspect reports holder id, token, kind and metadata while held, None after release";
    inspect::inspect_list_by_prefix, 6, "list reports exactly the held names under a prefix (wildcards literal), in order, within the limit";
    idle::idle_collected_tokens_rise, 6, "a token issued after an idle name's state was collected is above every earlier one";
    inspect::inspect_hostile_holder, 6, "bad holder ids and oversized metadata are rejected; hostile valid ids round-trip verbatim";
    fairness::fifo_no_overtaking, 12, "with a waiter queued, neither the releaser nor a newcomer overtakes it (fifo)";
    fairness::fifo_vanished_head, 20, "a queued waiter that vanished holds the next one back for a bounded time only (fifo)";
    kinds_fifo::rw_fifo_order, 20, "rw lock (fifo): reader, writer, reader served in arrival order; no reader joins ahead of a queued writer";
    kinds_fifo::rw_fifo_no_overtaking, 14, "rw lock (fifo): with a writer queued, neither the releasing reader nor a newcomer overtakes it";
    kinds_fifo::semaphore_fifo_order, 20, "semaphore (fifo): waiters get freed permits in arrival order, try_acquire never overtakes";
    kinds_fifo::kinds_fifo_vanished_head, 20, "rw lock and semaphore (fifo): a vanished queued waiter holds the next back for a bounded time only";
    grants::forged_grant_ignored, 10, "forged grant messages never make a waiter return a lease or choose its token (needs Fixture::forge_grant)";
    grants::waiter_departed_at_grant, 12, "a grant to a waiter whose acquire was dropped at the release frees within the fixture's untaken_grant_bound";
    handles::handles, 16, "handles: try_*_for answers None after about its wait on a busy lock, run_locked frees, bad input is typed, on every kind";
    contained::panicking_hook_loses_only_its_lease, 12, "a panicking LeaseEvents hook loses its own lease (lost signal fires) and no other lease stops renewing";
    departure::wait_deadline_races_release, 12, "a wait(d) whose deadline races a release either holds the lease or leaves the lock free within 100 ms";
    departure::dropped_wait_races_release, 12, "an acquire dropped as a release lands either holds the lease or leaves the lock free within 100 ms";
    departure::queued_head_killed, 16, "a queued waiter killed with SIGKILL holds the next back for the declared bound only (needs Fixture::queued_waiter)";
}

/// Every case of the suite, in report order.
pub fn all_cases() -> &'static [Case] {
    CASES
}

/// Shared helpers of one case run.
pub struct Ctx<'a> {
    /// The fixture under test.
    pub fx: &'a dyn Fixture,
    /// The case name.
    pub case: &'static str,
    /// The backend's declaration.
    pub caps: Capabilities,
    run: String,
}

impl<'a> Ctx<'a> {
    /// Reads the capabilities from a fresh client.
    pub async fn new(fx: &'a dyn Fixture, case: &'static str) -> Result<Ctx<'a>, CaseError> {
        let c = client_of(fx).await?;
        let caps = c.capabilities();
        let run = format!("{:08x}", rand::random::<u32>());
        Ok(Ctx { fx, case, caps, run })
    }

    /// A fresh client; a fixture error makes the case `Skipped`.
    pub async fn client(&self) -> Result<Arc<dyn DistributedLock>, CaseError> {
        client_of(self.fx).await
    }

    /// A linked client, or `NotApplicable` naming the missing hook.
    pub async fn linked(&self) -> Result<(Arc<dyn DistributedLock>, Arc<dyn ClientLink>), CaseError> {
        match self.fx.linked_client().await {
            Ok(Some(l)) => Ok((l.client, l.link)),
            Ok(None) => Err(missing_hook(
                "the fixture offers no linked client (Fixture::linked_client), so the suite cannot break \
                 a client's network",
            )),
            Err(e) => Err(CaseError::Skipped(format!("the fixture could not make a linked client: {e}"))),
        }
    }

    /// The base ttl, raised to the backend's minimum.
    pub fn ttl(&self) -> Duration {
        self.fx.base_ttl().max(self.caps.min_ttl)
    }

    /// How long until a vanished holder's lock is free (see [`Fixture::expiry_bound`]).
    pub fn expiry(&self) -> Duration {
        self.fx.expiry_bound().max(self.ttl())
    }

    /// A lock name unique to this case and run: `<prefix>dlock-conf/<case>/<run>/<suffix>`.
    pub fn name(&self, suffix: &str) -> Result<LockName, CaseError> {
        let raw = format!("{}dlock-conf/{}/{}/{}", self.fx.name_prefix(), self.case, self.run, suffix);
        LockName::new(&raw).map_err(|e| CaseError::Failed(format!("the suite built an invalid name {raw:?}: {e}")))
    }

    /// The run id, unique per case run.
    pub fn run_id(&self) -> &str {
        &self.run
    }

    /// `N` fresh, independent clients, made one after the other.
    pub async fn clients<const N: usize>(&self) -> Result<[Arc<dyn DistributedLock>; N], CaseError> {
        let mut clients = Vec::with_capacity(N);
        for _ in 0..N {
            clients.push(self.client().await?);
        }
        clients.try_into().map_err(|_| CaseError::Failed(format!("could not make {N} clients")))
    }

    /// Options with the base ttl, waiting `wait`.
    pub fn opts(&self, wait: Duration) -> AcquireOptions {
        AcquireOptions::new(self.ttl()).wait(wait).request_timeout(self.request_timeout())
    }

    /// A per-request bound: long enough for a slow machine, short enough for fault cases.
    pub fn request_timeout(&self) -> Duration {
        self.ttl().clamp(Duration::from_millis(500), Duration::from_secs(5))
    }

    /// Acquires a lease whose holder will "vanish": for per-lock leases it never renews; for
    /// per-session leases it is taken over a linked client that [`Vanishing::vanish`] cuts off.
    pub async fn vanishing_holder(&self, name: &LockName) -> Result<Vanishing, CaseError> {
        match self.caps.lease_model {
            LeaseModel::PerSession => {
                let (client, link) = self.linked().await.map_err(|e| match e {
                    CaseError::NotApplicable(r) => missing_hook(format!(
                        "per-session leases: a holder only vanishes when its session is cut off ({})",
                        r.trim_start_matches(MISSING_HOOK)
                    )),
                    other => other,
                })?;
                let t0 = Instant::now();
                let lease = client.acquire(name, &self.opts(self.expiry() * 2)).await?;
                Ok(Vanishing { lease, t0, link: Some(link), _client: client })
            }
            _ => {
                let client = self.client().await?;
                let t0 = Instant::now();
                let lease = client.acquire(name, &self.opts(self.expiry() * 2).auto_renew(false)).await?;
                Ok(Vanishing { lease, t0, link: None, _client: client })
            }
        }
    }

    /// `holder` vanishes and another client waits for `name` (up to four expiry bounds): that
    /// client's lease, and the instant it was granted (taken before the holder heals).
    pub async fn take_over(&self, holder: &Vanishing, name: &LockName) -> Result<(Lease, Instant), CaseError> {
        holder.vanish().await;
        let b = self.client().await?;
        let got = b.acquire(name, &self.opts(self.expiry() * 4)).await;
        let granted = Instant::now();
        holder.heal().await;
        Ok((got?, granted))
    }
}

async fn client_of(fx: &dyn Fixture) -> Result<Arc<dyn DistributedLock>, CaseError> {
    fx.client().await.map_err(|e| CaseError::Skipped(format!("the fixture could not make a client: {e}")))
}

/// A holder that stops keeping its lease alive (see [`Ctx::vanishing_holder`]).
pub struct Vanishing {
    /// The lease.
    pub lease: Lease,
    /// The instant taken before the acquire call.
    pub t0: Instant,
    link: Option<Arc<dyn ClientLink>>,
    _client: Arc<dyn DistributedLock>,
}

impl Vanishing {
    /// Makes the holder stop keeping its lease (partitions its link, for per-session leases;
    /// per-lock holders already never renew).
    pub async fn vanish(&self) {
        if let Some(l) = &self.link {
            l.set_partitioned(true).await;
        }
    }

    /// Heals the holder's network again.
    pub async fn heal(&self) {
        if let Some(l) = &self.link {
            l.set_partitioned(false).await;
        }
    }
}

/// Waits until `f` returns true, checking every `every`, for at most `within`.
pub async fn eventually<F, Fut>(within: Duration, every: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Milliseconds of a duration, for details.
pub fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// The former holder's `release` (`what`, for the message) answers `Lost`, and `who` did not free
/// the new holder's lock on `name`.
pub(crate) async fn stale_release_is_lost(
    cx: &Ctx<'_>,
    lease: &lock_core::Lease,
    name: &lock_core::LockName,
    what: &str,
    who: &str,
) -> Result<(), CaseError> {
    match lease.release().await {
        Err(lock_core::LockError::Lost { .. }) => {}
        Ok(()) => fail!("{what} returned Ok; it must return Lost"),
        Err(e) => fail!("{what} returned {e}; it must return Lost"),
    }
    let c = cx.client().await?;
    ensure!(c.try_acquire(name, &cx.opts(cx.ttl())).await?.is_none(), "{who} freed the new holder's lock");
    Ok(())
}
