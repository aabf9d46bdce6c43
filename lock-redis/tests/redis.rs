//! The single-instance backend against fresh local `redis-server`s: Redis-specific cases here;
//! the shared conformance suite is invoked at the bottom.

mod common;

mod redis_extra {
    use std::future::Future;
    use std::time::{Duration, Instant};

    use lock_core::{
        AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName, LockService,
    };

    use tokio::task::JoinHandle;

    use crate::common::RedisFixture;

    pub(crate) fn opts(ttl_ms: u64) -> AcquireOptions {
        AcquireOptions::new(Duration::from_millis(ttl_ms))
            .wait(Duration::from_secs(5))
            .request_timeout(Duration::from_secs(1))
    }

    pub(crate) async fn raw(fx: &RedisFixture) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(fx.server.url()).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }

    /// Spawns the wait `acquire`, which notes when it got its lease.
    pub(crate) fn timed<L: Send + 'static>(
        acquire: impl Future<Output = Result<L, LockError>> + Send + 'static,
    ) -> JoinHandle<(Instant, L)> {
        tokio::spawn(async move {
            let lease = acquire.await.unwrap();
            (Instant::now(), lease)
        })
    }

    /// The lease of the [`timed`] `waiter`, which must have got it within `within` of
    /// `released`: the release woke it through pub/sub, long before its fallback re-try.
    pub(crate) async fn woken<L>(
        waiter: JoinHandle<(Instant, L)>,
        released: Instant,
        within: Duration,
        what: &str,
    ) -> L {
        let (got, lease) = waiter.await.unwrap();
        let latency = got - released;
        eprintln!("{what} woken {latency:?} after the release");
        assert!(latency < within, "{what} took {latency:?} after the release");
        lease
    }

    /// Runs `release`, then [`woken`]: the lease of the `waiter` it must have woken.
    pub(crate) async fn woken_by<L>(
        release: impl Future<Output = Result<(), LockError>>,
        waiter: JoinHandle<(Instant, L)>,
        within: Duration,
        what: &str,
    ) -> L {
        let released = Instant::now();
        release.await.unwrap();
        woken(waiter, released, within, what).await
    }

    /// A fresh fixture, a client of it, the lock `name` and a raw connection to the server.
    async fn client_and_raw(
        name: &str,
    ) -> (RedisFixture, lock_redis::RedisLock, LockName, redis::aio::MultiplexedConnection) {
        let fx = RedisFixture::start().await.unwrap();
        let c = fx.redis_client().await.unwrap();
        let conn = raw(&fx).await;
        (fx, c, LockName::new(name).unwrap(), conn)
    }

    /// A fresh fixture, two clients of it (two processes) and the lock `name`.
    async fn two_clients(name: &str) -> (RedisFixture, lock_redis::RedisLock, lock_redis::RedisLock, LockName) {
        let fx = RedisFixture::start().await.unwrap();
        let (a, b) = (fx.redis_client().await.unwrap(), fx.redis_client().await.unwrap());
        (fx, a, b, LockName::new(name).unwrap())
    }

    /// What the exclusive lock needs of an ACL user at the least, as the crate docs list it.
    pub(crate) const LEAST_EXCLUSIVE: &[&str] = &[
        "+evalsha",
        "+script|load",
        "+ping",
        "+subscribe",
        "+unsubscribe",
        "+publish",
        "+hget",
        "+hmget",
        "+hset",
        "+pexpire",
        "+pttl",
        "+time",
        "+incr",
        "+get",
        "+set",
        "+del",
        "+zadd",
        "+zrange",
        "+zrangebyscore",
        "+zscore",
        "+zrem",
        "+zcard",
        "+hdel",
        "+exists",
        "+rpush",
        "+blpop",
    ];

    /// What the read-write lock and the semaphore need beyond [`LEAST_EXCLUSIVE`].
    pub(crate) const LEAST_KINDS: &[&str] = &["+zremrangebyscore", "+zrank", "+zcount"];

    /// A fresh server of the test's own, its address and a raw connection to it, for `case`,
    /// which changes the server's ACLs: `None`, said as not applicable, on an external server.
    pub(crate) async fn acl_server(
        case: &str,
    ) -> Option<(RedisFixture, std::net::SocketAddr, redis::aio::MultiplexedConnection)> {
        let fx = RedisFixture::start().await.unwrap();
        let Some(addr) = fx.server.addr().filter(|_| fx.owned()) else {
            eprintln!("NOT APPLICABLE {case}: the server is external (the test changes its ACLs)");
            return None;
        };
        let conn = raw(&fx).await;
        Some((fx, addr, conn))
    }

    /// Makes the ACL user `user`, password `pw`, allowed `rules` on the keys and channels under
    /// `prefix` only.
    pub(crate) async fn acl_user(
        conn: &mut redis::aio::MultiplexedConnection,
        prefix: &str,
        user: &str,
        pw: &str,
        rules: &[&str],
    ) {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg(user).arg("on").arg(format!(">{pw}")).arg(format!("~{prefix}:*"));
        cmd.arg(format!("&{prefix}:*")).arg("-@all").arg(rules);
        let _: () = cmd.query_async(conn).await.unwrap();
    }

    /// `idle_gc_after` lets the name's hash (lease and token counter) expire `ttl +
    /// idle_gc_after` after a grant or renewal (docs/contract.md §5.7); without it the key has no
    /// expiry. The holder id rides in the hash too.
    #[tokio::test]
    async fn idle_gc_after_expires_fence_keys() {
        let fx = RedisFixture::start().await.unwrap();
        let name = LockName::new("idle-gc").unwrap();
        let fence = fx.key(&name.escaped(), "lock");
        let mut raw = raw(&fx).await;
        let plain = fx.redis_client().await.unwrap();
        plain.try_acquire(&name, &opts(1000)).await.unwrap().expect("free").release().await.unwrap();
        let pttl: i64 = redis::cmd("PTTL").arg(&fence).query_async(&mut raw).await.unwrap();
        assert_eq!(pttl, -1, "without idle_gc_after the fence key has no expiry");
        let options = lock_redis::RedisOptions { idle_gc_after: Some(Duration::from_secs(3600)), ..fx.options.clone() };
        let gc = lock_redis::connect(fx.server.url(), options).await.unwrap();
        let who = lock_core::Holder::new("gc-1").unwrap();
        let lease = gc.try_acquire(&name, &opts(1000).holder(who)).await.unwrap().expect("free");
        let pttl: i64 = redis::cmd("PTTL").arg(&fence).query_async(&mut raw).await.unwrap();
        assert!(pttl > 3_590_000 && pttl <= 3_601_000, "fence key PTTL {pttl} ms, want ttl + 1 h");
        let info = plain.inspect(&name).await.unwrap().expect("held");
        assert_eq!((info.holder.as_deref(), info.token), (Some("gc-1"), lease.token()));
        lease.release().await.unwrap();
    }

    #[tokio::test]
    async fn basics_tokens_and_capabilities() {
        let (_fx, a, b, name) = two_clients("basics").await;
        assert_eq!(a.backend(), "redis");
        let caps = a.capabilities();
        // The exclusive lock queues its waiters on the server: arrival order.
        assert!(caps.durable_fencing && !caps.durable_leases && caps.fifo);
        let l1 = a.try_acquire(&name, &opts(2000)).await.unwrap().expect("free");
        assert!(b.try_acquire(&name, &opts(2000)).await.unwrap().is_none());
        l1.release().await.unwrap();
        let l2 = b.try_acquire(&name, &opts(2000)).await.unwrap().expect("free again");
        assert!(l2.token() > l1.token(), "{} then {}", l1.token(), l2.token());
        // Tokens are floored by the server clock in microseconds.
        let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
        assert!(l1.token().0 > now_us - 60_000_000, "token {} is not floored by TIME", l1.token());
        l2.release().await.unwrap();
    }

    /// `max_waiters`: with the cap reached, one more waiting `acquire` fails at once with an
    /// `InvalidOptions` error that names the option and what to do, and is not queued; a single
    /// try is not limited (it never queues). The queued waiter is served as before.
    #[tokio::test]
    async fn waiters_past_max_waiters_are_refused() {
        let fx = RedisFixture::start().await.unwrap();
        let options = lock_redis::RedisOptions { max_waiters: 1, ..fx.options.clone() };
        let (a, b) = (fx.redis_client().await.unwrap(), lock_redis::connect(fx.server.url(), options).await.unwrap());
        let name = LockName::new("capped").unwrap();
        let held = a.acquire(&name, &opts(5000)).await.unwrap();
        let waiters = fx.key(&name.escaped(), "waiters");
        let mut c = raw(&fx).await;
        let first = first_waiter(&mut c, &waiters, {
            let (b, name) = (b.clone(), name.clone());
            async move { b.acquire(&name, &opts(5000)).await }
        })
        .await;
        let begun = Instant::now();
        let e = b.acquire(&name, &opts(5000)).await.expect_err("a second waiter is past the cap");
        assert!(matches!(e, LockError::InvalidOptions { .. }), "{e:?}");
        assert!(e.to_string().contains("max_waiters") && e.to_string().contains("1 waiters"), "{e}");
        assert!(begun.elapsed() < Duration::from_secs(2), "refused at once, not at the wait's end");
        assert!(b.try_acquire(&name, &opts(5000)).await.unwrap().is_none(), "a single try is not limited");
        let queued: usize = redis::cmd("ZCARD").arg(&waiters).query_async(&mut c).await.unwrap();
        assert_eq!(queued, 1, "the refused waiter did not queue");
        held.release().await.unwrap();
        let got = first.await.unwrap().expect("the queued waiter gets the lock");
        got.release().await.unwrap();
    }

    /// The read-write lock's and the semaphore's queues have the same cap and the same error: a
    /// reader queued behind a writer, a permit waiter behind the only permit's holder; one more
    /// waiter fails at once with `InvalidOptions` naming `max_waiters`, without queueing.
    #[tokio::test]
    async fn kinds_waiters_past_max_waiters_are_refused() {
        let fx = RedisFixture::start().await.unwrap();
        let capped = lock_redis::RedisOptions { max_waiters: 1, ..fx.options.clone() };
        let url = fx.server.url();
        let mut c = raw(&fx).await;
        let refused = |e: LockError, what: &str| {
            assert!(matches!(e, LockError::InvalidOptions { .. }), "{what}: {e:?}");
            assert!(e.to_string().contains("max_waiters") && e.to_string().contains("1 waiters"), "{what}: {e}");
        };

        let rw_a = std::sync::Arc::new(lock_redis::connect_rw(url, fx.options.clone()).await.unwrap());
        let rw_b = std::sync::Arc::new(lock_redis::connect_rw(url, capped.clone()).await.unwrap());
        let name = LockName::new("capped-rw").unwrap();
        let writer = rw_a.acquire_write(&name, &opts(5000)).await.unwrap();
        let waiters = fx.key(&name.escaped(), "rw:waiters");
        let first = first_waiter(&mut c, &waiters, {
            let (b, name) = (rw_b.clone(), name.clone());
            async move { b.acquire_read(&name, &opts(5000)).await }
        })
        .await;
        refused(rw_b.acquire_read(&name, &opts(5000)).await.expect_err("past the cap"), "a second reader");
        refused(rw_b.acquire_write(&name, &opts(5000)).await.expect_err("past the cap"), "a second writer");
        let left: usize = redis::cmd("ZCARD").arg(&waiters).query_async(&mut c).await.unwrap();
        assert_eq!(left, 1, "the refused waiters did not queue");
        writer.release().await.unwrap();
        first.await.unwrap().expect("the queued reader gets the lock").release().await.unwrap();

        let sem_a = std::sync::Arc::new(lock_redis::connect_semaphore(url, fx.options.clone()).await.unwrap());
        let sem_b = std::sync::Arc::new(lock_redis::connect_semaphore(url, capped).await.unwrap());
        let name = LockName::new("capped-sem").unwrap();
        let holder = sem_a.acquire_permit(&name, 1, &opts(5000)).await.unwrap();
        let waiters = fx.key(&name.escaped(), "sem:waiters");
        let first = first_waiter(&mut c, &waiters, {
            let (b, name) = (sem_b.clone(), name.clone());
            async move { b.acquire_permit(&name, 1, &opts(5000)).await }
        })
        .await;
        refused(sem_b.acquire_permit(&name, 1, &opts(5000)).await.expect_err("past the cap"), "a second permit waiter");
        holder.release().await.unwrap();
        first.await.unwrap().expect("the queued permit waiter gets one").release().await.unwrap();
    }

    /// Spawns `wait`, the first waiter, and returns once it is queued: the sorted set `waiters`
    /// has one member.
    async fn first_waiter<T: Send + 'static>(
        c: &mut redis::aio::MultiplexedConnection,
        waiters: &str,
        wait: impl Future<Output = T> + Send + 'static,
    ) -> JoinHandle<T> {
        let first = tokio::spawn(wait);
        let until = Instant::now() + Duration::from_secs(5);
        while redis::cmd("ZCARD").arg(waiters).query_async::<usize>(c).await.unwrap() == 0 {
            assert!(Instant::now() < until, "the first waiter never queued in {waiters}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        first
    }

    /// A Redis without persistence restarts empty: the next token is still greater.
    #[tokio::test]
    async fn restart_empty_keeps_tokens_monotonic() {
        let Some((fx, server)) = crate::common::owned_server("restart_empty_keeps_tokens_monotonic").await else {
            return;
        };
        let c = fx.redis_client().await.unwrap();
        let name = LockName::new("restart").unwrap();
        let mut last = 0;
        for _ in 0..5 {
            let l = c.acquire(&name, &opts(1000)).await.unwrap();
            assert!(l.token().0 > last);
            last = l.token().0;
            l.release().await.unwrap();
        }
        crate::common::restart(&*server).await;
        // One attempt, no waiting: the dead idle connection is replaced transparently (an
        // answer, not an error), and the server that lost its state grants nothing during its
        // quiet period.
        let quiet = c.try_acquire(&name, &opts(1000)).await.unwrap();
        assert!(quiet.is_none(), "granted right after an empty restart");
        let l = c.acquire(&name, &opts(1000)).await.unwrap();
        assert!(l.token().0 > last, "token went from {last} to {} across an empty restart", l.token());
        l.release().await.unwrap();
    }

    /// The fence counter evicted or deleted: the TIME floor keeps tokens increasing.
    #[tokio::test]
    async fn deleted_counter_keeps_tokens_monotonic() {
        let (fx, c, name, mut conn) = client_and_raw("evicted").await;
        let l1 = c.acquire(&name, &opts(1000)).await.unwrap();
        l1.release().await.unwrap();
        let _: i64 = redis::cmd("DEL").arg(fx.key("evicted", "lock")).query_async(&mut conn).await.unwrap();
        let l2 = c.acquire(&name, &opts(1000)).await.unwrap();
        assert!(l2.token() > l1.token());
        l2.release().await.unwrap();
    }

    /// SCRIPT FLUSH between calls: scripts are re-loaded on NOSCRIPT.
    #[tokio::test]
    async fn noscript_reload() {
        let (_fx, c, name, mut conn) = client_and_raw("noscript").await;
        let l = c.acquire(&name, &opts(2000)).await.unwrap();
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.unwrap();
        l.renew().await.unwrap();
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.unwrap();
        l.release().await.unwrap();
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.unwrap();
        let l = c.acquire(&name, &opts(2000)).await.unwrap();
        l.release().await.unwrap();
    }

    /// Keys: one hash tag per lock, hostile names escaped, nothing collides.
    #[tokio::test]
    async fn hostile_names_and_hash_tags() {
        let fx = RedisFixture::start().await.unwrap();
        let c = fx.redis_client().await.unwrap();
        let names =
            ["a/b", "a%2Fb", "../x", "{tag}", "}{", "'; DROP TABLE locks; --", "ключ 🔒", "*", "a:b", &"x".repeat(255)];
        let mut leases = Vec::new();
        for n in names {
            let name = LockName::new(n).unwrap();
            leases.push(c.try_acquire(&name, &opts(5000)).await.unwrap().unwrap_or_else(|| panic!("{n:?} collided")));
        }
        let mut conn = raw(&fx).await;
        let keys: Vec<String> =
            redis::cmd("KEYS").arg(fx.key("*", "lock").replace("{*}", "*")).query_async(&mut conn).await.unwrap();
        assert_eq!(keys.len(), names.len());
        for k in &keys {
            assert_eq!(k.matches('{').count(), 1, "{k}");
            assert_eq!(k.matches('}').count(), 1, "{k}");
        }
        for l in leases {
            l.release().await.unwrap();
        }
    }

    #[tokio::test]
    async fn unreachable_server_is_unavailable_fast() {
        let port = dlock_testkit::process::free_port().unwrap();
        let t = Instant::now();
        let r = lock_redis::connect(&format!("redis://127.0.0.1:{port}"), crate::common::test_options()).await;
        assert!(matches!(r, Err(LockError::Unavailable { .. })), "{:?}", r.err());
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // A black hole (TEST-NET-1): bounded by the connect timeout.
        let t = Instant::now();
        let r = lock_redis::connect("redis://192.0.2.1:6379", crate::common::test_options()).await;
        assert!(matches!(r, Err(LockError::Unavailable { .. })), "{:?}", r.err());
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    }

    #[tokio::test]
    async fn bad_urls_are_config_errors() {
        for url in ["http://x", "redis://", "not a url", "redis://h:99999"] {
            let r = lock_redis::connect(url, crate::common::test_options()).await;
            assert!(matches!(r, Err(LockError::Config { .. })), "{url}: {:?}", r.err());
        }
        let r = lock_redis::connect("redis://u:sekrit@127.0.0.1:1", crate::common::test_options()).await;
        let e = r.err().unwrap().to_string();
        assert!(!e.contains("sekrit"), "{e}");
    }

    /// AUTH from the URL; wrong passwords are a Config error that does not echo the password.
    #[tokio::test]
    async fn auth_from_url() {
        let Some((fx, addr, mut conn)) = acl_server("auth_from_url").await else { return };
        let prefix = fx.options.key_prefix.clone();
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "locker", "on", ">pw1", "~*", "&*", "+@all"])
            .query_async(&mut conn)
            .await
            .unwrap();
        let ok = lock_redis::connect(&format!("redis://locker:pw1@{addr}/0"), fx.options.clone()).await.unwrap();
        let shown = format!("{:?}", ok.store());
        assert!(!shown.contains("pw1") && shown.contains("***"), "{shown}");
        let l = ok.try_acquire(&LockName::new("auth").unwrap(), &opts(1000)).await.unwrap().unwrap();
        l.release().await.unwrap();
        // The least an ACL user needs (as documented in the crate docs).
        acl_user(&mut conn, &prefix, "minimal", "pw2", LEAST_EXCLUSIVE).await;
        let min = lock_redis::connect(&format!("redis://minimal:pw2@{addr}"), fx.options.clone()).await.unwrap();
        let other = fx.redis_client().await.unwrap();
        let name = LockName::new("acl").unwrap();
        let held = other.try_acquire(&name, &opts(5000)).await.unwrap().unwrap();
        let waiter = tokio::spawn(async move { min.acquire(&LockName::new("acl").unwrap(), &opts(5000)).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
        let got = waiter.await.unwrap().unwrap();
        got.renew().await.unwrap();
        got.release().await.unwrap();
        let bad = lock_redis::connect(&format!("redis://locker:wrongpw@{addr}"), crate::common::test_options()).await;
        let e = bad.err().unwrap();
        assert!(matches!(e, LockError::Config { .. }), "{e}");
        assert!(!e.to_string().contains("wrongpw"), "{e}");
    }

    /// The documented least ACL works for every kind, on database 1 with `+select`; a user
    /// missing one permission (`+publish`, `+select`, a sorted-set command) is refused at
    /// connect with a `Config` error naming it, before any script could run half-way.
    #[tokio::test]
    async fn least_acl_is_checked_at_connect() {
        let Some((fx, addr, mut conn)) = acl_server("least_acl_is_checked_at_connect").await else { return };
        let prefix = fx.options.key_prefix.clone();
        let without = |rules: &[&'static str], gone: &str| -> Vec<&'static str> {
            rules.iter().copied().filter(|r| *r != gone).collect()
        };
        let all: Vec<&str> = LEAST_EXCLUSIVE.iter().chain(LEAST_KINDS).copied().chain(["+select"]).collect();
        for (user, rules) in [
            ("least", all.clone()),
            ("nopublish", without(&all, "+publish")),
            ("noselect", without(&all, "+select")),
            ("exclusiveonly", LEAST_EXCLUSIVE.to_vec()),
            ("noqueue", without(LEAST_EXCLUSIVE, "+zadd")),
        ] {
            acl_user(&mut conn, &prefix, user, "pw", &rules).await;
        }
        // Database 1 must be fresh for this prefix too.
        let _: () = redis::cmd("SELECT").arg(1).query_async(&mut conn).await.unwrap();
        let _: () = redis::cmd("SET").arg(format!("{prefix}:boot")).arg(0).query_async(&mut conn).await.unwrap();
        let _: () = redis::cmd("SELECT").arg(0).query_async(&mut conn).await.unwrap();

        let url = |user: &str, db: u32| format!("redis://{user}:pw@{addr}/{db}");
        let o = || fx.options.clone();
        let lock = lock_redis::connect(&url("least", 1), o()).await.unwrap();
        let rw = lock_redis::connect_rw(&url("least", 1), o()).await.unwrap();
        let sem = lock_redis::connect_semaphore(&url("least", 1), o()).await.unwrap();
        let name = LockName::new("least").unwrap();
        let l = lock.acquire(&name, &opts(2000)).await.unwrap();
        l.renew().await.unwrap();
        l.release().await.unwrap();
        let r = rw.acquire_read(&name, &opts(2000)).await.unwrap();
        r.release().await.unwrap();
        let w = rw.acquire_write(&name, &opts(2000)).await.unwrap();
        w.release().await.unwrap();
        let p = sem.acquire_permit(&name, 2, &opts(2000)).await.unwrap();
        p.release().await.unwrap();

        let refused = |r: Result<(), LockError>, what: &str| {
            let e = r.expect_err(what);
            assert!(matches!(e, LockError::Config { .. }), "{what}: {e}");
            assert!(e.to_string().contains(what), "the error names {what}: {e}");
            assert!(!e.to_string().contains(":pw@"), "no password in {e}");
        };
        refused(lock_redis::connect(&url("nopublish", 0), o()).await.map(|_| ()), "publish");
        refused(lock_redis::connect_rw(&url("nopublish", 0), o()).await.map(|_| ()), "publish");
        refused(lock_redis::connect(&url("noselect", 1), o()).await.map(|_| ()), "select");
        refused(lock_redis::connect_semaphore(&url("exclusiveonly", 0), o()).await.map(|_| ()), "zremrangebyscore");
        refused(lock_redis::connect(&url("noqueue", 0), o()).await.map(|_| ()), "zadd");
        lock_redis::connect(&url("exclusiveonly", 0), o()).await.expect("the exclusive lock needs no more");
    }

    /// `rediss://`: TLS with a private CA (`tls_ca_file`) works; without it the unknown issuer
    /// is `Unavailable`, fast, and nothing panics (rustls crypto provider installed).
    #[tokio::test]
    async fn tls_from_url() {
        use dlock_testkit::process::{find_binary, free_port, wait_for_port, ChildServer};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        dlock_testkit::certs::server_certs(d).expect("the test's certificates");
        let port = free_port().unwrap();
        let p = |f: &str| d.join(f).to_string_lossy().into_owned();
        let args: Vec<String> = [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            &p("server.pem"),
            "--tls-key-file",
            &p("server.key"),
            "--tls-ca-cert-file",
            &p("ca.pem"),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let server = ChildServer::new(find_binary("redis-server", &[]).unwrap(), args, d);
        server.start().unwrap();
        wait_for_port(std::net::SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(10)).await.unwrap();
        let url = format!("rediss://127.0.0.1:{port}");

        // A fresh server: no restart quiet period to wait for.
        let options = lock_redis::RedisOptions {
            tls_ca_file: Some(d.join("ca.pem")),
            restart_quiet_period: Some(Duration::ZERO),
            ..crate::common::test_options()
        };
        let c = lock_redis::connect(&url, options).await.unwrap();
        let l = c.try_acquire(&LockName::new("tls").unwrap(), &opts(1000)).await.unwrap().expect("free");
        l.release().await.unwrap();

        let t = Instant::now();
        let r = lock_redis::connect(&url, crate::common::test_options()).await;
        assert!(matches!(r, Err(LockError::Unavailable { .. })), "{:?}", r.err());
        assert!(t.elapsed() < Duration::from_secs(3));
        let missing =
            lock_redis::RedisOptions { tls_ca_file: Some(d.join("nope.pem")), ..crate::common::test_options() };
        assert!(matches!(lock_redis::connect(&url, missing).await, Err(LockError::Config { .. })));
    }

    /// A release wakes a waiter through pub/sub, long before the fallback re-try.
    #[tokio::test]
    async fn release_wakes_waiter_quickly() {
        let (_fx, a, b, name) = two_clients("wake").await;
        let ttl = 10_000;
        let held = a.acquire(&name, &opts(ttl)).await.unwrap();
        let waiter = timed({
            let name = name.clone();
            async move { b.acquire(&name, &opts(ttl).wait(Duration::from_secs(8))).await }
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        let lease = woken_by(held.release(), waiter, Duration::from_millis(300), "the waiter").await;
        lease.release().await.unwrap();
    }

    /// The pub/sub connection comes back after a server restart and wakes its waiters: a waiter
    /// on a lock the restart freed gets it as soon as the restart quiet period (3 s here) ends,
    /// not at its fallback re-try.
    #[tokio::test]
    async fn pubsub_reconnect_wakes_waiters() {
        let Some((fx, server)) = crate::common::owned_server("pubsub_reconnect_wakes_waiters").await else { return };
        let a = fx.redis_client().await.unwrap();
        let b = fx.redis_client().await.unwrap();
        let name = LockName::new("reconnect").unwrap();
        let _held = a.acquire(&name, &opts(10_000)).await.unwrap();
        let waiter = timed({
            let name = name.clone();
            async move { b.acquire(&name, &opts(10_000).wait(Duration::from_secs(8))).await }
        });
        tokio::time::sleep(Duration::from_millis(2500)).await;
        crate::common::restart(&*server).await;
        let back = Instant::now();
        let (got, lease) = waiter.await.unwrap();
        let after = got - back;
        eprintln!("waiter got the lock {after:?} after the restart");
        let quiet = fx.options.quiet_period();
        assert!(
            after >= quiet - Duration::from_millis(500),
            "granted {after:?} after an empty restart, quiet {quiet:?}"
        );
        assert!(after < quiet + Duration::from_millis(1200), "waiter took {after:?} after the restart");
        lease.release().await.unwrap();
    }

    /// The holder is told when the server forgets its lease (restart without persistence).
    #[tokio::test]
    async fn restart_fires_lost_signal() {
        let Some((fx, server)) = crate::common::owned_server("restart_fires_lost_signal").await else { return };
        let c = fx.redis_client().await.unwrap();
        let lease = c.acquire(&LockName::new("lost").unwrap(), &opts(1000)).await.unwrap();
        crate::common::restart(&*server).await;
        tokio::time::timeout(Duration::from_secs(3), lease.lost().fired()).await.expect("lost signal fired");
        assert!(!lease.is_valid());
    }
}

#[path = "redis/kinds.rs"]
mod redis_kinds;

lock_conformance::conformance_tests!(redis, || async { crate::common::RedisFixture::start().await }, strict);
lock_conformance::waiter_child_test!(common::connect_child);

#[path = "redis/quiet.rs"]
mod quiet_is_said;
