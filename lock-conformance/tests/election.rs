//! `election_observers_converge` needs a backend that declares `inspect`. Until every backend
//! reports holders, this runs it (and the other election cases) against the in-memory backend
//! wrapped in a lock that remembers who it granted — and checks that each case *passed*, not
//! that it was not applicable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lock_conformance::runner::{run_case, Outcome};
use lock_conformance::{all_cases, async_trait, Fixture};
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, HolderInfo, Lease, LeaseObserver, LockError, LockKind, LockName,
    MemoryLock,
};

type Grants = Arc<Mutex<HashMap<String, (Option<String>, LeaseObserver)>>>;

/// MemoryLock plus a record of each grant's holder, answering `inspect` from it.
struct Inspecting {
    inner: MemoryLock,
    grants: Grants,
}

impl Inspecting {
    fn note(&self, lease: &Lease, opts: &AcquireOptions) {
        let holder = opts.holder.as_ref().map(|h| h.id().to_owned());
        self.grants.lock().expect("not poisoned").insert(lease.name().as_str().to_owned(), (holder, lease.observer()));
    }
}

#[async_trait]
impl DistributedLock for Inspecting {
    fn backend(&self) -> &str {
        "memory"
    }
    fn capabilities(&self) -> Capabilities {
        let mut c = self.inner.capabilities();
        c.inspect = true;
        c
    }
    async fn try_acquire(&self, name: &LockName, o: &AcquireOptions) -> Result<Option<Lease>, LockError> {
        let l = self.inner.try_acquire(name, o).await?;
        if let Some(l) = &l {
            self.note(l, o);
        }
        Ok(l)
    }
    async fn acquire(&self, name: &LockName, o: &AcquireOptions) -> Result<Lease, LockError> {
        let l = self.inner.acquire(name, o).await?;
        self.note(&l, o);
        Ok(l)
    }
    async fn inspect(&self, name: &LockName) -> Result<Option<HolderInfo>, LockError> {
        let g = self.grants.lock().expect("not poisoned");
        Ok(g.get(name.as_str()).filter(|(_, obs)| obs.is_valid()).map(|(holder, obs)| {
            HolderInfo::new(name.as_str(), obs.token(), LockKind::Exclusive).with_holder(holder.clone(), None)
        }))
    }
}

struct InspectingFixture {
    server: MemoryLock,
    grants: Grants,
}

#[async_trait]
impl Fixture for InspectingFixture {
    fn backend(&self) -> &str {
        "memory-inspecting"
    }
    async fn client(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        Ok(Arc::new(Inspecting { inner: self.server.client(), grants: Arc::clone(&self.grants) }))
    }
    fn base_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_millis(500)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_cases_pass_on_a_backend_that_inspects() {
    for case in all_cases().iter().filter(|c| c.name.starts_with("election_")) {
        let fx = Arc::new(InspectingFixture { server: MemoryLock::new(), grants: Arc::default() });
        let report = run_case(case, fx).await;
        eprintln!("{}: {:?} in {} ms: {}", report.name, report.outcome, report.ms, report.detail);
        assert_eq!(report.outcome, Outcome::Passed, "{}: {}", report.name, report.detail);
    }
}
