//! The other lock kinds of docs/contract.md §5: read-write locks and semaphores. Each case runs only for a
//! backend whose capabilities declare the kind (and fails if the fixture then offers no client
//! of that kind); otherwise it is not_applicable, with the capability as the reason.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{DistributedRwLock, DistributedSemaphore, FencingToken, Lease, LockError};
use tokio::time::{timeout, Instant};

use super::{ensure, fail, ms, CaseError, CaseResult, Ctx};
use crate::Fixture;

pub(super) async fn rw_client(cx: &Ctx<'_>) -> Result<Arc<dyn DistributedRwLock>, CaseError> {
    promised(cx.fx.rw_client().await, "rw_lock", "rw")
}

pub(super) async fn semaphore_client(cx: &Ctx<'_>) -> Result<Arc<dyn DistributedSemaphore>, CaseError> {
    promised(cx.fx.semaphore_client().await, "semaphore", "semaphore")
}

/// The fixture's `kind` client the capability `cap` promises: none fails the case, one the
/// fixture could not make skips it.
fn promised<C>(made: Result<Option<C>, LockError>, cap: &str, kind: &str) -> Result<C, CaseError> {
    match made {
        Ok(Some(c)) => Ok(c),
        Ok(None) => {
            fail!("the backend declares {cap} = true but the fixture offers no {kind} client (Fixture::{kind}_client)")
        }
        Err(e) => Err(CaseError::Skipped(format!("the fixture could not make its {kind} client: {e}"))),
    }
}

/// Readers share, a writer is alone, a queued writer is not starved by later readers, and a
/// writer's token exceeds every earlier token; then several clients mix reads and writes while
/// a shared cell checks that no writer ever overlaps anyone.
pub async fn rw_lock(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "rw_lock").await?;
    if !cx.caps.rw_lock {
        return Err(CaseError::NotApplicable("the backend declares rw_lock = false".into()));
    }
    let (a, b, w) = (rw_client(&cx).await?, rw_client(&cx).await?, rw_client(&cx).await?);
    let name = cx.name("rw")?;
    let wait = cx.ttl() * 4;
    let r1 = a.acquire_read(&name, &cx.opts(wait)).await?;
    let r2 = timeout(wait, b.acquire_read(&name, &cx.opts(wait)))
        .await
        .map_err(|_| CaseError::Failed("a second reader waited although only a reader held the lock".into()))??;
    ensure!(r1.is_valid() && r2.is_valid(), "two readers should hold at once");
    ensure!(w.try_acquire_write(&name, &cx.opts(wait)).await?.is_none(), "a writer got in while two readers held");

    let writer = {
        let (w, name, opts) = (Arc::clone(&w), name.clone(), cx.opts(wait * 2));
        tokio::spawn(async move { w.acquire_write(&name, &opts).await })
    };
    // Give the writer time to queue, then a later reader must not overtake it.
    tokio::time::sleep(cx.ttl() / 5).await;
    if let Some(late) = a.try_acquire_read(&name, &cx.opts(wait)).await? {
        let _ = late.release().await;
        fail!("a reader arriving after a waiting writer got in first: writers can be starved");
    }
    r1.release().await?;
    r2.release().await?;
    let released = Instant::now();
    let wl = granted_within(writer, wait * 2, "writer", "the readers' release").await?;
    let handoff = released.elapsed();
    ensure!(
        wl.token() > r1.token() && wl.token() > r2.token(),
        "writer token {} not above readers' {} / {}",
        wl.token(),
        r1.token(),
        r2.token()
    );
    ensure!(a.try_acquire_read(&name, &cx.opts(wait)).await?.is_none(), "a reader got in while the writer held");
    ensure!(b.try_acquire_write(&name, &cx.opts(wait)).await?.is_none(), "a second writer got in");
    wl.release().await?;

    // Mixed load: readers count up, a writer must find the cell empty and stay alone. Tokens
    // (docs/contract.md §2, shared holders): every writer's token exceeds every token granted before it, and
    // no token repeats; co-readers' tokens need not follow the order of their grants.
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(Mutex::new(Vec::<FencingToken>::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let c = rw_client(&cx).await?;
        let (readers, writers, granted, name, opts) =
            (Arc::clone(&readers), Arc::clone(&writers), Arc::clone(&granted), name.clone(), cx.opts(wait * 3));
        tasks.push(tokio::spawn(async move {
            let mut violations = Vec::new();
            for round in 0..4 {
                let write = (i + round) % 3 == 0;
                let lease =
                    if write { c.acquire_write(&name, &opts).await? } else { c.acquire_read(&name, &opts).await? };
                // Recorded while held: every grant before a writer's has been recorded, since
                // its holder recorded before releasing and the writer waited for that release.
                if let Some(v) = record_grant(&granted, lease.token(), write) {
                    violations.push(format!("{} {i}: {v}", if write { "writer" } else { "reader" }));
                }
                violations.extend(hold_counted(write, i, &readers, &writers).await);
                lease.release().await?;
            }
            Ok::<_, LockError>(violations)
        }));
    }
    let violations = violations_of(tasks, wait * 6, "a mixed-load task", "the mixed read/write load").await?;
    ensure!(violations.is_empty(), "exclusion or token order broken: {violations:?}");
    let tokens = granted.lock().map(|g| g.len()).unwrap_or_default();
    ensure!(tokens == 16, "{tokens} grants recorded, expected 16");
    Ok(format!(
        "readers shared, writer not starved, handed over {} ms after the readers left; 16 mixed holds clean, \
         distinct tokens, each writer's above all earlier",
        ms(handoff)
    ))
}

/// Holds for a moment as writer or reader `i`, counted in `writers` or `readers`; says so when
/// a writer was not alone or a reader was beside a writer.
async fn hold_counted(write: bool, i: usize, readers: &AtomicUsize, writers: &AtomicUsize) -> Option<String> {
    let overlap = if write {
        (writers.fetch_add(1, Ordering::SeqCst) != 0 || readers.load(Ordering::SeqCst) != 0)
            .then(|| format!("writer {i} overlapped another holder"))
    } else {
        readers.fetch_add(1, Ordering::SeqCst);
        (writers.load(Ordering::SeqCst) != 0).then(|| format!("reader {i} overlapped a writer"))
    };
    tokio::time::sleep(Duration::from_millis(15)).await;
    if write { writers } else { readers }.fetch_sub(1, Ordering::SeqCst);
    overlap
}

/// The lease the spawned `who` waits for, granted within `bound` of `after`.
async fn granted_within(
    task: tokio::task::JoinHandle<Result<Lease, LockError>>,
    bound: Duration,
    who: &str,
    after: &str,
) -> Result<Lease, CaseError> {
    match timeout(bound, task).await {
        Ok(Ok(r)) => Ok(r?),
        Ok(Err(e)) => fail!("the {who} task failed: {e}"),
        Err(_) => fail!("the {who} was not granted within {bound:?} of {after}"),
    }
}

/// Joins the load's tasks within `bound` and gathers the violations they saw; `task` and `load`
/// name them in failures ("a churn task", "the permit churn").
async fn violations_of(
    tasks: Vec<tokio::task::JoinHandle<Result<Vec<String>, LockError>>>,
    bound: Duration,
    task: &str,
    load: &str,
) -> Result<Vec<String>, CaseError> {
    let mut violations = Vec::new();
    for t in tasks {
        match timeout(bound, t).await {
            Ok(Ok(Ok(v))) => violations.extend(v),
            Ok(Ok(Err(e))) => return Err(e.into()),
            Ok(Err(e)) => fail!("{task} failed: {e}"),
            Err(_) => fail!("{load} did not finish within {bound:?}"),
        }
    }
    Ok(violations)
}

/// Records a grant's token; says what is wrong when the token repeats an earlier one, or when a
/// writer's token (`exclusive`) is not above every token granted before it (docs/contract.md §2).
fn record_grant(granted: &Mutex<Vec<FencingToken>>, token: FencingToken, exclusive: bool) -> Option<String> {
    let mut granted = granted.lock().unwrap_or_else(|e| e.into_inner());
    let problem = if granted.contains(&token) {
        Some(format!("token {token} was already granted"))
    } else if exclusive && granted.iter().any(|t| *t >= token) {
        Some(format!("token {token} is not above every earlier token (max {:?})", granted.iter().max()))
    } else {
        None
    };
    granted.push(token);
    problem
}

/// At most `n` holders at once, each with its own lease and a fresh, increasing token; a
/// waiter gets a permit when one is released; a vanished holder's permit frees after its ttl;
/// users must agree on `n`.
pub async fn semaphore(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "semaphore").await?;
    if !cx.caps.semaphore {
        return Err(CaseError::NotApplicable("the backend declares semaphore = false".into()));
    }
    let wait = cx.ttl() * 4;
    let mut clients = Vec::new();
    for _ in 0..=SEMAPHORE_N {
        clients.push(semaphore_client(&cx).await?);
    }
    let (held, tokens, handoff) = semaphore_limit_and_handoff(&cx, &clients, wait).await?;
    let freed = semaphore_vanished_permit(&cx, &clients, wait).await?;
    for l in held {
        l.release().await?;
    }
    semaphore_churn(&cx, &clients, wait).await?;
    Ok(format!(
        "{SEMAPHORE_N} permits, tokens {tokens:?}, hand-off {} ms, vanished permit freed after {} ms; churn of {} \
         grants clean",
        ms(handoff),
        ms(freed),
        clients.len() * 3
    ))
}

/// The permits of the `semaphore` case.
const SEMAPHORE_N: u32 = 3;

/// `N` clients take the `N` permits, with increasing tokens; the next is refused, and one
/// asking for another `n` is `InvalidOptions`; it then waits, and gets a permit when one is
/// released, with a token above all. The permits held (still `N`), their first tokens and how
/// long the hand-off took.
async fn semaphore_limit_and_handoff(
    cx: &Ctx<'_>,
    clients: &[Arc<dyn DistributedSemaphore>],
    wait: Duration,
) -> Result<(Vec<Lease>, Vec<FencingToken>, Duration), CaseError> {
    const N: u32 = SEMAPHORE_N;
    let name = cx.name("sem")?;
    let mut held = Vec::new();
    let mut tokens: Vec<FencingToken> = Vec::new();
    for c in clients.iter().take(N as usize) {
        let l = c.try_acquire_permit(&name, N, &cx.opts(wait)).await?;
        let Some(l) = l else { fail!("permit {} of {N} was refused", held.len() + 1) };
        ensure!(tokens.last().is_none_or(|t| l.token() > *t), "tokens not increasing: {tokens:?} then {}", l.token());
        tokens.push(l.token());
        held.push(l);
    }
    let extra = &clients[N as usize];
    ensure!(extra.try_acquire_permit(&name, N, &cx.opts(wait)).await?.is_none(), "a permit beyond {N} was granted");
    match extra.try_acquire_permit(&name, N + 1, &cx.opts(wait)).await {
        Err(LockError::InvalidOptions { .. }) => {}
        Ok(Some(l)) => {
            let _ = l.release().await;
            fail!("a client asking for {} permits got one while {N} are in use", N + 1);
        }
        other => fail!("disagreeing on the number of permits should be InvalidOptions, got {other:?}"),
    }
    let waiter = {
        let (c, name, opts) = (Arc::clone(extra), name.clone(), cx.opts(wait * 2));
        tokio::spawn(async move { c.acquire_permit(&name, N, &opts).await })
    };
    tokio::time::sleep(cx.ttl() / 5).await;
    let first = held.remove(0);
    first.release().await?;
    let released = Instant::now();
    let got = granted_within(waiter, wait * 2, "waiter", "a release").await?;
    let handoff = released.elapsed();
    ensure!(tokens.iter().all(|t| got.token() > *t), "the new permit's token {} is not above {tokens:?}", got.token());
    ensure!(
        clients[0].try_acquire_permit(&name, N, &cx.opts(wait)).await?.is_none(),
        "a permit beyond {N} after the hand-off"
    );
    held.push(got);
    Ok((held, tokens, handoff))
}

/// A holder that stops renewing loses its permit after the ttl (not much before), to a taker
/// with a greater token; how long after the holder's acquire the taker got it.
async fn semaphore_vanished_permit(
    cx: &Ctx<'_>,
    clients: &[Arc<dyn DistributedSemaphore>],
    wait: Duration,
) -> Result<Duration, CaseError> {
    let name = cx.name("sem-expiry")?;
    let vanishing = clients[0].acquire_permit(&name, 1, &cx.opts(wait).auto_renew(false)).await?;
    let t0 = Instant::now();
    let next = clients[1].acquire_permit(&name, 1, &cx.opts(cx.expiry() * 3)).await?;
    let freed = t0.elapsed();
    ensure!(next.token() > vanishing.token(), "token after expiry {} not above {}", next.token(), vanishing.token());
    ensure!(
        freed + Duration::from_millis(5) >= cx.ttl() / 2,
        "a vanished permit was taken after only {} ms (ttl {} ms)",
        ms(freed),
        ms(cx.ttl())
    );
    next.release().await?;
    Ok(freed)
}

/// Churn: clients take and return permits at once; never more than `N - 1` holders, and no
/// token repeats (docs/contract.md §2: tokens of shared holders never repeat).
async fn semaphore_churn(
    cx: &Ctx<'_>,
    clients: &[Arc<dyn DistributedSemaphore>],
    wait: Duration,
) -> Result<(), CaseError> {
    const N: u32 = SEMAPHORE_N;
    let name = cx.name("sem-churn")?;
    let holders = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(Mutex::new(Vec::<FencingToken>::new()));
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let (c, holders, granted, name, opts) =
            (Arc::clone(c), Arc::clone(&holders), Arc::clone(&granted), name.clone(), cx.opts(wait * 3));
        tasks.push(tokio::spawn(async move {
            let mut violations = Vec::new();
            for _ in 0..3 {
                let lease = c.acquire_permit(&name, N - 1, &opts).await?;
                if holders.fetch_add(1, Ordering::SeqCst) >= (N - 1) as usize {
                    violations.push(format!("client {i} was a holder beyond the {} permits", N - 1));
                }
                if let Some(v) = record_grant(&granted, lease.token(), false) {
                    violations.push(format!("client {i}: {v}"));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                lease.release().await?;
            }
            Ok::<_, LockError>(violations)
        }));
    }
    let violations = violations_of(tasks, wait * 6, "a churn task", "the permit churn").await?;
    ensure!(violations.is_empty(), "permit churn broken: {violations:?}");
    Ok(())
}
