//! The restart quiet period (`boot.rs` in the crate), in every acquire script.

use lock_core::LockName;
use lock_redis::scripts::{Acquire, Keys, RedlockAcquire, RwAcquire, RwKeys, SemAcquire, SemKeys, Side, Terms};

use crate::{acquire, fresh_server, terms};

const QUIET: u64 = 4000;
const MARKER: &str = "q:boot";

/// One fresh attempt of every kind by `owner` (each on a name of its own, so none refuses
/// another), with the quiet period [`QUIET`]: each script's reply.
async fn attempts(c: &mut redis::aio::MultiplexedConnection, owner: &str) -> Vec<(&'static str, Vec<i64>)> {
    let keys = |name: &str| LockName::new(name).unwrap();
    let (k, rw, sk, rl) = (
        Keys::new("q", &keys("q")),
        RwKeys::new("q", &keys("q")),
        SemKeys::new("q", &keys("q")),
        Keys::new("q", &keys("qr")),
    );
    let rw_writer = RwKeys::new("q", &keys("qw"));
    let writer = format!("{owner}w");
    let exclusive = Acquire { quiet_ms: QUIET, ..acquire(&k, owner, 0, 150, "") };
    let terms = Terms { quiet_ms: QUIET, ..terms(owner, 0, 150, "") };
    let read = RwAcquire { side: Side::Read, keys: &rw, terms };
    let write = RwAcquire { side: Side::Write, keys: &rw_writer, terms: Terms { owner: &writer, ..terms } };
    let permit = SemAcquire { keys: &sk, permits: 2, terms };
    let redlock = RedlockAcquire { keys: &rl, terms, attempt: "a", ticket: 0 };
    vec![
        ("exclusive", exclusive.invoke(MARKER, c).await.unwrap()),
        ("read", read.invoke(MARKER, c).await.unwrap()),
        ("write", write.invoke(MARKER, c).await.unwrap()),
        ("permit", permit.invoke(MARKER, c).await.unwrap()),
        ("redlock", redlock.invoke(MARKER, c).await.unwrap()),
    ]
}

/// A server that lost its state (no boot marker) refuses every fresh grant, of every kind, for
/// the quiet period, answering the time left; a marker whose quiet time has passed lets grants
/// through; losing the data again (FLUSHALL) starts a new quiet period.
#[tokio::test]
async fn quiet_period_after_lost_state() {
    let (_server, _client, mut c) = fresh_server().await;
    let quiet = QUIET as i64;
    for (kind, r) in attempts(&mut c, "o1").await {
        // Every kind, Redlock's per-master step too, says why (`2`: quiet, nobody holds it).
        assert_eq!(r[0], 2, "{kind}: no grant right after the state was lost: {r:?}");
        assert!(r[1] > quiet - 1000 && r[1] <= quiet, "{kind}: answers the quiet time left: {r:?}");
    }
    let marker: i64 = redis::cmd("GET").arg(MARKER).query_async(&mut c).await.unwrap();
    assert!(marker > 0, "the first script wrote the quiet-until marker");
    let _: () = redis::cmd("SET").arg(MARKER).arg(marker - quiet).query_async(&mut c).await.unwrap();
    for (kind, r) in attempts(&mut c, "o2").await {
        assert_eq!(r[0], 1, "{kind}: granted once the quiet period is over: {r:?}");
    }
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    for (kind, r) in attempts(&mut c, "o3").await {
        assert_eq!(r[0], 2, "{kind}: losing the data again starts a new quiet period: {r:?}");
    }
}
