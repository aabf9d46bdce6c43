//! The shared driver against leases whose handles answer as told: many leases, the order of
//! renewals, losses (failing, refused and hanging renewals), and release or drop stopping it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::lease::{LeaseGrant, LeaseHandle, ReleaseOutcome, RenewOutcome};
use crate::{AcquireOptions, FencingToken, Lease, LockError, LockName, OwnerId};

#[derive(Clone, Copy)]
enum Answer {
    Renewed,
    NotOwner,
    Fail,
    Hang,
}

/// A lease's server side: counts renewals and releases, answers renewals as told.
struct Server {
    answer: Answer,
    renewals: AtomicUsize,
    releases: AtomicUsize,
    /// Renewals dropped before they answered.
    abandoned: Arc<AtomicUsize>,
    /// When each renewal was asked for.
    asked: std::sync::Mutex<Vec<Instant>>,
}

impl Server {
    fn new(answer: Answer) -> Arc<Server> {
        Arc::new(Server {
            answer,
            renewals: AtomicUsize::new(0),
            releases: AtomicUsize::new(0),
            abandoned: Default::default(),
            asked: Default::default(),
        })
    }
    fn renewals(&self) -> usize {
        self.renewals.load(Ordering::SeqCst)
    }
    fn first_renewal(&self) -> Option<Instant> {
        self.asked.lock().expect("not poisoned").first().copied()
    }
}

/// Counts a renewal dropped while it waited.
struct Abandoned(Arc<AtomicUsize>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl LeaseHandle for Server {
    async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        self.asked.lock().expect("not poisoned").push(Instant::now());
        match self.answer {
            Answer::Renewed => Ok(RenewOutcome::Renewed),
            Answer::NotOwner => Ok(RenewOutcome::NotOwner),
            Answer::Fail => Err(LockError::unavailable("test", "the server is down")),
            Answer::Hang => {
                let _abandoned = Abandoned(Arc::clone(&self.abandoned));
                std::future::pending().await
            }
        }
    }
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        Ok(ReleaseOutcome::Released)
    }
}

fn lease(i: usize, server: &Arc<Server>, opts: &AcquireOptions) -> Lease {
    let name = LockName::new(format!("driver/{i}")).expect("valid");
    let handle: Arc<dyn LeaseHandle> = Arc::clone(server) as Arc<dyn LeaseHandle>;
    Lease::new(LeaseGrant::new(name, FencingToken(i as u64), OwnerId::random(), Instant::now(), handle), opts)
}

/// Waits for the lease's lost signal; the instant it fired, or `None` within `within`.
async fn lost_at(lease: &Lease, within: Duration) -> Option<Instant> {
    tokio::time::timeout(within, lease.lost().fired()).await.ok().map(|()| Instant::now())
}

#[tokio::test(start_paused = true)]
async fn many_leases_each_renew_on_cadence_and_none_is_lost() {
    let opts = AcquireOptions::new(Duration::from_millis(300));
    let servers: Vec<_> = (0..2000).map(|_| Server::new(Answer::Renewed)).collect();
    let leases: Vec<_> = servers.iter().enumerate().map(|(i, s)| lease(i, s, &opts)).collect();
    tokio::time::sleep(Duration::from_millis(1050)).await;
    for (i, (server, lease)) in servers.iter().zip(&leases).enumerate() {
        // Every 100 ms over 1050 ms.
        assert_eq!(server.renewals(), 10, "lease {i} renewed {} times", server.renewals());
        assert!(lease.is_valid(), "lease {i} lost: {:?}", lease.lost().reason());
    }
}

#[tokio::test(start_paused = true)]
async fn renewals_come_in_the_order_they_are_due_and_never_before_their_slack() {
    // Lease i renews every 50·(i+1) ms; they are made in reverse order.
    let servers: Vec<_> = (0..6).map(|_| Server::new(Answer::Renewed)).collect();
    let t0 = Instant::now();
    let leases: Vec<_> = (0..6)
        .rev()
        .map(|i| lease(i, &servers[i], &AcquireOptions::new(Duration::from_millis(150 * (i as u64 + 1)))))
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let firsts: Vec<Duration> = servers.iter().map(|s| s.first_renewal().expect("renewed") - t0).collect();
    for (i, first) in firsts.iter().enumerate() {
        let due = Duration::from_millis(50 * (i as u64 + 1));
        assert!(
            *first >= due && *first <= due + Duration::from_millis(2),
            "lease {i}: first renewal at {first:?}, due {due:?}"
        );
    }
    assert!(firsts.windows(2).all(|w| w[0] < w[1]), "out of order: {firsts:?}");
    drop(leases);
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_are_retried_and_the_lease_is_lost_at_valid_until_not_later() {
    let server = Server::new(Answer::Fail);
    let lease = lease(0, &server, &AcquireOptions::new(Duration::from_millis(300)));
    let valid_until = lease.valid_until();
    let fired = lost_at(&lease, Duration::from_secs(2)).await.expect("lost fired");
    assert!(fired >= valid_until, "lost {:?} before valid_until", valid_until - fired);
    assert!(fired - valid_until <= Duration::from_millis(1), "lost {:?} after valid_until", fired - valid_until);
    assert!(server.renewals() >= 3, "failed renewals were retried: {}", server.renewals());
    assert!(!lease.is_valid());
    assert_eq!(lease.lost().reason(), Some("valid_until passed without a successful renewal"));
    // `Unavailable` may have been applied on the server: the owner-checked release goes out.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.releases.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_finds_another_owner_loses_the_lease_at_once() {
    let server = Server::new(Answer::NotOwner);
    let t0 = Instant::now();
    let lease = lease(0, &server, &AcquireOptions::new(Duration::from_millis(300)));
    let fired = lost_at(&lease, Duration::from_secs(2)).await.expect("lost fired");
    assert!(fired - t0 <= Duration::from_millis(101), "lost at {:?}, the first renewal is due at 100 ms", fired - t0);
    assert_eq!(server.renewals(), 1);
    assert_eq!(lease.lost().reason(), Some("renewal found another owner or no entry"));
}

#[tokio::test(start_paused = true)]
async fn a_renewal_hanging_past_valid_until_loses_the_lease_then_and_releases_it() {
    let server = Server::new(Answer::Hang);
    let lease =
        lease(0, &server, &AcquireOptions::new(Duration::from_millis(300)).request_timeout(Duration::from_secs(60)));
    let valid_until = lease.valid_until();
    let fired = lost_at(&lease, Duration::from_secs(2)).await.expect("lost fired");
    assert!(
        fired >= valid_until && fired - valid_until <= Duration::from_millis(1),
        "lost {:?} after valid_until",
        fired - valid_until
    );
    // The renewal may have been applied: the owner-checked release goes out.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.releases.load(Ordering::SeqCst), 1, "a lease lost with a renewal in flight is released");
}

#[tokio::test(start_paused = true)]
async fn without_auto_renew_only_the_expiry_is_kept() {
    let server = Server::new(Answer::Renewed);
    let lease = lease(0, &server, &AcquireOptions::new(Duration::from_millis(300)).auto_renew(false));
    let valid_until = lease.valid_until();
    let fired = lost_at(&lease, Duration::from_secs(2)).await.expect("lost fired");
    assert!(fired >= valid_until && fired - valid_until <= Duration::from_millis(1));
    assert_eq!(server.renewals(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_manual_renewal_moves_the_expiry() {
    let server = Server::new(Answer::Renewed);
    let lease = lease(0, &server, &AcquireOptions::new(Duration::from_millis(300)).auto_renew(false));
    tokio::time::sleep(Duration::from_millis(200)).await;
    lease.renew().await.expect("renewed");
    let valid_until = lease.valid_until();
    let fired = lost_at(&lease, Duration::from_secs(2)).await.expect("lost fired");
    assert!(fired >= valid_until && fired - valid_until <= Duration::from_millis(1));
}

#[tokio::test(start_paused = true)]
async fn max_hold_stops_renewing_and_the_lease_then_expires() {
    let server = Server::new(Answer::Renewed);
    let opts = AcquireOptions::new(Duration::from_millis(300)).max_hold(Duration::from_millis(250));
    let lease = lease(0, &server, &opts);
    lost_at(&lease, Duration::from_secs(2)).await.expect("lost fired");
    // Renewals at 100 and 200 ms; none at or after 250 ms.
    assert_eq!(server.renewals(), 2);
}

#[tokio::test(start_paused = true)]
async fn release_and_drop_stop_renewals() {
    let opts = AcquireOptions::new(Duration::from_millis(300));
    let servers: Vec<_> = (0..200).map(|_| Server::new(Answer::Renewed)).collect();
    let mut leases: Vec<_> = servers.iter().enumerate().map(|(i, s)| lease(i, s, &opts)).collect();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let kept = leases.split_off(100);
    for lease in &leases {
        lease.release().await.expect("released");
    }
    drop(kept);
    {
        // Taken off the schedule at once, not when next due.
        let drivers = super::DRIVERS.lock().expect("not poisoned");
        let id = tokio::runtime::Handle::current().id();
        let (_, driver) = drivers.iter().find(|(rt, _)| *rt == id).expect("this runtime has a driver");
        assert!(driver.lock().entries.is_empty(), "released and dropped leases left the schedule");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let counts: Vec<_> = servers.iter().map(|s| s.renewals()).collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for (i, (server, before)) in servers.iter().zip(&counts).enumerate() {
        assert_eq!(server.renewals(), *before, "lease {i} renewed after its release or drop");
        assert_eq!(*before, 2, "lease {i} renewed at 100 and 200 ms");
        assert_eq!(server.releases.load(Ordering::SeqCst), 1, "lease {i} released once");
    }
    for lease in &leases {
        assert!(!lease.lost().is_fired(), "a released lease is not lost");
    }
}

#[tokio::test]
async fn a_lease_keeps_renewing_while_another_runtime_with_leases_shuts_down() {
    let opts = AcquireOptions::new(Duration::from_millis(300));
    let server = Server::new(Answer::Renewed);
    let here = lease(0, &server, &opts);
    let other = Server::new(Answer::Renewed);
    let (o, s) = (opts.clone(), Arc::clone(&other));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let there = lease(1, &s, &o);
            tokio::time::sleep(Duration::from_millis(150)).await;
            std::mem::forget(there);
        });
        drop(rt);
    })
    .join()
    .expect("the other runtime ran");
    assert!(other.renewals() >= 1, "the other runtime's lease renewed while it ran");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(server.renewals() >= 4, "renewed {} times", server.renewals());
    assert!(here.is_valid(), "lost: {:?}", here.lost().reason());
    // A third runtime starts a driver of its own.
    let third = Server::new(Answer::Renewed);
    let t = Arc::clone(&third);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let l = lease(2, &t, &AcquireOptions::new(Duration::from_millis(300)));
            tokio::time::sleep(Duration::from_millis(250)).await;
            assert!(l.is_valid());
        });
    })
    .join()
    .expect("the third runtime ran");
    assert_eq!(third.renewals(), 2);
}

#[tokio::test(start_paused = true)]
async fn release_ends_a_renewal_in_flight() {
    let server = Server::new(Answer::Hang);
    let lease =
        lease(0, &server, &AcquireOptions::new(Duration::from_millis(300)).request_timeout(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(server.renewals(), 1, "the renewal at 100 ms is in flight");
    assert_eq!(server.abandoned.load(Ordering::SeqCst), 0);
    lease.release().await.expect("released");
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(server.abandoned.load(Ordering::SeqCst), 1, "the release ended the renewal in flight");
    assert!(!lease.lost().is_fired(), "a released lease is not lost");
}

#[tokio::test(start_paused = true)]
async fn renewals_due_close_together_start_together() {
    // Every 320 ms: a renewal may start up to 20 ms early to share a round.
    let opts = AcquireOptions::new(Duration::from_millis(960));
    let servers: Vec<_> = (0..3).map(|_| Server::new(Answer::Renewed)).collect();
    let t0 = Instant::now();
    let mut leases = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        leases.push(lease(i, server, &opts));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let firsts: Vec<Duration> = servers.iter().map(|s| s.first_renewal().expect("renewed") - t0).collect();
    let ms = Duration::from_millis;
    // Due at 320, 335 and 350 ms: the second rides with the first, 15 ms early; the third is
    // 30 ms after the first, beyond the slack, and starts on its own, on time.
    assert!(firsts[0] >= ms(320) && firsts[0] <= ms(321), "{firsts:?}");
    assert_eq!(firsts[1], firsts[0], "the renewal due 15 ms later did not share the start: {firsts:?}");
    assert!(firsts[2] >= ms(350) && firsts[2] <= ms(351), "{firsts:?}");
    drop(leases);
}

/// An observer whose `renewed` (or `lost`) hook panics.
struct Panicky {
    on_renewed: bool,
}

impl crate::LeaseEvents for Panicky {
    fn renewed(&self) {
        if self.on_renewed {
            panic!("the renewed hook of a test observer panics");
        }
    }
    fn lost(&self, _reason: &str, _held: Duration) {
        panic!("the lost hook of a test observer panics");
    }
}

/// A renewal that panics in the backend's handle.
struct PanickingHandle;

#[async_trait]
impl LeaseHandle for PanickingHandle {
    async fn renew(&self, _ttl: Duration) -> Result<RenewOutcome, LockError> {
        panic!("the renewal of a test handle panics");
    }
    async fn release(&self) -> Result<ReleaseOutcome, LockError> {
        Ok(ReleaseOutcome::Released)
    }
}

/// Leases on the same runtime as a faulty one keep renewing on cadence for several ttls; a
/// lease made afterwards renews too (the driver lives).
/// `n` leases whose servers renew them, beside the faulty one of a test.
fn healthy(n: usize, opts: &AcquireOptions) -> Vec<(Arc<Server>, Lease)> {
    (0..n)
        .map(|i| {
            let s = Server::new(Answer::Renewed);
            let l = lease(i, &s, opts);
            (s, l)
        })
        .collect()
}

async fn others_go_on(others: &[(Arc<Server>, Lease)], opts: &AcquireOptions) {
    let before: Vec<usize> = others.iter().map(|(s, _)| s.renewals()).collect();
    tokio::time::sleep(Duration::from_millis(1050)).await;
    for (i, (server, lease)) in others.iter().enumerate() {
        assert!(lease.is_valid(), "lease {i} next to a faulty one was lost: {:?}", lease.lost().reason());
        // Every 100 ms.
        let renewed = server.renewals() - before[i];
        assert!(renewed >= 10, "lease {i} next to a faulty one renewed {renewed} times in 1050 ms");
    }
    let late = Server::new(Answer::Renewed);
    let late_lease = lease(99, &late, opts);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(late.renewals() >= 3, "a lease made after the fault renewed {} times", late.renewals());
    assert!(late_lease.is_valid());
}

#[tokio::test(start_paused = true)]
async fn a_panicking_renewed_hook_loses_its_lease_and_no_other() {
    let opts = AcquireOptions::new(Duration::from_millis(300));
    let others = healthy(3, &opts);
    let faulty = Server::new(Answer::Renewed);
    let bad = lease(10, &faulty, &opts.clone().events(Arc::new(Panicky { on_renewed: true })));
    // The first renewal is due at 100 ms; the hook panics when it answers.
    let at = lost_at(&bad, Duration::from_millis(250)).await.expect("the panicking lease's lost signal fires");
    assert!(!bad.is_valid());
    let reason = bad.lost().reason().unwrap_or_default().to_owned();
    assert!(reason.contains("panicked"), "lost for another reason: {reason}");
    assert!(at.elapsed() < Duration::from_millis(250));
    // Told it lost the lock, the holder does not keep it taken: released on the server.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(faulty.releases.load(Ordering::SeqCst), 1, "the lease lost to a panic was not released");
    others_go_on(&others, &opts).await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_renewal_loses_its_lease_and_no_other() {
    let opts = AcquireOptions::new(Duration::from_millis(300));
    let others = healthy(3, &opts);
    let grant = LeaseGrant::new(
        LockName::new("driver/panics").expect("valid"),
        FencingToken(10),
        OwnerId::random(),
        Instant::now(),
        Arc::new(PanickingHandle),
    );
    let bad = Lease::new(grant, &opts);
    lost_at(&bad, Duration::from_millis(250)).await.expect("the panicking lease's lost signal fires");
    let reason = bad.lost().reason().unwrap_or_default().to_owned();
    assert!(reason.contains("renewal panicked"), "lost for another reason: {reason}");
    others_go_on(&others, &opts).await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_lost_hook_and_a_hanging_renewal_delay_no_other_lease() {
    let opts = AcquireOptions::new(Duration::from_millis(300));
    let others = healthy(3, &opts);
    // Expires by time at 300 ms, calling its panicking `lost` hook from the driver.
    let quiet = Server::new(Answer::Renewed);
    let expiring = lease(20, &quiet, &opts.clone().auto_renew(false).events(Arc::new(Panicky { on_renewed: false })));
    // Renews into a renewal that never answers.
    let hanging = Server::new(Answer::Hang);
    let stalled = lease(21, &hanging, &opts);
    let lost = lost_at(&expiring, Duration::from_millis(400)).await.expect("lost at valid_until");
    assert!(lost.elapsed() < Duration::from_millis(400));
    lost_at(&stalled, Duration::from_millis(400)).await.expect("a hanging renewal loses its lease at valid_until");
    others_go_on(&others, &opts).await;
}
