//! The single-instance backend on a real Redis Cluster (`redis+cluster://`, 3 masters + 3
//! replicas started by the testkit): the conformance suite in strict mode, hostile names, a slot
//! migrated while its lock is held, and a master killed while its lock is held.
//!
//! nextest runs every test in a process of its own, so a cluster cannot be shared between
//! tests: each test here starts one and does all its work on it (the suite runs through
//! `run_suite`, two cases at a time, instead of one process and cluster per case).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_testkit::servers::redis_cluster::RedisCluster;
use futures::StreamExt;
use lock_conformance::cases::MISSING_HOOK;
use lock_conformance::proxy::ProxyGroup;
use lock_conformance::runner::{run_case, runs_alone, Outcome};
use lock_conformance::{async_trait, DeploymentControl, Fixture, LinkedClient, ServerControl};
use lock_core::{
    backend::LeaseStore, AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName,
};
use lock_redis::RedisOptions;

/// One cluster, one key prefix, marked fresh on every slot.
#[derive(Clone)]
struct ClusterFixture {
    cluster: Arc<RedisCluster>,
    options: RedisOptions,
    /// What the nemeses may inject (see [`ClusterFaults`]).
    faults: Vec<&'static str>,
}

impl ClusterFixture {
    /// A client of the cluster whose grants `acks` replicas must acknowledge.
    async fn lock_client(&self, acks: u32) -> lock_redis::RedisLock {
        let options = RedisOptions { min_replicas_ack: acks, ..self.options.clone() };
        lock_redis::connect(&self.cluster.url(), options).await.expect("connect")
    }

    /// The strict suites' fixture. Its clients ask for `min_replicas_ack = 1`, the setting under
    /// which a lease survives a failover (crate docs, "Failover"): the suites pause the whole
    /// cluster, and nodes that wake to pings older than `cluster-node-timeout` may fail a master
    /// over on their own. Without acknowledgements a full run once saw `kinds_nemesis` grant a
    /// writer over a valid reader after such pauses, as the Sentinel suite did before its clients
    /// asked for acknowledgements.
    async fn start() -> Result<ClusterFixture, LockError> {
        Self::start_with(1, vec!["failover", "kill-replica"]).await
    }

    /// A fixture whose clients ask for `acks` replicas (`min_replicas_ack`) and whose nemeses
    /// inject `faults`.
    async fn start_with(acks: u32, faults: Vec<&'static str>) -> Result<ClusterFixture, LockError> {
        let cluster = Arc::new(RedisCluster::start().await?);
        let options = RedisOptions {
            key_prefix: format!("dlock-c{:08x}", rand::random::<u32>()),
            min_replicas_ack: acks,
            ..common::test_options()
        };
        let fixture = ClusterFixture { cluster, options, faults };
        fixture.mark_fresh().await?;
        Ok(fixture)
    }

    /// What an operator does for a new cluster: every slot's boot marker set to 0.
    async fn mark_fresh(&self) -> Result<(), LockError> {
        self.set_markers("0", false).await
    }

    /// Sets every slot's boot marker to `value` (only where missing with `nx`).
    async fn set_markers(&self, value: &str, nx: bool) -> Result<(), LockError> {
        let c = self.raw().await?;
        let markers = lock_redis::cluster_boot_markers(&self.options.key_prefix);
        for chunk in markers.chunks(512) {
            let sets = chunk.iter().map(|key| {
                let mut c = c.clone();
                let mut set = redis::cmd("SET");
                set.arg(key).arg(value);
                if nx {
                    set.arg("NX");
                }
                async move { set.query_async::<redis::Value>(&mut c).await }
            });
            for r in futures::future::join_all(sets).await {
                r.map_err(|e| LockError::backend("test", e))?;
            }
        }
        Ok(())
    }

    /// A plain cluster connection of the test's own.
    async fn raw(&self) -> Result<redis::cluster_async::ClusterConnection, LockError> {
        let nodes: Vec<String> = (0..self.cluster.len()).map(|i| format!("redis://{}", self.cluster.addr(i))).collect();
        let client = redis::cluster::ClusterClient::new(nodes).map_err(|e| LockError::backend("test", e))?;
        tokio::time::timeout(Duration::from_secs(10), client.get_async_connection())
            .await
            .map_err(|_| LockError::unavailable("test", "connecting to the cluster timed out"))?
            .map_err(|e| LockError::backend("test", e))
    }

    async fn delete(&self, key: &str) -> Result<(), LockError> {
        let mut c = self.raw().await?;
        let _: i64 = redis::cmd("DEL").arg(key).query_async(&mut c).await.map_err(|e| LockError::backend("test", e))?;
        Ok(())
    }

    fn key(&self, name: &LockName, suffix: &str) -> String {
        format!("{}:{{{}}}:{suffix}", self.options.key_prefix, name.escaped())
    }
}

/// The whole cluster as "the server": every node stopped, paused or restarted together.
struct WholeCluster(Arc<RedisCluster>, Arc<ClusterFixture>);

#[async_trait]
impl ServerControl for WholeCluster {
    async fn stop(&self) -> Result<(), LockError> {
        self.0.kill_all();
        Ok(())
    }

    /// Every node comes back empty. On one server a single boot marker makes every name wait
    /// the quiet period from the first acquire after the restart; on a cluster each slot has its
    /// own marker, started by the first acquire in that slot. To give the cases the one-server
    /// timeline, every slot's quiet period starts now, as the acquire scripts would start it
    /// (`SET NX` of "quiet until" = server time + quiet period).
    async fn start(&self) -> Result<(), LockError> {
        self.0.restart_all().await?;
        let fx = &self.1;
        let mut c = fx.raw().await?;
        let (secs, micros): (u64, u64) =
            redis::cmd("TIME").query_async(&mut c).await.map_err(|e| LockError::backend("test", e))?;
        let quiet_ms = u64::try_from(fx.options.quiet_period().as_millis()).unwrap_or(u64::MAX);
        let until = (secs * 1000 + micros / 1000).saturating_add(quiet_ms);
        fx.set_markers(&until.to_string(), true).await
    }

    /// A resume returns once every node is back and every replica in sync (as `start` does):
    /// the strict suites ask for a replica's acknowledgement of every grant, and the cases
    /// expect grants again right after the deployment resumed, not once the replicas'
    /// links have caught up (a `kinds_server_pause` writer was refused "0 of 1 replicas
    /// acknowledged" three times in a row right after the resume).
    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        for i in 0..self.0.len() {
            self.0.pause(i, paused);
        }
        if paused {
            return Ok(());
        }
        self.0.wait_healthy().await
    }

    fn persistent(&self) -> bool {
        false
    }
}

lock_conformance::impl_fixture! {
    ClusterFixture, backend: "redis", |f| {
        client: lock_redis::connect(&f.cluster.url(), f.options.clone()).await?,
        rw: lock_redis::connect_rw(&f.cluster.url(), f.options.clone()).await?,
        semaphore: lock_redis::connect_semaphore(&f.cluster.url(), f.options.clone()).await?,
    }

    /// A proxy in front of every node; the client reaches each node through its proxy (the
    /// announced addresses are mapped with `cluster_node_map`), so the link faults hit all of it.
    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let addrs: Vec<std::net::SocketAddr> = (0..self.cluster.len()).map(|i| self.cluster.addr(i)).collect();
        let group = ProxyGroup::start(&addrs).await?;
        let proxied = group.local_addrs();
        let map: BTreeMap<String, String> =
            addrs.iter().zip(&proxied).map(|(real, proxy)| (real.to_string(), proxy.to_string())).collect();
        let hosts: Vec<String> = proxied.iter().map(|a| a.to_string()).collect();
        let url = format!("redis+cluster://{}", hosts.join(","));
        let options = RedisOptions { cluster_node_map: map, ..self.options.clone() };
        let client = lock_redis::connect(&url, options).await?;
        Ok(Some(LinkedClient { client: Arc::new(client), link: Arc::new(group) }))
    }

    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        Some(Arc::new(WholeCluster(Arc::clone(&self.cluster), Arc::new(self.clone()))))
    }

    fn deployment(&self) -> Option<Arc<dyn DeploymentControl>> {
        Some(Arc::new(ClusterFaults(Arc::clone(&self.cluster), self.faults.clone())))
    }

    async fn delete_entry(&self, name: &LockName) -> Result<bool, LockError> {
        self.delete(&self.key(name, "lock")).await?;
        Ok(true)
    }

    /// The name's hash (lease and token counter) expired, as `idle_gc_after` lets it.
    async fn collect_idle(&self, name: &LockName) -> Result<bool, LockError> {
        self.delete(&self.key(name, "lock")).await?;
        Ok(true)
    }

    async fn lease_stores(&self) -> Result<Vec<(&'static str, Arc<dyn LeaseStore>)>, LockError> {
        common::lease_stores_at(&self.cluster.url(), &self.options).await
    }

    async fn forge_grant(&self, name: &LockName, token: u64) -> Result<Option<usize>, LockError> {
        common::forge_grants_on(&mut self.raw().await?, &self.options.key_prefix, name, token).await.map(Some)
    }

    fn provenance(&self) -> String {
        format!("local redis-server cluster, 3 masters + 3 replicas ({:?})", self.cluster)
    }
}

/// The cluster's node faults for the nemeses: a coordinated failover of a random slot's master
/// (`CLUSTER FAILOVER`: the master stops writes until its replica caught up, so no acknowledged
/// lease is lost — a SIGKILLed master can lose its last writes without `min_replicas_ack`, which
/// this suite does not ask for; that case is `master_failover` below), and
/// a replica killed and restarted, and a master cut from its peers (`partition-master`:
/// `RedisCluster::partition`) — only for clients with `min_replicas_ack`, since without it the
/// cut-off master acknowledges renewals its promoted replica never sees (`cluster_partition.rs`
/// shows that limit); the fixture says which of them its nemeses draw from.
struct ClusterFaults(Arc<RedisCluster>, Vec<&'static str>);

#[async_trait]
impl DeploymentControl for ClusterFaults {
    fn faults(&self) -> Vec<&'static str> {
        self.1.clone()
    }

    async fn inject(&self, fault: &str, span: Duration) -> Result<String, LockError> {
        let slot = rand::random::<u16>() % 16384;
        let started = Instant::now();
        let what = match fault {
            "failover" => {
                let f = self.0.manual_failover(slot).await?;
                tokio::time::sleep(span).await;
                format!("CLUSTER FAILOVER of slot {slot}: node {} took over from {} in {:?}", f.new, f.old, f.took)
            }
            "kill-replica" => {
                let master = self
                    .0
                    .master_of(slot)
                    .await
                    .ok_or_else(|| LockError::unavailable("test", format!("no master serves slot {slot}")))?;
                let replica = self.0.replica_of(master).await?;
                self.0.kill(replica);
                tokio::time::sleep(span).await;
                self.0.restart(replica).await?;
                format!("replica {replica} of master {master} killed for {span:?}")
            }
            "partition-master" => {
                let f = self.0.partition_master_of(slot).await?;
                tokio::time::sleep(span).await;
                self.0.partition(f.old, false);
                format!("master {} of slot {slot} cut from its peers for {span:?} ({} promoted)", f.old, f.new)
            }
            other => return Err(LockError::unavailable("test", format!("no such cluster fault: {other}"))),
        };
        self.0.wait_healthy().await?;
        Ok(format!("{what}; the cluster was healthy again {:?} after the fault began", started.elapsed()))
    }
}

/// Runs the cases of the suite that `run_suite` runs alone (`alone`: one after the other) or the
/// others (three at a time) on a fresh cluster,
/// strictly: a failed or skipped case fails the test, and so does one not applicable only for a
/// missing fault hook (what `conformance_tests!(…, strict)` checks).
async fn suite(alone: bool) {
    let fixture = ClusterFixture::start().await.expect("a local Redis Cluster");
    run_strict(fixture, |c| runs_alone(c) == alone, if alone { 1 } else { 3 }, &format!("alone: {alone}")).await;
}

/// Runs the cases `pick` selects on `fixture`, `at_once` at a time, strictly (see [`suite`]).
async fn run_strict(
    fixture: ClusterFixture,
    pick: impl Fn(&lock_conformance::Case) -> bool,
    at_once: usize,
    label: &str,
) {
    let started = Instant::now();
    let fixture: Arc<dyn Fixture> = Arc::new(fixture);
    let cases: Vec<&'static lock_conformance::Case> =
        lock_conformance::all_cases().iter().filter(|c| pick(c)).collect();
    let run = |case: &'static lock_conformance::Case| {
        let fixture = Arc::clone(&fixture);
        async move {
            let r = run_case(case, fixture).await;
            eprintln!("{:?} {} in {} ms: {}", r.outcome, r.name, r.ms, r.detail);
            r
        }
    };
    let reports: Vec<_> = futures::stream::iter(cases).map(run).buffer_unordered(at_once).collect().await;
    let bad: Vec<String> = reports
        .iter()
        .filter(|r| match r.outcome {
            Outcome::Passed => false,
            Outcome::NotApplicable => r.detail.starts_with(MISSING_HOOK),
            Outcome::Failed | Outcome::Skipped => true,
        })
        .map(|r| format!("{:?} {}: {}", r.outcome, r.name, r.detail))
        .collect();
    let passed = reports.iter().filter(|r| r.outcome == Outcome::Passed).count();
    eprintln!("MEASURED cluster suite ({label}): {passed} of {} passed in {:?}", reports.len(), started.elapsed());
    assert!(passed > 0, "nothing ran");
    assert!(bad.is_empty(), "cases not passed on the cluster:\n{}", bad.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_strict_shared() {
    suite(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_strict_alone() {
    suite(true).await;
}

/// The nemeses with peer partitions: clients with `min_replicas_ack = 1`, so a master cut from
/// its peers can neither grant nor renew (its `WAIT` gets no replica), and faults drawn from a
/// coordinated failover and a master partition (no replica kill: with one replica per master it
/// only makes every grant of the slot `Unavailable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nemeses_strict_with_partitions() {
    let fixture =
        ClusterFixture::start_with(1, vec!["failover", "partition-master"]).await.expect("a local Redis Cluster");
    let nemeses = ["nemesis", "election_nemesis", "kinds_nemesis"];
    run_strict(fixture, |c| nemeses.contains(&c.name), 1, "nemeses with partitions, acks 1").await;
}

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new(Duration::from_millis(ttl_ms))
        .wait(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(1))
}

/// Hostile names on the cluster: every kind acquires, renews and releases, and a waiter is
/// woken by the release (published on the name's slot's master, heard on another node).
async fn hostile_names(fx: &ClusterFixture) {
    let url = fx.cluster.url();
    let (lock, waiter) = (fx.lock_client(0).await, fx.lock_client(0).await);
    let rw = lock_redis::connect_rw(&url, fx.options.clone()).await.expect("connect rw");
    let sem = lock_redis::connect_semaphore(&url, fx.options.clone()).await.expect("connect semaphore");
    let names = ["plain", "a/b", "../x", "{braces}", "}{", "'; DROP TABLE x; --", "ключ 🔒", &"n".repeat(255)];
    for raw in names {
        let name = LockName::new(raw).expect("valid");
        let lease = lock.acquire(&name, &opts(2000)).await.unwrap_or_else(|e| panic!("{raw:?}: acquire: {e}"));
        lease.renew().await.unwrap_or_else(|e| panic!("{raw:?}: renew: {e}"));
        let (w, n) = (waiter.clone(), name.clone());
        let blocked = tokio::spawn(async move { w.acquire(&n, &opts(2000).wait(Duration::from_secs(5))).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        lease.release().await.unwrap_or_else(|e| panic!("{raw:?}: release: {e}"));
        let next = blocked.await.expect("joined").unwrap_or_else(|e| panic!("{raw:?}: waiter: {e}"));
        assert!(released.elapsed() < Duration::from_millis(1500), "{raw:?}: the waiter was not woken");
        assert!(next.token() > lease.token());
        next.release().await.expect("release");

        let r = rw.acquire_read(&name, &opts(2000)).await.unwrap_or_else(|e| panic!("{raw:?}: read: {e}"));
        assert!(rw.try_acquire_write(&name, &opts(2000)).await.expect("try write").is_none(), "{raw:?}");
        r.release().await.unwrap_or_else(|e| panic!("{raw:?}: release read: {e}"));
        let w = rw.acquire_write(&name, &opts(2000)).await.unwrap_or_else(|e| panic!("{raw:?}: write: {e}"));
        w.release().await.unwrap_or_else(|e| panic!("{raw:?}: release write: {e}"));
        let p = sem.acquire_permit(&name, 2, &opts(2000)).await.unwrap_or_else(|e| panic!("{raw:?}: permit: {e}"));
        p.renew().await.unwrap_or_else(|e| panic!("{raw:?}: renew permit: {e}"));
        p.release().await.unwrap_or_else(|e| panic!("{raw:?}: release permit: {e}"));
    }
    let held = lock.list("", 100).await.expect("list over every master");
    assert!(held.is_empty(), "everything was released: {held:?}");
}

/// A name whose slot is served by master `master` now.
async fn name_on(fx: &ClusterFixture, master: usize, base: &str) -> LockName {
    for i in 0..200 {
        let name = LockName::new(format!("{base}-{i}")).expect("valid");
        let slot = fx.cluster.slot_of(&fx.key(&name, "lock")).await.expect("slot");
        if fx.cluster.master_of(slot).await == Some(master) {
            return name;
        }
    }
    panic!("no name of 200 landed on master {master}");
}

/// The slot of a held lock moves to another master (keys migrated with `MIGRATE`, clients
/// redirected with `ASK` then `MOVED`): the holder keeps it and renews it, a contender stays
/// out, the waiter gets it after the release with a higher token.
async fn slot_migration(fx: &ClusterFixture) {
    let (holder, contender) = (fx.lock_client(0).await, fx.lock_client(0).await);
    let name = LockName::new("migrating").expect("valid");
    let slot = fx.cluster.slot_of(&fx.key(&name, "lock")).await.expect("slot");
    let from = fx.cluster.master_of(slot).await.expect("a master");
    let lease = holder.acquire(&name, &opts(4000)).await.expect("acquire");
    let (c, n) = (contender.clone(), name.clone());
    let waiter = tokio::spawn(async move { c.acquire(&n, &opts(4000).wait(Duration::from_secs(15))).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let to = (from + 1) % 3;
    let started = Instant::now();
    let moved = fx.cluster.migrate_slot(slot, to).await.expect("migrate");
    let took = started.elapsed();
    assert!(moved >= 2, "the lock and fence keys (at least) moved: {moved}");
    assert_eq!(fx.cluster.master_of(slot).await, Some(to));
    lease.renew().await.expect("the holder renews on the new master");
    assert!(contender.try_acquire(&name, &opts(4000)).await.expect("try").is_none(), "a second holder got in");
    assert!(!waiter.is_finished(), "the waiter got the lock while it was held");
    let t1 = lease.token();
    lease.release().await.expect("release on the new master");
    let next = waiter.await.expect("joined").expect("the waiter gets the lock");
    assert!(next.token() > t1, "token went from {t1} to {}", next.token());
    next.release().await.expect("release");
    eprintln!("MEASURED slot migration of a held lock: {moved} keys moved in {took:?}");
}

/// The master of a held lock's slot is SIGKILLed; its replica takes over (`cluster-node-timeout`
/// 1 s). With `min_replicas_ack = 1` the grant reached the replica, so the holder keeps the lock
/// and renews it on the new master; no contender gets in meanwhile; tokens keep rising. Measures
/// how long the slot granted nothing.
async fn master_failover(fx: &ClusterFixture) {
    let holder = fx.lock_client(1).await;
    // Contender and probe without acknowledgements: what any client can get.
    let other = fx.lock_client(0).await;
    let name = LockName::new("failover").expect("valid");
    let slot = fx.cluster.slot_of(&fx.key(&name, "lock")).await.expect("slot");
    let old = fx.cluster.master_of(slot).await.expect("a master");
    let probe = name_on(fx, old, "probe").await;
    let lease = holder.acquire(&name, &opts(15_000)).await.expect("acquire");
    let t1 = lease.token();
    let cluster = Arc::clone(&fx.cluster);
    let killed_at = Instant::now();
    // The promoted replica has no replica of its own until the old master comes back (empty)
    // and follows it: until then a renewal cannot be acknowledged (`Unavailable`; the watchdog
    // keeps trying while the lease is valid). So the old master is restarted at once.
    let failover = tokio::spawn(async move {
        let f = cluster.kill_master_of(slot).await?;
        cluster.restart(f.old).await?;
        Ok::<_, LockError>(f)
    });
    let (mut last_ok, mut longest_gap, mut last_token) = (killed_at, Duration::ZERO, 0);
    while !failover.is_finished() || killed_at.elapsed() < Duration::from_secs(4) {
        if let Ok(Some(l)) = other.try_acquire(&name, &opts(15_000)).await {
            assert!(!lease.is_valid(), "a second holder got in while the first lease was valid ({l:?})");
        }
        if let Ok(Some(l)) = other.try_acquire(&probe, &opts(2000)).await {
            longest_gap = longest_gap.max(last_ok.elapsed());
            last_ok = Instant::now();
            assert!(l.token().get() > last_token, "token went from {last_token} to {}", l.token());
            last_token = l.token().get();
            let _ = l.release().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let f = failover.await.expect("joined").expect("a replica took over");
    assert!(lease.is_valid(), "the acknowledged lease was lost across the failover: {:?}", lease.lost().reason());
    let renewed = loop {
        match lease.renew().await {
            Ok(()) => break Instant::now(),
            Err(e) => assert!(
                lease.is_valid(),
                "the lease ran out before a renewal was acknowledged ({:?} after the kill, failover {f:?}): {e}",
                killed_at.elapsed()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(last_ok > killed_at + f.took, "nothing was granted on the slot after the promotion");
    lease.release().await.expect("release");
    let next = other.acquire(&name, &opts(2000)).await.expect("acquire after the failover");
    assert!(next.token() > t1, "token went from {t1} to {} across the failover", next.token());
    next.release().await.expect("release");
    eprintln!(
        "MEASURED cluster master failover: replica {} promoted {:?} after the SIGKILL of master {}; longest time \
         the slot granted nothing: {longest_gap:?}; renewal acknowledged again {:?} after the kill (old master \
         restarted as a replica)",
        f.new,
        f.took,
        f.old,
        renewed - killed_at
    );
}

/// The replica of a name's master SIGSTOPped: a `min_replicas_ack = 1` grant cannot be
/// acknowledged, so it is given back and answered `Unavailable`. This proves `WAIT` goes to the
/// master that wrote: sent to another master it would count that master's healthy replica.
async fn unacknowledged_grant_is_refused(fx: &ClusterFixture) {
    let (acked, plain) = (fx.lock_client(1).await, fx.lock_client(0).await);
    let name = LockName::new("unacked").expect("valid");
    let slot = fx.cluster.slot_of(&fx.key(&name, "lock")).await.expect("slot");
    let master = fx.cluster.master_of(slot).await.expect("a master");
    let replica = fx.cluster.replica_of(master).await.expect("a replica");
    // Warm up: the slot map and the scripts are known before the replica stops.
    let l = acked.try_acquire(&name, &opts(5000)).await.expect("try").expect("free");
    l.release().await.expect("release");
    fx.cluster.pause(replica, true);
    let refused = acked.try_acquire(&name, &opts(5000)).await;
    fx.cluster.pause(replica, false);
    assert!(matches!(refused, Err(LockError::Unavailable { .. })), "an unacknowledged grant was answered {refused:?}");
    let l = plain.try_acquire(&name, &opts(5000)).await.expect("try").expect("the refused grant was given back");
    l.release().await.expect("release");
}

/// `min_replicas_ack` on a slot half-migrated: a held lock's key has moved to the importing
/// master, so its renewal follows `ASK` there, and that master's replica is SIGSTOPped: the
/// renewal is not acknowledged and must fail (`Unavailable`). The source's replica is healthy:
/// a `WAIT` routed by the slot map (to the source) answered 1 at once and the renewal stood,
/// acknowledged by nobody. (An acquire cannot show it: a script whose keys the source and the
/// target each have only in part is answered `TRYAGAIN` until the slot has settled.)
async fn ack_counted_where_an_ask_ran_it(fx: &ClusterFixture) {
    let acked = fx.lock_client(1).await;
    let name = LockName::new(format!("asked-{:08x}", rand::random::<u32>())).expect("valid");
    let slot = fx.cluster.slot_of(&fx.key(&name, "lock")).await.expect("slot");
    let from = fx.cluster.master_of(slot).await.expect("a master");
    let to = (from + 1) % 3;
    let to_replica = fx.cluster.replica_of(to).await.expect("a replica");
    let lease = acked.acquire(&name, &opts(8000)).await.expect("acquire");
    fx.cluster.begin_migration(slot, to).await.expect("begin the migration");
    fx.cluster.move_slot_keys(slot, from, to).await.expect("move the slot's keys");
    fx.cluster.pause(to_replica, true);
    let renewed = lease.renew().await;
    fx.cluster.pause(to_replica, false);
    fx.cluster.finish_migration(slot, from, to).await.expect("finish the migration");
    eprintln!("MEASURED a renewal on the importing master with its replica stopped: {renewed:?}");
    assert!(
        matches!(renewed, Err(LockError::Unavailable { .. })),
        "a renewal applied on the importing master (replica stopped) was answered {renewed:?}: its WAIT was \
         counted on another node"
    );
    lease.release().await.expect("release");
}

/// `CLUSTER FAILOVER` on the replica of a held name's master (a coordinated hand-over: the
/// master stops writing until the replica caught up): the lease survives without
/// `min_replicas_ack`, the holder renews on the new master, a contender stays out.
async fn manual_failover(fx: &ClusterFixture) {
    let (holder, contender) = (fx.lock_client(0).await, fx.lock_client(0).await);
    let name = LockName::new("handed-over").expect("valid");
    let slot = fx.cluster.slot_of(&fx.key(&name, "lock")).await.expect("slot");
    let lease = holder.acquire(&name, &opts(6000)).await.expect("acquire");
    let f = fx.cluster.manual_failover(slot).await.expect("manual failover");
    lease.renew().await.expect("the holder renews on the new master");
    assert!(contender.try_acquire(&name, &opts(6000)).await.expect("try").is_none(), "a second holder got in");
    let t1 = lease.token();
    lease.release().await.expect("release");
    let next = contender.acquire(&name, &opts(2000)).await.expect("acquire after the hand-over");
    assert!(next.token() > t1, "token went from {t1} to {}", next.token());
    next.release().await.expect("release");
    eprintln!("MEASURED cluster manual failover (CLUSTER FAILOVER): node {} took over in {:?}", f.new, f.took);
}

/// Acquire latency on the cluster with and without `min_replicas_ack` (rounds interleaved so
/// that load from other processes hits both alike); prints the median round.
async fn measure_acquire(fx: &ClusterFixture) {
    let mut clients = Vec::new();
    for acks in [0, 1] {
        clients.push((acks, fx.lock_client(acks).await, Vec::new()));
    }
    let n = 100u32;
    for round in 0..3 {
        for (acks, c, rounds) in clients.iter_mut() {
            let mut spent = Duration::ZERO;
            for i in 0..n {
                let name = LockName::new(format!("cost-{acks}-{round}-{i}")).expect("valid");
                let started = Instant::now();
                let l = c.try_acquire(&name, &opts(2000)).await.expect("acquire").expect("free");
                spent += started.elapsed();
                l.release().await.expect("release");
            }
            rounds.push(spent / n);
        }
    }
    for (acks, _, mut rounds) in clients {
        rounds.sort();
        eprintln!("MEASURED cluster min_replicas_ack={acks}: acquire {:?} (median of 3 rounds of {n})", rounds[1]);
    }
}

/// Hostile names, then a slot migration, then a master failover, on one cluster (the
/// failover last: it leaves a master without a replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_migration_failover() {
    let fx = ClusterFixture::start().await.expect("a local Redis Cluster");
    hostile_names(&fx).await;
    unacknowledged_grant_is_refused(&fx).await;
    ack_counted_where_an_ask_ran_it(&fx).await;
    measure_acquire(&fx).await;
    slot_migration(&fx).await;
    manual_failover(&fx).await;
    master_failover(&fx).await;
}
