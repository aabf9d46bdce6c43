//! Names and inputs: hostile names, invalid names and options, declared lock kinds.

use std::time::Duration;

use lock_core::{AcquireOptions, LockError, LockName, MAX_NAME_LEN};

use super::{ensure, fail, CaseError, CaseResult, Ctx};
use crate::Fixture;

/// Names that break careless key, row or path mappings.
const HOSTILE: &[&str] = &[
    "a/b",
    "../x",
    "..",
    ".",
    "/",
    "//",
    "/abs/path",
    "x/",
    "'; DROP TABLE locks; --",
    "\" OR \"1\"=\"1",
    "'quoted'",
    "back\\slash",
    "%2F%00",
    "{hashtag}",
    "*?[]",
    "a b",
    "ünïcödé 名前 🔒",
    "zookeeper",
    "_c_00000000-0000-0000-0000-000000000000-lock-0000000001",
    "$(echo pwned)",
    "NUL",
];

/// Every hostile name can be acquired, excludes a second client, is released, and none of
/// them collides with another (all are held at once); includes a name of exactly 255 bytes.
pub async fn hostile_names(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "hostile_names").await?;
    let [a, b] = cx.clients().await?;
    let opts = cx.opts(cx.ttl() * 2);
    let prefix = cx.fx.name_prefix();
    // The hostile part comes first (right after the run's prefix), where mappings are most
    // fragile; the run id at the end keeps runs apart.
    let mut names: Vec<String> = HOSTILE.iter().map(|h| format!("{prefix}{h}#{}", cx.run_id())).collect();
    let mut long = format!("{prefix}{}-", cx.run_id());
    while long.len() + "é".len() <= MAX_NAME_LEN {
        long.push('é');
    }
    while long.len() < MAX_NAME_LEN {
        long.push('x');
    }
    ensure!(long.len() == MAX_NAME_LEN, "the suite built a {}-byte name", long.len());
    names.push(long);
    let mut held = Vec::new();
    for raw in &names {
        let name = LockName::new(raw).map_err(|e| CaseError::Failed(format!("valid name {raw:?} rejected: {e}")))?;
        let lease = match a.try_acquire(&name, &opts).await {
            Ok(Some(l)) => l,
            Ok(None) => fail!("name {raw:?} was busy: it collides with an earlier hostile name"),
            Err(e) => fail!("name {raw:?} failed: {e}"),
        };
        match b.try_acquire(&name, &opts).await {
            Ok(None) => {}
            Ok(Some(_)) => fail!("name {raw:?} was granted to two clients at once"),
            Err(e) => fail!("name {raw:?} failed for a second client: {e}"),
        }
        held.push((raw, lease));
    }
    let n = held.len();
    let mut tokens = Vec::new();
    for (raw, lease) in held {
        lease.release().await.map_err(|e| CaseError::Failed(format!("releasing {raw:?}: {e}")))?;
        let name = LockName::new(raw)?;
        match b.try_acquire(&name, &opts).await {
            Ok(Some(l)) => {
                ensure!(l.token() > lease.token(), "name {raw:?}: token {} after {}", l.token(), lease.token());
                tokens.push(l.token().get());
                l.release().await?;
            }
            Ok(None) => fail!("name {raw:?} stayed busy after release"),
            Err(e) => fail!("name {raw:?} failed after release: {e}"),
        }
    }
    Ok(format!("{n} hostile names held at once, including one of {MAX_NAME_LEN} bytes"))
}

/// Invalid names and options are typed errors (`InvalidName`, `InvalidOptions`), never a panic
/// and never a server round trip that hangs.
pub async fn invalid_input(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "invalid_input").await?;
    for bad in [String::new(), "x".repeat(MAX_NAME_LEN + 1), "a\0b".into(), "line\nbreak".into(), "\u{7f}".into()] {
        match LockName::new(&bad) {
            Err(LockError::InvalidName { .. }) => {}
            Ok(_) => fail!("LockName accepted the invalid name {bad:?}"),
            Err(e) => fail!("LockName gave {e} for {bad:?}, not InvalidName"),
        }
    }
    let c = cx.client().await?;
    let name = cx.name("opts")?;
    let base = cx.opts(cx.ttl());
    let mut bad: Vec<(&str, AcquireOptions)> = vec![
        ("zero ttl", base.clone().ttl(Duration::ZERO)),
        ("ttl of u64::MAX seconds", base.clone().ttl(Duration::from_secs(u64::MAX))),
        ("renew_every >= ttl", base.clone().renew_every(cx.ttl() * 2)),
        ("zero request_timeout", base.clone().request_timeout(Duration::ZERO)),
        ("wait of u64::MAX seconds", base.clone().wait(Duration::from_secs(u64::MAX))),
        // Durations near the maximum must be refused, never overflow an `Instant` (a panic).
        ("ttl of Duration::MAX", base.clone().ttl(Duration::MAX)),
        ("wait of Duration::MAX", base.clone().wait(Duration::MAX)),
        ("renew_every of Duration::MAX", base.clone().renew_every(Duration::MAX)),
        ("request_timeout of Duration::MAX", base.clone().request_timeout(Duration::MAX)),
        ("request_timeout of u64::MAX / 4 seconds", base.clone().request_timeout(Duration::from_secs(u64::MAX / 4))),
        ("max_hold of Duration::MAX", base.clone().max_hold(Duration::MAX)),
        ("renew_every above half the ttl", base.clone().renew_every(cx.ttl() * 3 / 4)),
    ];
    if cx.caps.max_ttl < Duration::from_secs(u64::MAX / 2) {
        bad.push(("ttl above max_ttl", base.clone().ttl(cx.caps.max_ttl + Duration::from_secs(1))));
    }
    if cx.caps.min_ttl > Duration::from_millis(1) {
        bad.push(("ttl below min_ttl", base.clone().ttl(cx.caps.min_ttl / 2)));
    }
    for (what, opts) in &bad {
        let r = tokio::time::timeout(cx.request_timeout() * 2, c.acquire(&name, opts)).await;
        match r {
            Ok(Err(LockError::InvalidOptions { .. })) => {}
            Ok(Ok(_)) => fail!("acquire accepted {what}"),
            Ok(Err(e)) => fail!("acquire with {what} gave {e}, not InvalidOptions"),
            Err(_) => fail!("acquire with {what} hung instead of failing"),
        }
        match tokio::time::timeout(cx.request_timeout() * 2, c.try_acquire(&name, opts)).await {
            Ok(Err(LockError::InvalidOptions { .. })) => {}
            Ok(Ok(_)) => fail!("try_acquire accepted {what}"),
            Ok(Err(e)) => fail!("try_acquire with {what} gave {e}, not InvalidOptions"),
            Err(_) => fail!("try_acquire with {what} hung instead of failing"),
        }
    }
    // The lock must still work: nothing was left behind by the rejected calls.
    let l = c.try_acquire(&name, &base).await?;
    ensure!(l.is_some(), "the lock was busy after only rejected calls");
    Ok(format!("{} bad options rejected", bad.len()))
}

/// The declaration is coherent: every declared kind comes with a client of that kind (the
/// `rw_lock` and `semaphore` cases then check the kind itself), and the ttl range is sane.
pub async fn declared_kinds(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "declared_kinds").await?;
    let mut kinds = vec!["exclusive"];
    if cx.caps.rw_lock {
        ensure!(
            matches!(fx.rw_client().await, Ok(Some(_))),
            "the backend declares rw_lock = true but the fixture offers no rw client (Fixture::rw_client)"
        );
        kinds.push("read-write");
    }
    if cx.caps.semaphore {
        ensure!(
            matches!(fx.semaphore_client().await, Ok(Some(_))),
            "the backend declares semaphore = true but the fixture offers no semaphore client (Fixture::semaphore_client)"
        );
        kinds.push("semaphore");
    }
    ensure!(cx.caps.min_ttl <= cx.caps.max_ttl, "min_ttl {:?} > max_ttl {:?}", cx.caps.min_ttl, cx.caps.max_ttl);
    // A declared min_ttl must be usable: longer than its drift plus the clock-offset allowance.
    let allowance = lock_core::clock_drift(cx.caps.min_ttl) + cx.caps.max_clock_offset;
    ensure!(
        cx.caps.min_ttl > allowance,
        "min_ttl {:?} is not above its drift plus max_clock_offset ({:?}): every such lease is refused",
        cx.caps.min_ttl,
        allowance
    );
    ensure!(
        cx.caps.min_ttl <= cx.fx.base_ttl(),
        "the fixture's base_ttl {:?} is below the backend's min_ttl {:?}: raise Fixture::base_ttl",
        cx.fx.base_ttl(),
        cx.caps.min_ttl
    );
    Ok(format!("declared kinds: {}", kinds.join(", ")))
}

/// Long names that share a long prefix are independent locks: names of 200 to 255 bytes that
/// differ only in their last byte, or only in a multibyte character at the end, never collide
/// (a backend that truncates, hashes carelessly or normalises names fails here).
pub async fn long_name_prefixes(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "long_name_prefixes").await?;
    let c = cx.client().await?;
    let opts = cx.opts(cx.ttl()).ttl(cx.ttl() * 4);
    let stem = cx.name("")?.as_str().to_owned();
    // Endings that differ in one byte: ASCII, a 2-byte, a 3-byte and a 4-byte character.
    let endings: &[(&str, &str)] =
        &[("a", "b"), ("\u{e9}", "\u{e8}"), ("\u{4e2d}", "\u{4e2c}"), ("\u{1f512}", "\u{1f513}")];
    let mut pairs = 0;
    for total in [200usize, 230, MAX_NAME_LEN] {
        for (x, y) in endings {
            let pad = total.saturating_sub(stem.len() + x.len());
            let make = |end: &str| LockName::new(format!("{stem}{}{end}", "p".repeat(pad)));
            let (a, b) = match (make(x), make(y)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => fail!("the suite built an invalid {total}-byte name: {e}"),
            };
            ensure!(a.as_str().len() == total.max(stem.len() + x.len()), "name length {} != {total}", a.as_str().len());
            let first = match c.try_acquire(&a, &opts).await? {
                Some(l) => l,
                None => fail!("a fresh {total}-byte name ending in {x:?} was busy"),
            };
            match c.try_acquire(&b, &opts).await? {
                Some(second) => {
                    ensure!(
                        c.try_acquire(&a, &opts).await?.is_none(),
                        "the {total}-byte name ending in {x:?} was free while held"
                    );
                    second.release().await?;
                }
                None => fail!(
                    "two {total}-byte names sharing their first {} bytes, ending in {x:?} and {y:?}, are the same lock",
                    total - x.len()
                ),
            }
            first.release().await?;
            pairs += 1;
        }
    }
    Ok(format!("{pairs} pairs of long look-alike names independent"))
}
