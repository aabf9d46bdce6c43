//! What a backend gives the suite: a factory of fresh clients, and optional fault hooks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{KindStore, LeaseStore, StoreLock, StoreRwLock, StoreSemaphore};
use lock_core::{DistributedLock, DistributedRwLock, DistributedSemaphore, LockError, LockName};

/// A deployment under test. Every call to [`Fixture::client`] returns a new, independent client
/// (its own connections, its own session), as a separate process would have.
///
/// ```
/// use std::sync::Arc;
/// use lock_conformance::{Fixture, async_trait};
/// use lock_core::{DistributedLock, LockError, MemoryLock};
///
/// struct MyFixture(MemoryLock);
///
/// #[async_trait]
/// impl Fixture for MyFixture {
///     fn backend(&self) -> &str { "memory" }
///     async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
///         Ok(Arc::new(self.0.client()))
///     }
/// }
/// ```
#[async_trait]
pub trait Fixture: Send + Sync + 'static {
    /// The label used in case names: `<backend>::<case>`.
    fn backend(&self) -> &str;

    /// A fresh, independent client of the deployment.
    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError>;

    /// A fresh, independent read-write lock client, for backends whose capabilities declare
    /// `rw_lock`. A backend that declares it while its fixture returns `None` fails the suite.
    async fn rw_client(&self) -> Result<Option<Arc<dyn DistributedRwLock>>, LockError> {
        Ok(None)
    }

    /// A fresh, independent semaphore client, for backends that declare `semaphore`.
    async fn semaphore_client(&self) -> Result<Option<Arc<dyn DistributedSemaphore>>, LockError> {
        Ok(None)
    }

    /// A fresh client whose network to the server the suite can break (through a fault proxy,
    /// or a backend's own switch). `None` when the fixture cannot do that: the network fault
    /// cases are then reported not_applicable, with this reason.
    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        Ok(None)
    }

    /// Control of the server process, when the fixture owns it. `None`: server fault cases are
    /// not_applicable.
    fn server(&self) -> Option<Arc<dyn ServerControl>> {
        None
    }

    /// Faults of a replicated deployment (a member or the primary killed, a failover, a member's
    /// peer links cut), for the nemesis. `None` (the default): a single server, whose faults are
    /// [`Fixture::server`]'s; the nemesis then says in its report that it injected none.
    fn deployment(&self) -> Option<Arc<dyn DeploymentControl>> {
        None
    }

    /// The base lease time of timing cases. Cases use multiples of it, with generous bounds.
    fn base_ttl(&self) -> Duration {
        Duration::from_millis(1500)
    }

    /// A prefix for every lock name this run uses, so runs against a shared server never meet.
    fn name_prefix(&self) -> String {
        String::new()
    }

    /// How long after a holder vanishes (stops renewing a lease of [`Fixture::base_ttl`], or is
    /// cut off from the server) its lock becomes free for others: the ttl for per-lock leases,
    /// the session timeout for per-session backends (ZooKeeper). Cases wait a generous multiple
    /// of it, never less.
    fn expiry_bound(&self) -> Duration {
        self.base_ttl()
    }

    /// Deletes the server-side entry of lock `name` behind its holder's back — what an
    /// operator, a key eviction, a killed database session or a deleted ZooKeeper node does —
    /// keeping the name's fencing state (the next token must still be higher). `Ok(false)`
    /// (the default) means the fixture cannot; `fault_entry_deleted` is then not_applicable.
    async fn delete_entry(&self, _name: &LockName) -> Result<bool, LockError> {
        Ok(false)
    }

    /// Runs the backend's idle-state collection (docs/contract.md §5.7) now, as if `name` (held
    /// by nobody) had been idle longer than the configured time: its per-name fencing state (the
    /// SQL fence row, the Redis name's token counter, the memory counter) is removed the way the backend's
    /// own collection removes it. `Ok(false)` (the default) means the fixture cannot;
    /// `idle_collected_tokens_rise` is then not_applicable.
    async fn collect_idle(&self, _name: &LockName) -> Result<bool, LockError> {
        Ok(false)
    }

    /// Sends, as an attacker who can read the lock's queue and send on its channels (a
    /// PostgreSQL role with `SELECT` only, a Redis user with read keys and `+publish`), a raw
    /// grant message naming each waiter now queued on `name`, with fencing token `token`:
    /// what a forged, late or duplicated hand-off message looks like to the waiting client.
    /// `Ok(Some(n))`: `n` messages were sent (0 when nobody is queued yet); `Ok(None)` (the
    /// default): the backend has no grant messages (or the fixture cannot forge them), and
    /// `forged_grant_ignored` is then not_applicable with that reason. Messages are hints: a
    /// waiter must only ever return a grant the server confirms (docs/contract.md §4).
    async fn forge_grant(&self, _name: &LockName, _token: u64) -> Result<Option<usize>, LockError> {
        Ok(None)
    }

    /// How long a grant its waiter never takes up (the waiter's `acquire` future was dropped at
    /// the instant of the hand-off, or its process was killed) may keep the lock from others:
    /// what `waiter_departed_at_grant` allows, and the grant's part of `queued_head_killed`'s
    /// bound. The default is generous — twice the longer of [`Fixture::base_ttl`] and
    /// [`Fixture::expiry_bound`], what a backend that lets such a grant run out by its ttl
    /// needs; a backend that withdraws it promptly declares its tighter bound
    /// (docs/contract.md §4 asks for 100 ms in a live process).
    fn untaken_grant_bound(&self) -> Duration {
        self.base_ttl().max(self.expiry_bound()) * 2
    }

    /// A waiter for `name` with `opts` in a process of its own, which the suite kills with
    /// SIGKILL while it is queued (`queued_head_killed`): usually a
    /// [`ChildWaiter`](crate::waiter_process::ChildWaiter) of this test binary, which the binary
    /// serves with [`waiter_child_test!`](crate::waiter_child_test). `Ok(None)` (the default):
    /// the fixture cannot, and the case is not_applicable with that reason (an in-process
    /// server has no second process to kill: give the reason by [`Fixture::not_applicable`]).
    async fn queued_waiter(
        &self,
        _name: &LockName,
        _opts: &lock_core::AcquireOptions,
    ) -> Result<Option<Box<dyn crate::waiter_process::QueuedWaiter>>, LockError> {
        Ok(None)
    }

    /// Why `case` cannot hold for this fixture's way of building clients, or `None` (the
    /// default) to run it. The runner reports the case `NOT APPLICABLE` with this reason, in
    /// strict mode too: use it only for a limit the product documents (e.g. a session the
    /// application owns cannot be replaced after it expires), never to hide a failure.
    fn not_applicable(&self, _case: &str) -> Option<String> {
        None
    }

    /// Where the server came from (`env DLOCK_TEST_REDIS_URL`, `container redis:7`, `local
    /// binary /usr/bin/redis-server`, …), for reports. Empty when not known.
    fn provenance(&self) -> String {
        String::new()
    }

    /// Every lock kind of this backend that is built on a `LeaseStore` (label: "exclusive", "read", "write",
    /// "permit"), for cases that drive the store directly. Empty (default): those cases are not_applicable.
    async fn lease_stores(&self) -> Result<LabelledStores, LockError> {
        Ok(Vec::new())
    }
}

/// Lease stores labelled by the kind they serve ("exclusive", "read", "write", "permit").
pub type LabelledStores = Vec<(&'static str, Arc<dyn LeaseStore>)>;

/// [`Fixture::lease_stores`] of a backend whose kinds share one store: the exclusive lock's,
/// the read-write lock's two sides and a semaphore of one permit, labelled as the cases look
/// them up.
pub fn kind_lease_stores<S: LeaseStore, B: KindStore>(
    lock: &StoreLock<S>,
    rw: &StoreRwLock<B>,
    semaphore: &StoreSemaphore<B>,
) -> Result<LabelledStores, LockError> {
    let mut stores: LabelledStores = vec![("exclusive", Arc::clone(lock.store()) as _)];
    stores.extend(rw.lease_stores());
    stores.push(("permit", semaphore.lease_store(1)?));
    Ok(stores)
}

/// A client plus the switch board of its network path.
pub struct LinkedClient {
    /// The client, connected through the link.
    pub client: Arc<dyn DistributedLock>,
    /// The link's controls.
    pub link: Arc<dyn ClientLink>,
}

/// Controls of one client's network path to the server.
#[async_trait]
pub trait ClientLink: Send + Sync + 'static {
    /// Black-holes traffic in both directions (partition) while on; connections stay open.
    async fn set_partitioned(&self, on: bool);
    /// Adds this much latency to every chunk forwarded in each direction.
    async fn set_latency(&self, latency: Duration);
    /// Resets every open connection now (new connections are still accepted).
    async fn reset_connections(&self);
}

/// Faults of a replicated deployment (ZooKeeper ensemble, Redis with Sentinel, …) that go beyond
/// stopping "the server": one node at a time, with the rest still serving.
#[async_trait]
pub trait DeploymentControl: Send + Sync + 'static {
    /// The faults this deployment can inject, by name (`kill-leader`, `partition-follower`,
    /// `failover`, …). Never empty.
    fn faults(&self) -> Vec<&'static str>;

    /// Injects `fault`, keeps it about `span`, heals it (restarts the killed node, heals the cut
    /// links) and returns once the deployment serves again (within a bound of its own), with one
    /// line saying what happened and how long the deployment took to serve again.
    async fn inject(&self, fault: &str, span: Duration) -> Result<String, LockError>;
}

/// Controls of a server process the fixture owns.
#[async_trait]
pub trait ServerControl: Send + Sync + 'static {
    /// Stops the server (SIGKILL); clients see connections refused until `start`.
    async fn stop(&self) -> Result<(), LockError>;
    /// Starts it again on the same address, with the same data directory, and returns once it
    /// accepts connections.
    async fn start(&self) -> Result<(), LockError>;
    /// Pauses the process (SIGSTOP) or resumes it (SIGCONT).
    async fn pause(&self, paused: bool) -> Result<(), LockError>;
    /// Whether the server keeps its data across `stop`/`start` (what `durable_*` capabilities rest on).
    fn persistent(&self) -> bool;
}

/// The [`ServerControl`] of a server that lives in the test process (a toy or a mutant store):
/// its clients fail their requests while `down` is set (stopped or paused), and `stop` also runs
/// `forget`, what a server without persistence loses with its process. Restarts are instant.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use lock_conformance::{DownSwitch, ServerControl};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let down = Arc::new(AtomicBool::new(false));
/// let switch = DownSwitch::new(down.clone(), || {});
/// switch.pause(true).await.unwrap();
/// assert!(down.load(Ordering::SeqCst));
/// assert!(!switch.persistent());
/// # });
/// ```
pub struct DownSwitch {
    down: Arc<AtomicBool>,
    forget: Box<dyn Fn() + Send + Sync>,
}

impl DownSwitch {
    /// A switch over the server's `down` flag; `forget` clears what a stop loses.
    pub fn new(down: Arc<AtomicBool>, forget: impl Fn() + Send + Sync + 'static) -> DownSwitch {
        DownSwitch { down, forget: Box::new(forget) }
    }
}

#[async_trait]
impl ServerControl for DownSwitch {
    async fn stop(&self) -> Result<(), LockError> {
        self.down.store(true, Ordering::SeqCst);
        (self.forget)();
        Ok(())
    }
    async fn start(&self) -> Result<(), LockError> {
        self.down.store(false, Ordering::SeqCst);
        Ok(())
    }
    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        self.down.store(paused, Ordering::SeqCst);
        Ok(())
    }
    fn persistent(&self) -> bool {
        false
    }
}

/// Implements [`Fixture`] for a type from its label and how it makes each kind of client: the
/// part every fixture writes alike. `|f|` names the fixture (`&self`) in the expressions, which
/// may use `.await` and `?`; `rw` and `semaphore` are optional (the trait's `None` otherwise),
/// `every_kind` gives one expression for all three when one client type serves every kind, and
/// `kinds_of` one expression for a backend value that hands out the three (`.lock()`, `.rw()`,
/// `.semaphore()`, as `RedisBackend` and `SqlBackend` do), made anew for each client; the three
/// kinds' stores of one such value are also the fixture's [`Fixture::lease_stores`].
/// `deployment` (optional, last) names an `Arc` of a replicated deployment that is both "the
/// server" of the fault cases and the nemesis's node faults: it is returned by
/// [`Fixture::server`] and [`Fixture::deployment`] alike. `faults_of` (optional, last; not with
/// `deployment`) names another fixture of the same server, for a fixture that only connects
/// differently (through an application's own client, say): its [`Fixture::server`],
/// [`Fixture::delete_entry`], [`Fixture::forge_grant`] and [`Fixture::untaken_grant_bound`]
/// answer for this one.
/// The fault hooks and the rest follow as ordinary methods of an `impl Fixture` block.
///
/// ```
/// use lock_core::MemoryLock;
///
/// struct MyFixture(MemoryLock);
///
/// lock_conformance::impl_fixture! {
///     MyFixture, backend: "memory", |f| {
///         client: f.0.client(),
///         semaphore: f.0.client(),
///     }
///
///     fn provenance(&self) -> String {
///         "in process".to_string()
///     }
/// }
/// ```
#[macro_export]
macro_rules! impl_fixture {
    // The two shorthands name the kinds' clients and hand the rest of the list on as it is.
    ($fixture:ty, backend: $label:expr, |$f:ident| { kinds_of: $backend:expr $(, $($more:tt)*)? } $($rest:tt)*) => {
        $crate::impl_fixture! {
            $fixture, backend: $label, |$f| {
                client: $backend.lock(),
                rw: $backend.rw().await?,
                semaphore: $backend.semaphore().await?,
                $($($more)*)?
            }
            /// Every kind from one backend value: they share its connections.
            async fn lease_stores(&self) -> ::std::result::Result<$crate::LabelledStores, $crate::__private::LockError> {
                let $f = self;
                let backend = $backend;
                $crate::kind_lease_stores(&backend.lock(), &backend.rw().await?, &backend.semaphore().await?)
            }
            $($rest)*
        }
    };
    ($fixture:ty, backend: $label:expr, |$f:ident| { every_kind: $client:expr $(, $($more:tt)*)? } $($rest:tt)*) => {
        $crate::impl_fixture! {
            $fixture, backend: $label, |$f| { client: $client, rw: $client, semaphore: $client, $($($more)*)? }
            $($rest)*
        }
    };
    (
        $fixture:ty, backend: $label:expr, |$f:ident| {
            client: $client:expr
            $(, rw: $rw:expr)?
            $(, semaphore: $semaphore:expr)?
            $(, deployment: $deployment:expr)?
            $(, faults_of: $inner:expr)?
            $(,)?
        }
        $($rest:tt)*
    ) => {
        $crate::impl_fixture! {
            @impl $fixture, $label, $f, $client,
            [$((rw_client, DistributedRwLock, $rw))? $((semaphore_client, DistributedSemaphore, $semaphore))?]
            [$($deployment)?]
            [$($inner)?]
            $($rest)*
        }
    };
    (
        @impl $fixture:ty, $label:expr, $f:ident, $client:expr,
        [$(($method:ident, $kind:ident, $made:expr))*]
        [$($deployment:expr)?]
        [$($inner:expr)?]
        $($rest:tt)*
    ) => {
        #[$crate::async_trait]
        impl $crate::Fixture for $fixture {
            fn backend(&self) -> &str {
                #[allow(unused_variables)]
                let $f = self;
                $label
            }

            async fn client(
                &self,
            ) -> ::std::result::Result<::std::sync::Arc<dyn $crate::__private::DistributedLock>, $crate::__private::LockError>
            {
                let $f = self;
                Ok(::std::sync::Arc::new($client))
            }

            $(
                async fn $method(
                    &self,
                ) -> ::std::result::Result<
                    ::std::option::Option<::std::sync::Arc<dyn $crate::__private::$kind>>,
                    $crate::__private::LockError,
                > {
                    let $f = self;
                    Ok(Some(::std::sync::Arc::new($made)))
                }
            )*

            $(
                fn server(&self) -> ::std::option::Option<::std::sync::Arc<dyn $crate::ServerControl>> {
                    let $f = self;
                    Some(::std::sync::Arc::clone(&$deployment) as _)
                }

                fn deployment(&self) -> ::std::option::Option<::std::sync::Arc<dyn $crate::DeploymentControl>> {
                    let $f = self;
                    Some(::std::sync::Arc::clone(&$deployment) as _)
                }
            )?

            $(
                fn server(&self) -> ::std::option::Option<::std::sync::Arc<dyn $crate::ServerControl>> {
                    let $f = self;
                    $crate::Fixture::server(&$inner)
                }

                async fn delete_entry(
                    &self,
                    name: &$crate::__private::LockName,
                ) -> ::std::result::Result<bool, $crate::__private::LockError> {
                    let $f = self;
                    $crate::Fixture::delete_entry(&$inner, name).await
                }

                async fn forge_grant(
                    &self,
                    name: &$crate::__private::LockName,
                    token: u64,
                ) -> ::std::result::Result<::std::option::Option<usize>, $crate::__private::LockError> {
                    let $f = self;
                    $crate::Fixture::forge_grant(&$inner, name, token).await
                }

                fn untaken_grant_bound(&self) -> ::std::time::Duration {
                    let $f = self;
                    $crate::Fixture::untaken_grant_bound(&$inner)
                }
            )?

            $($rest)*
        }
    };
}
