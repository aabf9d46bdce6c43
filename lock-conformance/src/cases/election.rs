//! Leader election (`lock_core::Election`, docs/contract.md §5.8) on the backend under test:
//! five candidates under the nemesis never have two valid leaders at once and their epochs
//! strictly rise; a resignation hands over promptly; observers converge on the current leader
//! within one ttl of each change (where the backend declares `inspect`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use lock_core::{DistributedLock, Election, FencedRegister, Holder, LockError, WakeMethod};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::nemesis::{self, inject_faults, overlaps, Hooks, Window};
use super::{ensure, fail, ms, CaseError, CaseResult, Ctx};
use crate::{ClientLink, Fixture};

const CANDIDATES: usize = 5;

fn candidate(i: usize) -> Result<Holder, CaseError> {
    Holder::new(format!("candidate-{i}")).map_err(CaseError::from)
}

/// Five elections on one name, each over its own client (the first ones linked, when the
/// fixture can break a client's network).
async fn candidates(
    cx: &Ctx<'_>,
    linked: bool,
    wait: Duration,
) -> Result<(Vec<Election>, Vec<Arc<dyn ClientLink>>), CaseError> {
    let name = cx.name("leader")?;
    let (mut out, mut links) = (Vec::new(), Vec::new());
    for i in 0..CANDIDATES {
        let client: Arc<dyn DistributedLock> = if linked && i < 3 {
            match cx.linked().await {
                Ok((c, l)) => {
                    links.push(l);
                    c
                }
                Err(CaseError::NotApplicable(_)) => cx.client().await?,
                Err(e) => return Err(e),
            }
        } else {
            cx.client().await?
        };
        out.push(Election::new(client, name.clone(), candidate(i)?, cx.opts(wait)));
    }
    Ok((out, links))
}

/// How soon a waiting candidate must lead after a resignation: the `wake_latency` bound.
fn hand_over_bound(cx: &Ctx<'_>) -> Duration {
    match cx.caps.wake {
        WakeMethod::Poll => cx.ttl() + Duration::from_millis(300),
        _ => cx.ttl() / 2 + Duration::from_millis(200),
    }
}

/// Five candidates campaign, lead for a random while and resign (or lose leadership) while
/// faults are injected; no two leadership windows overlap, epochs strictly rise in the order
/// leaders were elected, and a fenced register accepts every valid leader's epoch.
pub async fn election_nemesis(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "election_nemesis").await?;
    let seed = nemesis::seed();
    eprintln!("election_nemesis on {}: seed {seed} (DLOCK_NEMESIS_SEED={seed} replays it)", fx.backend());
    let mut rng = StdRng::seed_from_u64(seed);
    let (run_for, ttl) = (nemesis::duration(), cx.ttl());
    let (elections, links) = candidates(&cx, true, ttl * 2).await?;
    let server = fx.server();
    let restarts = server.as_ref().is_some_and(|s| s.persistent()) && cx.caps.durable_leases && cx.caps.durable_fencing;
    let register = Arc::new(FencedRegister::new(0u64));
    let windows = Arc::new(Mutex::new(Vec::<Window>::new()));
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + run_for;
    let stop = Arc::new(nemesis::Stop::for_run(deadline, &cx));
    let mut workers = Vec::new();
    for (i, election) in elections.into_iter().enumerate() {
        let (register, windows, violations, errors, stop) =
            (register.clone(), windows.clone(), violations.clone(), errors.clone(), stop.clone());
        let mut wrng = StdRng::seed_from_u64(seed.wrapping_add(1 + i as u64));
        workers.push(tokio::spawn(async move {
            while stop.go_on() {
                let leadership = match election.campaign().await {
                    Ok(l) => l,
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                stop.held();
                let start = Instant::now();
                let epoch = leadership.epoch().get();
                let owner = leadership.lease().owner();
                match register.write_as(owner, leadership.epoch(), |v| std::mem::replace(v, epoch)) {
                    Ok(prev) if prev >= epoch && prev != 0 => violations
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("candidate {i} led with epoch {epoch} after epoch {prev}")),
                    Err(stale) if leadership.is_valid() => {
                        violations.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                            "candidate {i} was a valid leader with epoch {epoch} but the register had seen {}",
                            stale.highest
                        ))
                    }
                    _ => {}
                }
                let hold = Duration::from_millis(wrng.random_range(0..=(ttl.as_millis() as u64 / 2).max(1)));
                tokio::select! {
                    _ = tokio::time::sleep(hold) => {}
                    _ = leadership.lost().fired() => {}
                }
                let end = Instant::now().min(leadership.lease().valid_until());
                if end > start {
                    let w = Window { lock: 0, client: i, token: epoch, start, end };
                    windows.lock().unwrap_or_else(|e| e.into_inner()).push(w);
                }
                if leadership.resign().await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let hooks = Hooks { links: &links, server, restarts_allowed: restarts, deployment: fx.deployment() };
    let faults = inject_faults(&mut rng, deadline, run_for, ttl, &hooks).await;
    stop.healed();
    let faults = faults?;
    nemesis::join_workers(workers, ttl, &cx, "a candidate", seed).await?;
    let mut windows = windows.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut violations = violations.lock().unwrap_or_else(|e| e.into_inner()).clone();
    violations.extend(overlaps(&mut windows).into_iter().map(|v| format!("two leaders at once: {v}")));
    // `overlaps` sorted the windows by start: the epochs must rise in that order.
    for pair in windows.windows(2) {
        if pair[1].token <= pair[0].token {
            violations.push(format!(
                "candidate {} led with epoch {} after candidate {} had led with epoch {}",
                pair[1].client, pair[1].token, pair[0].client, pair[0].token
            ));
        }
    }
    nemesis::no_violations(seed, &violations, &faults)?;
    ensure!(
        !windows.is_empty(),
        "seed {seed}: nobody led in {} ms nor in the grace after the faults healed: the run proves nothing",
        ms(run_for)
    );
    Ok(format!(
        "seed {seed}: {} leaderships of {CANDIDATES} candidates ({} linked), {} faults ({}), {} client errors",
        windows.len(),
        links.len(),
        faults.len(),
        faults.iter().take(6).cloned().collect::<Vec<_>>().join(", "),
        errors.load(Ordering::Relaxed)
    ))
}

/// What an observer reported, and when: the leader's holder id and epoch, or nobody.
type Sighting = (Instant, Option<(Option<String>, u64)>);

/// One term of office, as a candidate saw it.
#[derive(Clone, Debug)]
struct Term {
    who: usize,
    epoch: u64,
    elected: Instant,
    /// Taken just before `resign()` was called.
    resigning: Instant,
}

/// Five candidates campaign at once; each leads for `hold` and resigns. Returns the terms in
/// the order they began, having checked `leader()` during each one (when `check_leader`).
async fn terms(elections: Vec<Election>, hold: Duration, check_leader: bool) -> Result<Vec<Term>, CaseError> {
    let mut tasks = Vec::new();
    for (who, election) in elections.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let leadership = election.campaign().await?;
            let elected = Instant::now();
            let epoch = leadership.epoch();
            if check_leader {
                let seen = election.leader().await?;
                let seen = seen.as_ref().map(|h| (h.holder.clone(), h.token));
                let me = (Some(format!("candidate-{who}")), epoch);
                if seen.as_ref() != Some(&me) && leadership.is_valid() {
                    return Ok(Err(format!("candidate {who} leads with epoch {epoch} but leader() says {seen:?}")));
                }
            }
            tokio::time::sleep(hold).await;
            let resigning = Instant::now();
            leadership.resign().await?;
            Ok::<_, LockError>(Ok(Term { who, epoch: epoch.get(), elected, resigning }))
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(Ok(term))) => out.push(term),
            Ok(Ok(Err(wrong))) => return Err(CaseError::Failed(wrong)),
            Ok(Err(e)) => return Err(e.into()),
            Err(e) => fail!("a candidate panicked: {e}"),
        }
    }
    out.sort_by_key(|t| t.elected);
    Ok(out)
}

/// Each resignation hands over to a waiting candidate within the backend's wake bound; no term
/// begins before the previous leader began resigning; epochs rise.
pub async fn election_resign_hands_over(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "election_resign_hands_over").await?;
    let (elections, _) = candidates(&cx, false, cx.ttl() * 20).await?;
    let bound = hand_over_bound(&cx);
    let terms = terms(elections, cx.ttl() / 10, false).await?;
    ensure!(terms.len() == CANDIDATES, "{} of {CANDIDATES} candidates led", terms.len());
    let mut worst = Duration::ZERO;
    for pair in terms.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        ensure!(
            b.elected >= a.resigning,
            "candidate {} was elected {} ms before candidate {} resigned",
            b.who,
            ms(a.resigning - b.elected),
            a.who
        );
        ensure!(b.epoch > a.epoch, "epoch {} after epoch {}", b.epoch, a.epoch);
        worst = worst.max(b.elected - a.resigning);
    }
    ensure!(worst <= bound, "a hand-over took {} ms (bound {} ms for {:?})", ms(worst), ms(bound), cx.caps.wake);
    Ok(format!("{} hand-overs, slowest {} ms (bound {} ms)", CANDIDATES - 1, ms(worst), ms(bound)))
}

/// An observer (its own client) reports every leader — holder id and epoch — within one ttl of
/// its election, and nobody within one ttl of the last resignation; `leader()` names the
/// current leader. Needs `Capabilities::inspect`.
pub async fn election_observers_converge(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "election_observers_converge").await?;
    if !cx.caps.inspect {
        return Err(CaseError::NotApplicable(
            "the backend does not declare Capabilities::inspect, so Election::leader and observe answer Unsupported"
                .into(),
        ));
    }
    let ttl = cx.ttl();
    let (elections, _) = candidates(&cx, false, ttl * 20).await?;
    let observer = Election::new(cx.client().await?, cx.name("leader")?, candidate(99)?, cx.opts(ttl));
    let seen: Arc<Mutex<Vec<Sighting>>> = Arc::default();
    let watching = {
        let seen = seen.clone();
        let mut stream = Box::pin(observer.observe());
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                let now = Instant::now();
                match item {
                    Ok(leader) => seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((now, leader.map(|h| (h.holder, h.token.get())))),
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
    };
    let terms = terms(elections, ttl, true).await?;
    let last_resign = terms.last().map(|t| t.resigning).unwrap_or_else(Instant::now);
    tokio::time::sleep((last_resign + ttl).saturating_duration_since(Instant::now())).await;
    watching.abort();
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut slowest = Duration::ZERO;
    for t in &terms {
        let me = Some((Some(format!("candidate-{}", t.who)), t.epoch));
        match seen.iter().find(|(_, l)| *l == me) {
            Some((at, _)) => {
                let lag = at.saturating_duration_since(t.elected);
                ensure!(
                    lag <= ttl,
                    "the observer saw candidate {} (epoch {}) {} ms after its election (bound: one ttl, {} ms)",
                    t.who,
                    t.epoch,
                    ms(lag),
                    ms(ttl)
                );
                slowest = slowest.max(lag);
            }
            None => {
                fail!("the observer never reported candidate {} (epoch {}) as leader; it saw {seen:?}", t.who, t.epoch)
            }
        }
    }
    match seen.last() {
        Some((at, None)) if *at <= last_resign + ttl => {}
        other => fail!(
            "within one ttl of the last resignation the observer did not report 'nobody leads': last item {other:?}"
        ),
    }
    Ok(format!("{} leaders observed, slowest {} ms after election (ttl {} ms)", terms.len(), ms(slowest), ms(ttl)))
}

/// How soon an observer that never polls must report a change the backend notifies.
const NOTIFIED_BOUND: Duration = Duration::from_secs(2);

/// What an observer task forwards: each report, or the error that ended it.
type Report = Result<Sighting, LockError>;

/// The next leader the observer task reports, within `bound`; a failure names `what` was awaited.
async fn next_sighting(
    reports: &mut tokio::sync::mpsc::UnboundedReceiver<Report>,
    bound: Duration,
    what: &str,
) -> Result<Sighting, CaseError> {
    match tokio::time::timeout(bound, reports.recv()).await {
        Ok(Some(Ok(sighting))) => Ok(sighting),
        Ok(Some(Err(e))) => fail!("the observer failed while waiting for {what}: {e}"),
        Ok(None) => fail!("the observer's stream ended while waiting for {what}"),
        Err(_) => fail!(
            "the observer reported nothing within {} ms while waiting for {what}: it polls once an hour, so the \
             backend's change notification (Capabilities::notify_changes, DistributedLock::watch_changes) did not \
             reach it",
            ms(bound)
        ),
    }
}

/// An observer on its own client that polls once an hour still reports every change in time
/// (docs/contract.md §5.8, `Capabilities::notify_changes`): leader A resigns while B waits, so
/// the observer must report B; then B resigns with nobody waiting, and the observer must report
/// nobody. Only the backend's notifications can wake it (the candidates use other clients).
pub async fn election_observers_notified(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "election_observers_notified").await?;
    if !cx.caps.notify_changes || !cx.caps.inspect {
        return Err(CaseError::NotApplicable(
            "the backend does not declare Capabilities::notify_changes (with inspect): its observers poll, which \
             election_observers_converge checks"
                .into(),
        ));
    }
    let ttl = cx.ttl();
    let name = cx.name("leader")?;
    let a = Election::new(cx.client().await?, name.clone(), candidate(0)?, cx.opts(ttl * 20));
    let b = Election::new(cx.client().await?, name.clone(), candidate(1)?, cx.opts(ttl * 20));
    let observer =
        Election::new(cx.client().await?, name, candidate(99)?, cx.opts(ttl)).observe_every(Duration::from_secs(3600));
    let a_leads = a.campaign().await?;
    let a_key = Some((Some("candidate-0".to_owned()), a_leads.epoch().get()));
    // The stream is polled all along (as an application would), so that it is waiting, not
    // reading, when the changes happen: each poll of an observe stream reads once right away.
    let (tx, mut stream) = tokio::sync::mpsc::unbounded_channel::<Report>();
    let mut reports = Box::pin(observer.observe());
    let watching = tokio::spawn(async move {
        while let Some(item) = reports.next().await {
            let item = item.map(|leader| (Instant::now(), leader.map(|h| (h.holder, h.token.get()))));
            if tx.send(item).is_err() {
                return;
            }
        }
    });
    let _stop = AbortOnDrop(watching);
    let (_, first) = next_sighting(&mut stream, cx.request_timeout() * 2, "its first report").await?;
    ensure!(first == a_key, "the observer's first report was {first:?} while candidate 0 led ({a_key:?})");
    let b_task = tokio::spawn(async move { b.campaign().await });
    // Let B queue behind A (the hand-over is then a grant to a waiter, which every backend
    // that notifies reports), then resign.
    tokio::time::sleep(Duration::from_millis(200)).await;
    a_leads.resign().await?;
    let b_leads = match tokio::time::timeout(hand_over_bound(&cx) + ttl, b_task).await {
        Ok(Ok(r)) => r?,
        Ok(Err(e)) => fail!("candidate 1's campaign panicked: {e}"),
        Err(_) => fail!("candidate 1 was not elected after candidate 0 resigned"),
    };
    let elected = Instant::now();
    let b_key = Some((Some("candidate-1".to_owned()), b_leads.epoch().get()));
    let mut lag_b = None;
    while lag_b.is_none() {
        let (at, seen) = next_sighting(&mut stream, NOTIFIED_BOUND, "candidate 1 to lead").await?;
        ensure!(seen == b_key || seen.is_none(), "the observer reported {seen:?}; expected nobody or {b_key:?}");
        if seen == b_key {
            lag_b = Some(at.saturating_duration_since(elected));
        }
    }
    let resigning = Instant::now();
    b_leads.resign().await?;
    let (at, last) = next_sighting(&mut stream, NOTIFIED_BOUND, "nobody to lead after the last resignation").await?;
    ensure!(last.is_none(), "after a release with nobody waiting the observer reported {last:?}, not nobody");
    Ok(format!(
        "observer (polling hourly) saw the hand-over {} ms after the election, the free lock {} ms after the release",
        ms(lag_b.unwrap_or_default()),
        ms(at.saturating_duration_since(resigning))
    ))
}

/// Stops the observer task however the case ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
