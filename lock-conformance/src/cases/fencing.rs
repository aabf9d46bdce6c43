//! Fencing tokens: monotonic per name, greater after a takeover, enforceable by a resource.

use lock_core::{FencedRegister, FencingToken};

use super::{ensure, fail, CaseResult, Ctx};
use crate::Fixture;

/// Ten acquisitions by three clients, through `acquire` and `try_acquire`: every token is
/// strictly greater than the one before.
pub async fn fencing_monotonic(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fencing_monotonic").await?;
    let name = cx.name("tokens")?;
    let clients = [cx.client().await?, cx.client().await?, cx.client().await?];
    let opts = cx.opts(cx.ttl() * 4);
    let mut tokens: Vec<u64> = Vec::new();
    for i in 0..10 {
        let c = &clients[i % clients.len()];
        let lease = if i % 2 == 0 {
            c.acquire(&name, &opts).await?
        } else {
            match c.try_acquire(&name, &opts).await? {
                Some(l) => l,
                None => fail!("try_acquire #{i} found the lock busy although every lease before was released"),
            }
        };
        if let Some(prev) = tokens.last().map(|t| FencingToken(*t)) {
            ensure!(
                lease.token() > prev,
                "token {} after {prev}: tokens must strictly increase ({tokens:?})",
                lease.token()
            );
        }
        tokens.push(lease.token().get());
        lease.release().await?;
    }
    Ok(format!("tokens {tokens:?}"))
}

/// A holder's lease ends (it released, or stalled and was taken over); a new holder writes to
/// a fenced register; the former holder's late write with its old token is rejected.
pub async fn fenced_register_rejects_former_holder(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fenced_register_rejects_former_holder").await?;
    let name = cx.name("register")?;
    let [a, b] = cx.clients().await?;
    let reg = FencedRegister::new(Vec::<&'static str>::new());
    let opts = cx.opts(cx.ttl() * 4);
    let old = a.acquire(&name, &opts).await?;
    let (old_token, old_owner) = (old.token(), old.owner());
    ensure!(reg.write_as(old_owner, old_token, |v| v.push("a")).is_ok(), "the first holder's write was rejected");
    old.release().await?;
    let new = b.acquire(&name, &opts).await?;
    ensure!(new.token() > old_token, "new token {} is not above the former holder's {old_token}", new.token());
    ensure!(reg.write_as(new.owner(), new.token(), |v| v.push("b")).is_ok(), "the new holder's write was rejected");
    // The former holder wakes up from its pause and writes with what it still has.
    match reg.write_as(old_owner, old_token, |v| v.push("stale a")) {
        Ok(()) => fail!("the register accepted the former holder's token {old_token} after {}", new.token()),
        Err(stale) => {
            ensure!(stale.highest == new.token(), "register reports highest {} not {}", stale.highest, new.token())
        }
    }
    let new_token = new.token();
    new.release().await?;
    ensure!(reg.read() == vec!["a", "b"], "register content {:?}", reg.read());
    Ok(format!("stale token {old_token} rejected after {new_token}"))
}

/// A lease that expires (its holder vanished) is taken over with a strictly greater token.
pub async fn fencing_after_expiry(fx: &dyn Fixture) -> CaseResult {
    let cx = Ctx::new(fx, "fencing_after_expiry").await?;
    let name = cx.name("expiry")?;
    let holder = cx.vanishing_holder(&name).await?;
    let first = holder.lease.token();
    holder.vanish().await;
    let b = cx.client().await?;
    let next = b.acquire(&name, &cx.opts(cx.expiry() * 4)).await;
    holder.heal().await;
    let next = next?;
    ensure!(next.token() > first, "token {} after the expired lease's {first}", next.token());
    next.release().await?;
    Ok(format!("{first} then {}", next.token()))
}
