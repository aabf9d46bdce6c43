//! The client's side of a grant in the release (crate::scripts::queue, "Grants in the release"):
//! the exclusive lock of a single instance hands itself to the queue's head, and the head takes
//! it without a round trip of its own.
//!
//! ## Where the head's validity starts (docs/contract.md §3)
//!
//! Not at the notification: the server's lease began at the grant, earlier. Each attempt of a
//! wait carries its number `n` in the waiter's queue entry (and rewrites the entry with it), and
//! the grant's notification names the number of the entry it granted. The head takes a grant
//! only when that number is the one of its **latest** attempt `S` that answered "queued", and
//! then with validity from `S`'s send instant:
//!
//! 1. Redis runs scripts one at a time. Only `S` wrote an entry numbered `n`, so the release
//!    that granted it ran after `S`, which ran after it was sent: the grant's `TIME` is later
//!    than `S`'s send instant, and the server's lease (`PEXPIRE ttl` at the grant) outlasts
//!    `sent + ttl`. The usual `drift` margin covers the two clocks' rates.
//! 2. A notification of an earlier attempt's entry (a grant `S` did not see because the lease
//!    it granted had already ended, delivered late) names another number: dropped, and the
//!    waiter runs its script, which finds the lock ours (then re-grants it: contract §3) or not.
//! 3. An attempt whose answer was lost may have rewritten the entry with its own number: its
//!    grant names a number that no "queued" answer carried, so it is not taken either; the
//!    script's re-grant takes it instead.
//!
//! A long wait since `S` leaves little validity: the head takes a notified grant only while
//! `now < sent + ttl/2`, else it runs the script, which re-grants the lease it holds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Past this many waits recorded (waits that ended without `forget`, say by an error), the
/// record is cleared: a forgotten wait only loses a grant's shortcut, never safety.
const CAP: usize = 4096;

/// What this client knows of one waiting owner.
#[derive(Default)]
struct Entry {
    /// The number of its next attempt.
    next: u64,
    /// Its latest attempt that answered "queued": number and send instant.
    queued: Option<(u64, Instant)>,
    /// The latest grant heard: token and the attempt number it names.
    heard: Option<(i64, u64)>,
}

/// The grants this client's waiters expect, by owner id (32 hex digits).
#[derive(Default)]
pub(crate) struct Handoffs {
    inner: Mutex<HashMap<String, Entry>>,
}

impl Handoffs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A waiting attempt of `owner` is about to be sent: its number (from 1). From now on the
    /// grants to `owner` are recorded.
    pub(crate) fn attempt(&self, owner: &str) -> u64 {
        let mut map = self.lock();
        if map.len() >= CAP && !map.contains_key(owner) {
            map.clear();
        }
        let e = map.entry(owner.to_owned()).or_default();
        e.next += 1;
        e.next
    }

    /// `owner`'s attempt `n`, sent at `sent`, answered "queued".
    pub(crate) fn queued(&self, owner: &str, n: u64, sent: Instant) {
        if let Some(e) = self.lock().get_mut(owner) {
            e.queued = Some((n, sent));
        }
    }

    /// The wait of `owner` ended (granted by its own script, or left).
    pub(crate) fn forget(&self, owner: &str) {
        self.lock().remove(owner);
    }

    /// A grant notification's payload after its `!`: `<owner>:<token>:<attempt>`. Records it
    /// when the owner is one of ours and returns that owner, the waiter to wake.
    pub(crate) fn heard<'p>(&self, payload: &'p str) -> Option<&'p str> {
        let mut parts = payload.splitn(3, ':');
        let (owner, token, n) = (parts.next()?, parts.next()?, parts.next()?);
        let (token, n) = (token.parse::<i64>().ok()?, n.parse::<u64>().ok()?);
        let mut map = self.lock();
        let e = map.get_mut(owner)?;
        if e.heard.is_none_or(|(t, _)| token > t) {
            e.heard = Some((token, n));
        }
        Some(owner)
    }

    /// The grant to `owner` (lease time `ttl`) to take without a round trip, with the instant
    /// its validity starts (the module docs); `None`: run the script (no grant heard, one that
    /// names another attempt than the latest "queued" one, or too little validity left).
    /// Forgets `owner` when it returns a grant.
    pub(crate) fn take(&self, owner: &str, ttl: Duration, now: Instant) -> Option<(i64, Instant)> {
        let mut map = self.lock();
        let e = map.get_mut(owner)?;
        let (token, n) = e.heard?;
        let (latest, sent) = e.queued?;
        if n != latest || sent.checked_add(ttl / 2).is_none_or(|until| now >= until) {
            return None;
        }
        map.remove(owner);
        Some((token, sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of the module docs, case by case; each `None` is a grant that, taken, could
    /// outlast the server's lease.
    #[test]
    fn takes_only_a_grant_of_the_latest_queued_attempt() {
        let h = Handoffs::default();
        let (o, ttl) = ("ab".repeat(16), Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(h.heard(&format!("{o}:5:1")), None, "no wait of ours: not recorded");
        assert_eq!(h.attempt(&o), 1);
        h.queued(&o, 1, t0);
        assert_eq!(h.take(&o, ttl, t0), None, "nothing heard");
        assert_eq!(h.attempt(&o), 2, "an attempt whose answer is lost");
        assert_eq!(h.heard(&format!("{o}:7:2")), Some(o.as_str()));
        assert_eq!(h.take(&o, ttl, t0), None, "a grant of an attempt that never answered queued");
        assert_eq!(h.attempt(&o), 3);
        let t3 = t0 + Duration::from_millis(5);
        h.queued(&o, 3, t3);
        assert_eq!(h.heard(&format!("{o}:6:1")), Some(o.as_str()), "an older grant, late");
        assert_eq!(h.take(&o, ttl, t3), None, "the late grant is still not of the latest attempt");
        assert!(h.heard(&format!("{o}:8:3")).is_some());
        assert_eq!(h.take(&o, ttl, t3 + Duration::from_secs(5)), None, "half the ttl gone: run the script");
        assert_eq!(h.take(&o, ttl, t3 + Duration::from_secs(1)), Some((8, t3)), "validity from attempt 3's send");
        assert_eq!(h.take(&o, ttl, t3), None, "taken once");
        assert_eq!(h.heard(&format!("{o}:9:3")), None, "forgotten once taken");
        for bad in ["", "x", "x:1", "x:y:1", "x:1:y", "x:-1:"] {
            h.attempt("x");
            assert_eq!(h.heard(bad), None, "{bad}");
        }
    }

    /// One attempt of `owner` with grant terms `ttl:n` on a real server; the script's reply.
    async fn attempt(
        c: &mut redis::aio::MultiplexedConnection,
        k: &crate::scripts::Keys,
        owner: &str,
        ttl_ms: u64,
        n: u64,
    ) -> Vec<i64> {
        crate::scripts::ACQUIRE
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
            .arg(2000)
            .arg(&k.channel)
            .arg(150)
            .arg("ho:wake:A")
            .arg(if n > 0 { format!("{ttl_ms}:{n}") } else { String::new() })
            .invoke_async(c)
            .await
            .unwrap()
    }

    /// Against a real server, the case the attempt numbers exist for: a grant whose lease ended
    /// before the waiter's latest "queued" attempt, its notification delivered only after that
    /// attempt, while another owner holds the lock. Taking it would make two holders.
    #[tokio::test]
    async fn a_late_grant_to_an_earlier_attempt_is_not_taken() {
        use futures::StreamExt;
        let server = dlock_testkit::servers::redis::RedisServer::start_local().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let k = crate::scripts::Keys::new("ho", &lock_core::LockName::new("late").unwrap());
        let mut wake = client.get_async_pubsub().await.unwrap();
        wake.subscribe("ho:wake:A").await.unwrap();
        let mut wake = wake.into_on_message();
        let (h, w, ttl) = (Handoffs::default(), "w".repeat(32), Duration::from_millis(300));

        assert_eq!(attempt(&mut c, &k, "a", 10_000, 0).await[0], 1);
        let n1 = h.attempt(&w);
        let sent1 = Instant::now();
        assert_eq!(attempt(&mut c, &k, &w, 300, n1).await[0], 0);
        h.queued(&w, n1, sent1);
        let released: i64 = k.hand_off(&crate::scripts::RELEASE, "a", 150, "").invoke_async(&mut c).await.unwrap();
        assert_eq!(released, 1);
        // The grant's notification is held back (a slow pub/sub connection) ...
        let late = tokio::time::timeout(Duration::from_secs(2), wake.next()).await.unwrap().unwrap();
        let late = String::from_utf8(late.get_payload_bytes().to_vec()).unwrap();
        assert!(late.starts_with(&format!("!{w}:")), "{late}");
        // ... while that lease ends, `b` takes the lock, and `w` tries again: queued.
        tokio::time::sleep(ttl + Duration::from_millis(50)).await;
        assert_eq!(attempt(&mut c, &k, "b", 10_000, 0).await[0], 1);
        let n2 = h.attempt(&w);
        let sent2 = Instant::now();
        assert_eq!(attempt(&mut c, &k, &w, 300, n2).await[0], 0, "b holds it");
        h.queued(&w, n2, sent2);
        // Now the late notification arrives.
        assert_eq!(h.heard(late.strip_prefix('!').unwrap()), Some(w.as_str()));
        assert_eq!(h.take(&w, ttl, Instant::now()), None, "not taken: b holds the lock");
        let o: Option<String> = redis::cmd("HGET").arg(&k.lock).arg("o").query_async(&mut c).await.unwrap();
        assert_eq!(o.as_deref(), Some("b"));
    }
}
