//! Idle names cost nothing forever (docs/contract.md §5.7): once a name's per-name state was
//! collected, its tokens still only rise.

use super::{ensure, missing_hook, CaseResult, Ctx};
use crate::Fixture;

/// Several grants of a name, its state collected as idle, then a grant from another client:
/// the new token is above every token before (and a second name collected alongside too).
pub async fn idle_collected_tokens_rise(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "idle_collected_tokens_rise").await?;
    let (a, b) = (cx.client().await?, cx.client().await?);
    let name = cx.name("idle")?;
    let opts = cx.opts(cx.ttl() * 2);
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let lease = a.acquire(&name, &opts).await?;
        tokens.push(lease.token());
        lease.release().await?;
    }
    if !cx.fx.collect_idle(&name).await? {
        return Err(missing_hook("the fixture cannot run the idle-state collection (Fixture::collect_idle)"));
    }
    let highest = tokens.iter().copied().max().unwrap_or(lock_core::FencingToken(0));
    let after = b.acquire(&name, &opts).await?;
    let token = after.token();
    after.release().await?;
    ensure!(
        token > highest,
        "token {token} after the idle state was collected, not above the earlier {tokens:?}: tokens went back"
    );
    // Collected twice in a row (nothing held in between) still keeps them rising.
    if !cx.fx.collect_idle(&name).await? {
        return Err(missing_hook("the fixture's idle collection stopped working"));
    }
    let last = a.acquire(&name, &opts).await?;
    ensure!(last.token() > token, "token {} after a second collection, not above {token}", last.token());
    last.release().await?;
    Ok(format!("tokens {tokens:?} → {token} → {}", last.token()))
}
