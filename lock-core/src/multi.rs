//! Several locks at once (docs/contract.md §5.5): every caller takes the names in one global
//! order, so two callers asking for the same names in different orders never deadlock (the
//! classic lock-ordering rule); one deadline covers the whole set; a failure releases what was
//! already taken.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::{AcquireOptions, DistributedLock, Lease, LockError, LockName, WaitPolicy};

/// Acquires every name in `names` or none of them.
///
/// - Names are taken in byte order of the name, whatever order the caller gives, so callers
///   that overlap can not wait on each other in a cycle.
/// - `options.wait` is one budget for the whole set: each name waits only for what is left of it.
/// - If any name cannot be had (timeout, error, the future is dropped), the leases already taken
///   are released before the error is returned (or in the background, on drop), at once even
///   under `hold_at_least` (no job ran under a partial set); a clean-up still going on at the
///   deadline (a slow server) finishes in the background rather than stretch the caller's wait.
/// - The leases come back in the caller's order. A name given twice is `InvalidOptions`: locks
///   are not reentrant, so it would wait on itself.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::{acquire_all, AcquireOptions, LockName, MemoryLock};
/// let lock = MemoryLock::new();
/// let names = [LockName::new("accounts/b")?, LockName::new("accounts/a")?];
/// let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(1));
/// let leases = acquire_all(&lock, &names, &opts).await?;
/// assert_eq!(leases[0].name().as_str(), "accounts/b");
/// for lease in leases {
///     lease.release().await?;
/// }
/// # Ok(()) }
/// ```
pub async fn acquire_all(
    lock: &dyn DistributedLock,
    names: &[LockName],
    options: &AcquireOptions,
) -> Result<Vec<Lease>, LockError> {
    let distinct: BTreeSet<&str> = names.iter().map(LockName::as_str).collect();
    if distinct.len() != names.len() {
        return Err(LockError::invalid_options(
            "acquire_all got the same name twice; locks are not reentrant, so pass each name once",
        ));
    }
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].as_str().as_bytes().cmp(names[b].as_str().as_bytes()));
    let deadline = options.wait.deadline(Instant::now());
    let mut taken: Vec<(usize, Lease)> = Vec::with_capacity(names.len());
    for i in order {
        let opts = match (options.wait, deadline) {
            (WaitPolicy::For(_), Some(d)) => {
                let left = d.saturating_duration_since(Instant::now());
                options.clone().wait_policy(if left.is_zero() { WaitPolicy::NoWait } else { WaitPolicy::For(left) })
            }
            _ => options.clone(),
        };
        match lock.acquire(&names[i], &opts).await {
            Ok(lease) => taken.push((i, lease)),
            Err(e) => {
                release_all(taken, deadline).await;
                return Err(e);
            }
        }
    }
    taken.sort_by_key(|(i, _)| *i);
    Ok(taken.into_iter().map(|(_, l)| l).collect())
}

/// How long past the caller's deadline the clean-up of a failed set may keep the caller: a round
/// trip on a busy server (50 ms was not enough for PostgreSQL's release and hand-on under a loaded
/// test run), so that on a healthy server the names are free when the error returns.
const CLEANUP_GRACE: Duration = Duration::from_millis(500);

/// Releases the leases of a set that was never all held: at once, whatever `hold_at_least`
/// says (no job ran under them), side by side, and waiting for them no later than the
/// deadline (or [`CLEANUP_GRACE`] from now, if that is later); releases still going on then
/// finish in the background (a dropped release moves to a task, a dropped lease releases
/// itself). Errors are ignored: each lease also frees itself at its ttl.
async fn release_all(taken: Vec<(usize, Lease)>, deadline: Option<Instant>) {
    for (_, lease) in &taken {
        lease.waive_hold();
    }
    let releases = futures::future::join_all(taken.iter().map(|(_, lease)| lease.release()));
    match deadline {
        Some(deadline) => {
            let until = deadline.max(Instant::now() + CLEANUP_GRACE);
            let _ = tokio::time::timeout_at(until, releases).await;
        }
        None => drop(releases.await),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::MemoryLock;

    fn names(raw: &[&str]) -> Vec<LockName> {
        raw.iter().map(|n| LockName::new(*n).expect("valid")).collect()
    }

    /// A lock, another client of its server holding `m` under the returned lease, and options
    /// that wait `wait`: the set that names `m` times out.
    async fn m_held_by_another(wait: Duration) -> (MemoryLock, MemoryLock, AcquireOptions, Lease) {
        let lock = MemoryLock::new();
        let other = lock.client();
        let opts = AcquireOptions::new(Duration::from_secs(5)).wait(wait);
        let held = other.acquire(&names(&["m"])[0], &opts).await.expect("free");
        (lock, other, opts, held)
    }

    #[tokio::test]
    async fn duplicate_names_are_refused() {
        let lock = MemoryLock::new();
        let opts = AcquireOptions::new(Duration::from_secs(5));
        let r = acquire_all(&lock, &names(&["a", "b", "a"]), &opts).await;
        assert!(matches!(r, Err(LockError::InvalidOptions { .. })), "{r:?}");
    }

    #[tokio::test]
    async fn a_busy_name_releases_the_others_and_times_out_within_the_one_budget() {
        let (lock, other, opts, held) = m_held_by_another(Duration::from_millis(150)).await;
        let t = Instant::now();
        let r = acquire_all(&lock, &names(&["z", "m", "a"]), &opts).await;
        assert!(matches!(r, Err(LockError::Timeout { .. })), "{r:?}");
        assert!(t.elapsed() < Duration::from_millis(600), "one budget for the set: {:?}", t.elapsed());
        for n in names(&["a", "z"]) {
            assert!(other.try_acquire(&n, &opts).await.expect("answers").is_some(), "{n} was left held");
        }
        held.release().await.expect("release");
    }

    #[tokio::test]
    async fn a_failed_set_under_hold_at_least_frees_its_names_at_once() {
        let (lock, other, opts, held) = m_held_by_another(Duration::from_millis(100)).await;
        let hold = opts.clone().hold_at_least(Duration::from_secs(30));
        let r = acquire_all(&lock, &names(&["z", "m", "a"]), &hold).await;
        assert!(matches!(r, Err(LockError::Timeout { .. })), "{r:?}");
        // No job ran under the partial set: hold_at_least does not keep it.
        let probe = AcquireOptions::new(Duration::from_secs(5));
        assert!(other.try_acquire(&names(&["a"])[0], &probe).await.expect("answers").is_some(), "a kept until t0 + d");
        held.release().await.expect("release");
    }

    #[tokio::test]
    async fn opposite_orders_do_not_deadlock() {
        let lock = Arc::new(MemoryLock::new());
        let opts = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
        let mut tasks = Vec::new();
        for order in [["x", "y"], ["y", "x"]] {
            let (lock, opts) = (Arc::new(lock.client()), opts.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let leases = acquire_all(&*lock, &names(&order), &opts).await?;
                    tokio::task::yield_now().await;
                    for l in leases {
                        l.release().await?;
                    }
                }
                Ok::<_, LockError>(())
            }));
        }
        for t in tasks {
            t.await.expect("joined").expect("no timeout: no deadlock");
        }
    }
}
