//! Redlock over five fresh local `redis-server`s: Redlock-specific cases here; the shared
//! conformance suite is invoked at the bottom.

mod common;

#[path = "redlock/blocking.rs"]
mod blocking;

mod redlock_extra {
    use std::time::{Duration, Instant};

    use lock_core::{AcquireOptions, DistributedLock, LockError, LockName, LockService};

    use crate::common::RedlockFixture;

    fn opts(ttl_ms: u64) -> AcquireOptions {
        AcquireOptions::new(Duration::from_millis(ttl_ms))
            .wait(Duration::from_secs(5))
            .request_timeout(Duration::from_secs(1))
    }

    async fn raw(fx: &RedlockFixture, i: usize) -> redis::aio::MultiplexedConnection {
        let addr = fx.servers[i].addr().unwrap();
        let client = redis::Client::open(format!("redis://{addr}")).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }

    /// Five fresh masters and a client of them.
    async fn five() -> (RedlockFixture, lock_redis::Redlock) {
        let fx = RedlockFixture::start().await.unwrap();
        let c = fx.redlock_client().await.unwrap();
        (fx, c)
    }

    /// Stops (`up` false) or starts the masters `which`.
    async fn set_masters(fx: &RedlockFixture, which: std::ops::Range<usize>, up: bool) {
        for i in which {
            let m = fx.master(i);
            let done = if up { m.start().await } else { m.stop().await };
            done.unwrap();
        }
    }

    /// One grant and release of `warm`, so that `c` is connected to every master that is up.
    async fn warm(c: &lock_redis::Redlock) {
        c.acquire(&LockName::new("warm").unwrap(), &opts(1000)).await.unwrap().release().await.unwrap();
    }

    /// Acquires `name` (ttl 1 s), asserts that its token is above `prev`, and releases it.
    async fn grant_above(c: &lock_redis::Redlock, name: &LockName, prev: lock_core::FencingToken) {
        let l = c.acquire(name, &opts(1000)).await.unwrap();
        assert!(l.token() > prev, "token {} after {prev}", l.token());
        l.release().await.unwrap();
    }

    /// Makes master connection `m` hold lock key `key` for `owner` for a minute.
    async fn hold_for(m: &mut redis::aio::MultiplexedConnection, key: &str, owner: &str) {
        let _: () = redis::cmd("HSET").arg(key).arg("o").arg(owner).query_async(m).await.unwrap();
        let _: () = redis::cmd("PEXPIRE").arg(key).arg(60_000).query_async(m).await.unwrap();
    }

    /// Masters that do not know the prefix (a new deployment, or masters that lost their state)
    /// grant nothing for the quiet period, and say so: a `Timeout` naming the time left within
    /// 100 ms of a 50 ms wait, as on a single instance; once every master is marked fresh (what
    /// `dlock init` does), the first lock is granted at once.
    #[tokio::test]
    async fn a_new_prefix_says_why_its_first_lock_waits() {
        let fx = RedlockFixture::start_n(3).await.unwrap();
        let prefix = format!("{}-new", fx.options.key_prefix);
        let options = lock_redis::RedisOptions {
            key_prefix: prefix.clone(),
            restart_quiet_period: Some(Duration::from_secs(5)),
            ..fx.options.clone()
        };
        let c = lock_redis::connect_redlock(&fx.url(), options).await.unwrap();
        let name = LockName::new("first").unwrap();
        let waiting = AcquireOptions::new(Duration::from_secs(2)).wait(Duration::from_millis(50));
        let began = Instant::now();
        let r = c.acquire(&name, &waiting).await;
        let took = began.elapsed();
        match r {
            Err(LockError::Timeout { quiet_left: Some(left), .. }) => {
                assert!(left > Duration::from_secs(4) && left <= Duration::from_secs(5), "quiet left {left:?}")
            }
            other => panic!("expected a Timeout naming the quiet period, got {other:?}"),
        }
        assert!(took < Duration::from_millis(150), "the Timeout came after {took:?}");
        for s in &fx.servers {
            crate::common::mark_fresh(s.url(), &prefix).await.unwrap();
        }
        let began = Instant::now();
        let lease = c.acquire(&name, &waiting).await.expect("granted at once on masters marked fresh");
        assert!(began.elapsed() < Duration::from_millis(150), "granted after {:?}", began.elapsed());
        lease.release().await.unwrap();
    }

    #[tokio::test]
    async fn basics() {
        let (fx, a) = five().await;
        let b = fx.redlock_client().await.unwrap();
        assert_eq!(a.backend(), "redlock");
        assert_eq!(a.store().quorum(), 3);
        let name = LockName::new("basics").unwrap();
        let l1 = a.try_acquire(&name, &opts(2000)).await.unwrap().expect("free");
        assert!(b.try_acquire(&name, &opts(2000)).await.unwrap().is_none());
        // Every master holds the lease and stored the token.
        for i in 0..5 {
            let mut c = raw(&fx, i).await;
            let fence: u64 = redis::cmd("GET").arg("dlock:{basics}:fence").query_async(&mut c).await.unwrap();
            assert_eq!(fence, l1.token().0, "master {i}");
        }
        l1.release().await.unwrap();
        let l2 = b.try_acquire(&name, &opts(2000)).await.unwrap().expect("free again");
        assert!(l2.token() > l1.token());
        l2.release().await.unwrap();
    }

    /// One and then two of five masters down: locks are still granted, tokens still increase,
    /// and a held lease keeps renewing.
    #[tokio::test]
    async fn fault_minority_down() {
        let (fx, c) = five().await;
        let name = LockName::new("minority").unwrap();
        let held = c.acquire(&LockName::new("held").unwrap(), &opts(900)).await.unwrap();
        let mut last = c.acquire(&name, &opts(1500)).await.unwrap().token().0;
        for down in 0..2 {
            fx.master(down).stop().await.unwrap();
            let t = Instant::now();
            let l = c.acquire(&name, &opts(1500)).await.unwrap_or_else(|e| panic!("{} down: {e}", down + 1));
            eprintln!("{} of 5 down: granted in {:?}", down + 1, t.elapsed());
            assert!(l.token().0 > last);
            last = l.token().0;
            l.release().await.unwrap();
        }
        // Two masters down for longer than the ttl: the majority renewal keeps the lease.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(held.is_valid(), "lease lost with only a minority down: {:?}", held.lost().reason());
        held.release().await.unwrap();
    }

    /// Two of five masters hang (SIGSTOP): rounds stop at the majority, so a grant costs no
    /// more than the fast masters' round trips, and renewals keep the lease.
    #[tokio::test]
    async fn fault_minority_paused() {
        let (fx, c) = five().await;
        // Connect to every master before they hang.
        warm(&c).await;
        for i in 0..2 {
            fx.master(i).pause(true).await.unwrap();
        }
        let t = Instant::now();
        let l = c.acquire(&LockName::new("paused").unwrap(), &opts(900)).await.unwrap();
        let granted_in = t.elapsed();
        eprintln!("2 of 5 paused: granted in {granted_in:?}");
        assert!(granted_in < Duration::from_millis(250), "a hung minority delayed the grant: {granted_in:?}");
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert!(l.is_valid(), "lease lost with a hung minority: {:?}", l.lost().reason());
        let t = Instant::now();
        l.release().await.unwrap();
        assert!(t.elapsed() < Duration::from_millis(250), "a hung minority delayed the release: {:?}", t.elapsed());
        for i in 0..2 {
            fx.master(i).pause(false).await.unwrap();
        }
    }

    /// A client made while two masters are down works, and uses them once they are back.
    #[tokio::test]
    async fn connect_with_minority_down() {
        let fx = RedlockFixture::start().await.unwrap();
        set_masters(&fx, 0..2, false).await;
        let c = fx.redlock_client().await.unwrap();
        let name = LockName::new("late").unwrap();
        let l = c.acquire(&name, &opts(1000)).await.unwrap();
        l.release().await.unwrap();
        set_masters(&fx, 0..2, true).await;
        // Now stop two others: the two that came back and the fifth make the majority.
        set_masters(&fx, 2..4, false).await;
        grant_above(&c, &name, l.token()).await;
    }

    /// Three of five down: no grant; `Unavailable` (or `Timeout`) within the caller's wait.
    /// A held lease then loses its majority and its lost signal fires.
    #[tokio::test]
    async fn fault_majority_down() {
        let (fx, c) = five().await;
        let held = c.acquire(&LockName::new("held").unwrap(), &opts(1000)).await.unwrap();
        set_masters(&fx, 0..3, false).await;
        let wait = Duration::from_secs(2);
        let t = Instant::now();
        let r = c.acquire(&LockName::new("majority").unwrap(), &opts(1000).wait(wait)).await;
        let took = t.elapsed();
        match r {
            Err(LockError::Unavailable { .. }) | Err(LockError::Timeout { .. }) => {}
            other => panic!("3 of 5 down must not grant: {:?}", other.map(|l| l.token())),
        }
        assert!(took < wait + Duration::from_millis(800), "took {took:?} for a wait of {wait:?}");
        eprintln!("3 of 5 down: refused in {took:?}");
        let r = c.try_acquire(&LockName::new("majority2").unwrap(), &opts(1000)).await;
        assert!(matches!(r, Err(LockError::Unavailable { .. })), "{:?}", r.map(|o| o.map(|l| l.token())));
        tokio::time::timeout(Duration::from_secs(3), held.lost().fired()).await.expect("lost signal");
        // Masters come back (empty): service resumes, and tokens keep increasing.
        set_masters(&fx, 0..3, true).await;
        grant_above(&c, &LockName::new("held").unwrap(), held.token()).await;
    }

    /// A minority of masters restarts empty while the others hold counters ahead of every
    /// clock: the quorum read still sees the highest token, so tokens strictly increase.
    #[tokio::test]
    async fn fencing_survives_minority_restart_empty() {
        let (fx, c) = five().await;
        let name = LockName::new("fence").unwrap();
        let l = c.acquire(&name, &opts(1000)).await.unwrap();
        l.release().await.unwrap();
        // Put the counters far ahead of the masters' clocks, so the TIME floor cannot help:
        // only the quorum intersection can.
        let ahead: u64 = l.token().0 + 1_000_000_000_000;
        for i in 0..5 {
            let mut m = raw(&fx, i).await;
            let _: () = redis::cmd("SET").arg("dlock:{fence}:fence").arg(ahead).query_async(&mut m).await.unwrap();
        }
        let mut last = ahead;
        for round in 0..3 {
            // Restart two masters empty (a different pair each round).
            for i in [round % 5, (round + 2) % 5] {
                fx.master(i).stop().await.unwrap();
                fx.master(i).start().await.unwrap();
            }
            // Reconnect to the restarted masters first, so that they take part in the vote.
            for _ in 0..2 {
                warm(&c).await;
            }
            let l = c.acquire(&name, &opts(1000)).await.unwrap();
            assert!(l.token().0 > last, "round {round}: token {} after {last}", l.token());
            last = l.token().0;
            l.release().await.unwrap();
        }
    }

    /// Round 2 counts only masters where this attempt stored its token. Here the quorum read
    /// (masters 0–2) sees M, so the token is M + 1, which masters 3–4 already recorded for
    /// another grant; masters 1–2 cannot store anything (their user lost `+set`). Counting the
    /// equal counters of 3–4 as stored would grant a second M + 1.
    #[tokio::test]
    async fn equal_counter_from_another_grant_is_not_stored() {
        let (fx, c) = five().await;
        // Connect to every master first: the ACL change below must not hit the connect.
        warm(&c).await;
        let m: u64 = 1 << 52;
        for i in 0..5 {
            let mut r = raw(&fx, i).await;
            let counter = if i < 3 { m } else { m + 1 };
            let _: () = redis::cmd("SET").arg("dlock:{equal}:fence").arg(counter).query_async(&mut r).await.unwrap();
            if i >= 3 {
                let _: () =
                    redis::cmd("SET").arg("dlock:{equal}:fence-by").arg("another").query_async(&mut r).await.unwrap();
                hold_for(&mut r, "dlock:{equal}:lock", "another-owner").await;
            }
        }
        for i in 1..3 {
            let mut r = raw(&fx, i).await;
            let _: () = redis::cmd("ACL").arg("SETUSER").arg("default").arg("-set").query_async(&mut r).await.unwrap();
        }
        let got = c.try_acquire(&LockName::new("equal").unwrap(), &opts(2000)).await.unwrap();
        if let Some(l) = &got {
            assert!(l.token().0 > m + 1, "granted token {} although another grant holds {}", l.token(), m + 1);
        }
    }

    /// A majority of masters restarts empty while a lease is held (not renewing, so its holder
    /// believes it until `valid_until`): the restarted masters grant nothing for their quiet
    /// period, so another client gets no majority while that lease may still be believed.
    #[tokio::test]
    async fn majority_restarted_empty_grants_nothing_while_a_lease_may_be_believed() {
        let fx = RedlockFixture::start().await.unwrap();
        let (a, b) = (fx.redlock_client().await.unwrap(), fx.redlock_client().await.unwrap());
        warm(&b).await;
        let name = LockName::new("restarted").unwrap();
        let held = a.acquire(&name, &opts(2000).auto_renew(false)).await.unwrap();
        for i in 0..3 {
            fx.master(i).stop().await.unwrap();
            fx.master(i).start().await.unwrap();
        }
        let restarted = Instant::now();
        let got = b.acquire(&name, &opts(2000).wait(Duration::from_secs(15))).await.unwrap();
        let at = Instant::now();
        eprintln!("granted {:?} after the restart of 3 of 5 masters", at - restarted);
        assert!(
            at >= held.valid_until().into_std(),
            "granted while the first lease was still valid for {:?}",
            held.valid_until().into_std() - at
        );
        assert!(got.token() > held.token());
    }

    /// A minority holding the key for another owner (e.g. a split vote) does not block a grant.
    #[tokio::test]
    async fn split_minority_does_not_block() {
        let (fx, c) = five().await;
        for i in 0..2 {
            hold_for(&mut raw(&fx, i).await, "dlock:{split}:lock", "someone-else").await;
        }
        let l = c.try_acquire(&LockName::new("split").unwrap(), &opts(1000)).await.unwrap();
        assert!(l.is_some(), "3 of 5 free masters must grant");
        // And three held elsewhere: no grant.
        let mut m = raw(&fx, 2).await;
        drop(l);
        tokio::time::sleep(Duration::from_millis(200)).await;
        hold_for(&mut m, "dlock:{split}:lock", "someone-else").await;
        let l = c.try_acquire(&LockName::new("split").unwrap(), &opts(1000)).await.unwrap();
        assert!(l.is_none(), "a majority held by another owner must not grant");
    }

    /// A refused attempt undoes what it may have taken, and only there: the masters that
    /// answered "held" get no undo (it would find nothing of this attempt), the ones that
    /// granted it do.
    #[tokio::test]
    async fn a_refused_attempt_undoes_only_where_it_may_have_taken() {
        let (fx, c) = five().await;
        warm(&c).await;
        let key = "dlock:{undo}:lock";
        for i in 0..3 {
            hold_for(&mut raw(&fx, i).await, key, "someone-else").await;
        }
        let evalsha = |info: String| {
            info.lines()
                .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap())
        };
        let mut conns = Vec::new();
        for i in 0..5 {
            let mut m = raw(&fx, i).await;
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut m).await.unwrap();
            conns.push(m);
        }
        let l = c.try_acquire(&LockName::new("undo").unwrap(), &opts(10_000)).await.unwrap();
        assert!(l.is_none(), "three of five held by another owner");
        tokio::time::sleep(Duration::from_millis(500)).await;
        for (i, m) in conns.iter_mut().enumerate() {
            let owner: Option<String> = redis::cmd("HGET").arg(key).arg("o").query_async(m).await.unwrap();
            let info: String = redis::cmd("INFO").arg("commandstats").query_async(m).await.unwrap();
            let scripts = evalsha(info);
            if i < 3 {
                assert_eq!(owner.as_deref(), Some("someone-else"), "master {i} keeps the other owner's lease");
                assert_eq!(scripts, 1, "master {i} refused: the acquire and no undo");
            } else {
                assert_eq!(owner, None, "master {i}: what the attempt may have taken there is undone");
            }
        }
    }

    /// Tokens left by the release (lock-redis `scripts/redlock.rs`): a waiter queued behind a holder
    /// of token `T` is granted `T + 1` by the release on every master and holds it after its
    /// own lease step, with no fence store. When the masters' grants name different tokens
    /// (here the releaser's token, which each master keeps with the lease, is made to differ on
    /// two of three), no token was stored on a majority: the waiter's round falls back to a
    /// fence store of a token above all of them, stored on a majority.
    #[tokio::test]
    async fn a_hand_off_is_confirmed_by_a_majority_naming_one_token() {
        let fx = RedlockFixture::start_n(3).await.unwrap();
        let [a, b, c] = [(); 3].map(|_| fx.redlock_client());
        let (a, b, c) = (a.await.unwrap(), b.await.unwrap(), c.await.unwrap());
        let name = LockName::new("handed").unwrap();
        let key = "dlock:{handed}:lock";
        let settle = Duration::from_millis(200);

        let held = a.acquire(&name, &opts(5000)).await.unwrap();
        let t = held.token().0;
        let waiter = tokio::spawn(async move { b.acquire(&LockName::new("handed").unwrap(), &opts(5000)).await });
        tokio::time::sleep(settle).await;
        held.release().await.unwrap();
        let handed = waiter.await.unwrap().unwrap();
        assert_eq!(handed.token().0, t + 1, "the release's grant, confirmed by a majority");

        let next = tokio::spawn(async move { c.acquire(&LockName::new("handed").unwrap(), &opts(5000)).await });
        tokio::time::sleep(settle).await;
        for (i, bump) in [(1, 5), (2, 9)] {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("t")
                .arg(t + 1 + bump)
                .query_async(&mut raw(&fx, i).await)
                .await
                .unwrap();
        }
        handed.release().await.unwrap();
        let lease = next.await.unwrap().unwrap();
        let token = lease.token().0;
        assert!(token > t + 11, "grants of {}, {} and {} confirm nothing together: got {token}", t + 2, t + 7, t + 11);
        let mut stored = 0;
        for i in 0..3 {
            let fence: u64 =
                redis::cmd("GET").arg("dlock:{handed}:fence").query_async(&mut raw(&fx, i).await).await.unwrap();
            stored += usize::from(fence == token);
        }
        assert!(stored >= 2, "the fallback's token is stored on a majority ({stored} of 3)");
        lease.release().await.unwrap();
    }

    #[tokio::test]
    async fn redlock_urls() {
        for url in ["redlock://", "redlock://a:1,,b:2", "redlock://a:1?x=1", "redis://a:1"] {
            let r = lock_redis::connect_redlock(url, crate::common::test_options()).await;
            assert!(matches!(r, Err(LockError::Config { .. })), "{url}: {:?}", r.err());
        }
        let p1 = dlock_testkit::process::free_port().unwrap();
        let p2 = dlock_testkit::process::free_port().unwrap();
        let t = Instant::now();
        let r = lock_redis::connect_redlock(
            &format!("redlock://127.0.0.1:{p1},127.0.0.1:{p2},127.0.0.1:{p1}"),
            crate::common::test_options(),
        )
        .await;
        assert!(matches!(r, Err(LockError::Unavailable { .. })), "{:?}", r.err());
        assert!(t.elapsed() < Duration::from_secs(3));
    }
}

lock_conformance::conformance_tests!(redlock, || async { crate::common::RedlockFixture::start().await }, strict);
lock_conformance::waiter_child_test!(common::connect_redlock_child);
