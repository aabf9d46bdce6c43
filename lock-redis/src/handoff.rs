//! The client's side of a grant in the release (crate::scripts::queue, "Grants in the release"):
//! the exclusive lock of a single instance hands itself to the queue's head, provisionally, and
//! the head claims it with its own acquire script.
//!
//! ## A grant is confirmed by the server (docs/contract.md §4, issue 27)
//!
//! The release's message to the head (`@<owner>` on the head's wake channel) is a hint, never a
//! grant: it names no token, and a waiter that hears it only wakes and runs its acquire script,
//! as after any wake-up. That script finds the lease its own (the release wrote it) and
//! re-grants it (contract §3): the lease is extended to the head's ttl and the token comes back
//! in the reply. So `acquire` returns only a lease the server confirmed, with the server's token,
//! and its validity counts from that script call's send instant, like any acquire. Anyone who
//! can publish (a user with read rights and `+publish`), a late or a duplicated message can wake
//! a waiter, never make it hold. The cost is one round trip on the hand-off, on the script's
//! shortest path (owner check, `PEXPIRE`, token read).
//!
//! ## The bound on an untaken grant
//!
//! The release grants the head the lease for the claim window only, [`CLAIM_MS`] (at most the
//! head's ttl); the head's claim extends it to its ttl. A head that does not claim — its process
//! died, or was cut off — therefore holds the lock for the claim window, not for its ttl. The
//! grant removed its entry, so once the window has passed the lock is free for the next
//! waiter, which takes it at its next attempt: at most one re-try interval of that waiter later
//! (`4 × max_poll_interval`, 2 s at most, or the holder's remaining lease it last saw if
//! shorter). A vanished head therefore keeps the lock from the others for at most
//! `min(ttl, 1 s) + 4 × max_poll_interval` plus one request (3 s plus a round trip with the
//! default poll settings, whatever the ttl). A wait that ends in a live process (deadline,
//! dropped future) abandons (`crate::scripts::ABANDON`): a grant it has not claimed is
//! released there and handed on to the next waiter, in the same script, one round trip after
//! the wait ended.

/// The claim window of a grant in the release (ms): how long the queue's head holds a lock the
/// release granted it before its own acquire script claims it. A woken head claims within a
/// round trip or two; the window is four times the reservation of a woken head that takes no
/// grants (`RESERVE_MS`), so that a head slowed by a loaded machine does not lose its turn, and
/// short beside the ttls locks are taken for, so that a head that died does not hold the lock
/// for its ttl (the module docs).
pub(crate) const CLAIM_MS: u64 = 1000;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;

    use super::CLAIM_MS;
    use crate::scripts::{Keys, ACQUIRE, RELEASE};

    /// One waiting attempt of `owner` for `ttl_ms` with grant terms (it takes grants in the
    /// release) on a real server; the script's reply.
    async fn attempt(c: &mut redis::aio::MultiplexedConnection, k: &Keys, owner: &str, ttl_ms: u64) -> Vec<i64> {
        ACQUIRE
            .key(&k.lock)
            .key(&k.fence)
            .key("ho:boot")
            .key(&k.queue)
            .arg(owner)
            .arg(ttl_ms)
            .arg(0)
            .arg("")
            .arg("")
            .arg(0)
            .arg(20_000)
            .arg(&k.channel)
            .arg(150)
            .arg("ho:wake:A")
            .arg(format!("{ttl_ms}"))
            .invoke_async(c)
            .await
            .unwrap()
    }

    /// The next message on `wake`.
    async fn heard(wake: &mut redis::aio::PubSubStream) -> String {
        let m = tokio::time::timeout(Duration::from_secs(2), wake.next()).await.unwrap().unwrap();
        String::from_utf8(m.get_payload_bytes().to_vec()).unwrap()
    }

    /// The lease's owner and PTTL.
    async fn lease(c: &mut redis::aio::MultiplexedConnection, k: &Keys) -> (Option<String>, i64) {
        let o: Option<String> = redis::cmd("HGET").arg(&k.lock).arg("o").query_async(c).await.unwrap();
        let pttl: i64 = redis::cmd("PTTL").arg(&k.lock).query_async(c).await.unwrap();
        (o, pttl)
    }

    /// The module's rules against a real server: the release grants the head for the claim
    /// window only and tells it `@<owner>`, no token; the head's script claims the grant (same
    /// token, its full ttl); a grant nobody claims lapses after the window and the next waiter
    /// takes the lock then, not after the head's ttl.
    #[tokio::test]
    async fn a_grant_in_the_release_is_provisional_until_claimed() {
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let k = Keys::new("ho", &lock_core::LockName::new("claim").unwrap());
        let mut wake = client.get_async_pubsub().await.unwrap();
        wake.subscribe("ho:wake:A").await.unwrap();
        let mut wake = wake.into_on_message();
        let release = |c: &mut redis::aio::MultiplexedConnection, who: &'static str| {
            let (mut c, k) = (c.clone(), &k);
            async move { k.hand_off(&RELEASE, who, 150, "").invoke_async::<i64>(&mut c).await.unwrap() }
        };

        assert_eq!(attempt(&mut c, &k, "a", 60_000).await[0], 1);
        assert_eq!(attempt(&mut c, &k, "w", 60_000).await[0], 0);
        assert_eq!(attempt(&mut c, &k, "v", 60_000).await[0], 0);
        assert_eq!(release(&mut c, "a").await, 1);
        let (o, pttl) = lease(&mut c, &k).await;
        assert_eq!(o.as_deref(), Some("w"), "the release granted the head");
        assert!(pttl > 0 && pttl <= CLAIM_MS as i64, "for the claim window only: {pttl}");
        assert_eq!(heard(&mut wake).await, "@w", "a wake-up naming no token");
        let token: i64 = redis::cmd("HGET").arg(&k.lock).arg("f").query_async(&mut c).await.unwrap();
        assert_eq!(attempt(&mut c, &k, "w", 60_000).await, [1, token], "the claim: the grant's token");
        assert!(lease(&mut c, &k).await.1 > 59_000, "claimed: the head's ttl");

        // `v` is granted and never claims: the lock is free once the window has passed.
        assert_eq!(attempt(&mut c, &k, "x", 60_000).await[0], 0, "x queues behind v");
        assert_eq!(release(&mut c, "w").await, 1);
        assert_eq!(heard(&mut wake).await, "@v");
        assert_eq!(lease(&mut c, &k).await.0.as_deref(), Some("v"));
        assert_eq!(attempt(&mut c, &k, "x", 60_000).await[0], 0, "v holds the grant in its window");
        tokio::time::sleep(Duration::from_millis(CLAIM_MS + 100)).await;
        assert_eq!(attempt(&mut c, &k, "x", 60_000).await[0], 1, "the unclaimed grant lapsed");

        // A head with a ttl below the window is granted for its ttl.
        assert_eq!(attempt(&mut c, &k, "y", 300).await[0], 0);
        assert_eq!(release(&mut c, "x").await, 1);
        let (o, pttl) = lease(&mut c, &k).await;
        assert!(o.as_deref() == Some("y") && pttl > 0 && pttl <= 300, "{o:?} {pttl}");
    }
}
