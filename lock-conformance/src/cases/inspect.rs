//! Who holds a lock (docs/contract.md §5.6): `inspect` and `list` report the holder id, token,
//! kind and metadata of live grants, nothing after release; hostile holder ids are rejected or
//! stored verbatim.

use lock_core::{Holder, LockKind, LockName, MAX_HOLDER_LEN, MAX_METADATA_LEN};

use super::{ensure, fail, CaseError, CaseResult, Ctx};
use crate::Fixture;

fn not_inspectable(cx: &Ctx<'_>) -> Result<(), CaseError> {
    if cx.caps.inspect {
        Ok(())
    } else {
        Err(CaseError::NotApplicable("the backend does not declare `inspect` (Capabilities::inspect)".into()))
    }
}

fn holder(id: &str, metadata: Option<&str>) -> Result<Holder, CaseError> {
    let h = Holder::new(id).map_err(|e| CaseError::Failed(format!("valid holder id {id:?} rejected: {e}")))?;
    match metadata {
        Some(m) => h.with_metadata(m).map_err(|e| CaseError::Failed(format!("valid metadata rejected: {e}"))),
        None => Ok(h),
    }
}

/// While held, another client's `inspect` reports the holder id, the lease's token, the kind,
/// the metadata and a remaining time within the ttl; after release it reports `None`. A grant
/// without a holder id reports none.
pub async fn inspect_reports_holder(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "inspect_reports_holder").await?;
    not_inspectable(&cx)?;
    let (a, b) = (cx.client().await?, cx.client().await?);
    let name = cx.name("held")?;
    ensure!(b.inspect(&name).await?.is_none(), "inspect of a never-held name reported a holder");
    let meta = r#"{"version":"1.4.2","pid":4242}"#;
    let opts = cx.opts(cx.ttl() * 2).holder(holder("web-7.example:8080", Some(meta))?);
    let lease = a.acquire(&name, &opts).await?;
    let Some(info) = b.inspect(&name).await? else { fail!("inspect while held reported nobody") };
    ensure!(info.name == name.as_str(), "inspect reported name {:?}, not {:?}", info.name, name.as_str());
    ensure!(info.holder.as_deref() == Some("web-7.example:8080"), "holder id {:?}", info.holder);
    ensure!(info.token == lease.token(), "token {} reported, the lease has {}", info.token, lease.token());
    ensure!(info.kind == LockKind::Exclusive, "kind {} reported for an exclusive lock", info.kind);
    ensure!(info.metadata.as_deref() == Some(meta), "metadata {:?} did not round-trip", info.metadata);
    if let Some(left) = info.remaining {
        ensure!(left <= opts.ttl, "remaining {left:?} exceeds the ttl {:?}", opts.ttl);
    }
    lease.release().await?;
    ensure!(b.inspect(&name).await?.is_none(), "inspect after release still reports a holder");
    let anonymous = a.acquire(&name, &cx.opts(cx.ttl() * 2)).await?;
    let Some(info) = b.inspect(&name).await? else { fail!("inspect while held (no holder id) reported nobody") };
    ensure!(info.holder.is_none() && info.metadata.is_none(), "a grant without identity reported {info:?}");
    ensure!(info.token == anonymous.token(), "token {} reported, the lease has {}", info.token, anonymous.token());
    anonymous.release().await?;
    Ok(format!("remaining reported: {}", info.remaining.is_some()))
}

/// `list(prefix, limit)` reports exactly the held names under a prefix, in name order, at most
/// `limit`; `%` and `_` in the prefix match only themselves; released names drop out.
pub async fn inspect_list_by_prefix(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "inspect_list_by_prefix").await?;
    if !cx.caps.list {
        return Err(CaseError::NotApplicable("the backend does not declare `list` (Capabilities::list)".into()));
    }
    let [a, b] = cx.clients().await?;
    let base = cx.name("")?;
    let prefix = format!("{}p%_", base.as_str());
    let opts = cx.opts(cx.ttl() * 2);
    let mut leases = Vec::new();
    let mut inside = Vec::new();
    for suffix in ["p%_c", "p%_a", "p%_b/deeper"] {
        let name = cx.name(suffix)?;
        leases.push(a.acquire(&name, &opts.clone().holder(holder(&format!("h-{suffix}"), None)?)).await?);
        inside.push(name.as_str().to_owned());
    }
    // Would match an unescaped `p%_` pattern (and `pX` would match `p_`).
    for suffix in ["pXY-wildcard", "p%X-underscore", "q-outside"] {
        leases.push(a.acquire(&cx.name(suffix)?, &opts).await?);
    }
    inside.sort();
    let listed = b.list(&prefix, 100).await?;
    let names: Vec<&str> = listed.iter().map(|i| i.name.as_str()).collect();
    ensure!(names == inside, "list({prefix:?}) gave {names:?}, expected {inside:?}");
    for info in &listed {
        let suffix = info.name.strip_prefix(base.as_str()).unwrap_or_default();
        let want = format!("h-{suffix}");
        ensure!(info.holder.as_deref() == Some(want.as_str()), "{}: holder {:?}", info.name, info.holder);
        ensure!(info.kind == LockKind::Exclusive, "{}: kind {}", info.name, info.kind);
    }
    let two = b.list(&prefix, 2).await?;
    let two: Vec<&str> = two.iter().map(|i| i.name.as_str()).collect();
    ensure!(two == inside[..2], "list({prefix:?}, 2) gave {two:?}, expected {:?}", &inside[..2]);
    let first = leases.remove(0);
    let gone = first.name().as_str().to_owned();
    first.release().await?;
    let after = b.list(&prefix, 100).await?;
    ensure!(after.len() == 2 && after.iter().all(|i| i.name != gone), "after releasing {gone:?}: {after:?}");
    for l in leases {
        l.release().await?;
    }
    let empty = b.list(&prefix, 100).await?;
    ensure!(empty.is_empty(), "list after releasing everything gave {empty:?}");
    Ok(String::new())
}

/// Holder ids that are empty, too long or carry control characters, and metadata over the
/// limit, are `InvalidOptions`; valid but hostile ids (quotes, SQL, braces, unicode, the longest
/// allowed) are stored and reported byte for byte.
pub async fn inspect_hostile_holder(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "inspect_hostile_holder").await?;
    let too_long = "h".repeat(MAX_HOLDER_LEN + 1);
    for bad in ["", "line\nbreak", "nul\0byte", "esc\u{1b}[31m", too_long.as_str()] {
        ensure!(Holder::new(bad).is_err(), "holder id {bad:?} was accepted");
    }
    let ok = Holder::new("ok").map_err(|e| CaseError::Failed(format!("{e}")))?;
    ensure!(ok.with_metadata("m".repeat(MAX_METADATA_LEN + 1)).is_err(), "metadata over the limit was accepted");
    not_inspectable(&cx)?;
    let client = cx.client().await?;
    let longest = format!("{}é", "x".repeat(MAX_HOLDER_LEN - 2));
    let ids = ["'; DROP TABLE dlock_leases; --", "{hashtag}:*?[]", "ünïcödé 名前 🔒", "\"quoted\"\\", longest.as_str()];
    let meta = format!("{}\"'\\{{}}", "é".repeat((MAX_METADATA_LEN - 8) / 2));
    for (i, id) in ids.iter().enumerate() {
        let name: LockName = cx.name(&format!("h{i}"))?;
        let lease = client.acquire(&name, &cx.opts(cx.ttl() * 2).holder(holder(id, Some(&meta))?)).await?;
        let info = client.inspect(&name).await?;
        lease.release().await?;
        let Some(info) = info else { fail!("inspect reported nobody for holder {id:?}") };
        ensure!(info.holder.as_deref() == Some(*id), "holder {id:?} came back as {:?}", info.holder);
        ensure!(info.metadata.as_deref() == Some(meta.as_str()), "metadata did not round-trip for holder {id:?}");
    }
    Ok(format!("{} hostile ids round-tripped", ids.len()))
}
