//! What a backend promises (docs/contract.md §5). The conformance suite checks every promise made here.

use std::time::Duration;

/// How waiters learn that a lock was released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum WakeMethod {
    /// The server notifies waiters (Redis pub/sub, PostgreSQL LISTEN/NOTIFY, in-process).
    Notify,
    /// Waiters watch a node (ZooKeeper).
    Watch,
    /// Waiters poll with jittered, capped back-off.
    Poll,
}

/// What a lease is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum LeaseModel {
    /// Each lock has its own server-side expiry, extended by renewals.
    PerLock,
    /// The lease lives as long as the client's session (ZooKeeper).
    PerSession,
}

/// A backend's declaration of what it supports.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Read-write locks (`DistributedRwLock`).
    pub rw_lock: bool,
    /// Semaphores (`DistributedSemaphore`).
    pub semaphore: bool,
    /// Waiters are granted in arrival order.
    pub fifo: bool,
    /// How waiters are woken.
    pub wake: WakeMethod,
    /// What a lease is bound to.
    pub lease_model: LeaseModel,
    /// Fencing tokens stay monotonic when the server restarts.
    pub durable_fencing: bool,
    /// Lease state survives a server restart (a holder keeps its lock).
    pub durable_leases: bool,
    /// Shortest ttl the backend honours.
    pub min_ttl: Duration,
    /// Longest ttl the backend honours.
    pub max_ttl: Duration,
    /// `inspect` reports the holder of a name (with the holder id and metadata it stored).
    pub inspect: bool,
    /// `list` enumerates held names by prefix.
    pub list: bool,
    /// `watch_changes` gives a feed of grants and releases heard from the backend (docs/contract.md
    /// §5.8), so election observers in other processes learn of a change without polling.
    pub notify_changes: bool,
    /// How far the clocks of the servers that may judge one lease can disagree: after a failover
    /// the promoted replica times every lease by its own clock (Redis ≥ 7 replicates expiries as
    /// absolute times, docs/contract.md §3). Added to the drift allowance of every lease
    /// (`valid_until = t0 + ttl − drift − max_clock_offset`); zero for one server judging alone.
    pub max_clock_offset: Duration,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            rw_lock: false,
            semaphore: false,
            fifo: false,
            wake: WakeMethod::Poll,
            lease_model: LeaseModel::PerLock,
            durable_fencing: false,
            durable_leases: false,
            min_ttl: Duration::from_millis(10),
            max_ttl: Duration::from_secs(365 * 24 * 3600),
            inspect: false,
            list: false,
            notify_changes: false,
            max_clock_offset: Duration::ZERO,
        }
    }
}

impl Capabilities {
    /// Starts from the defaults (exclusive lock only, polling, per-lock leases, not durable).
    pub fn new() -> Self {
        Self::default()
    }
}
