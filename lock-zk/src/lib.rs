//! # lock-zk
//!
//! The ZooKeeper backend of dlock (SPEC §6): the classic lock recipe on
//! [`zookeeper-client`](https://docs.rs/zookeeper-client).
//!
//! - A lock is a queue of **ephemeral sequential** znodes under a per-name parent
//!   (`<root>/<escaped name>/_c_<owner uuid>-lock-<sequence>`). The lowest sequence holds the
//!   lock; every waiter watches only its immediate predecessor, so a release wakes exactly one
//!   waiter (no herd effect) and waiters are served in arrival (FIFO) order.
//! - Because the nodes are **ephemeral**, a holder that crashes or is cut off cannot deadlock
//!   the lock: the server deletes its nodes when its session expires.
//! - The owner id in the node name is unique per acquisition, so a create whose reply was lost
//!   is recognised on retry, and a cancelled or timed-out wait deletes exactly its own node.
//! - The **fencing token** is the created node's `czxid`, which grows strictly for the whole
//!   ensemble and survives restarts (the per-parent sequence number does not: it is 32-bit
//!   and restarts when the container parent is removed).
//! - The **lease is the session**. Renewal checks that our node still exists under our session;
//!   the lost signal fires when the session expires, our node is deleted, or the connection
//!   stays suspended for so long that the server may have expired the session.
//!
//! ## When a lease counts as lost
//!
//! The server expires a session `session_timeout` after it last heard from the client, and
//! then deletes the session's nodes, so another client may get the lock. The holder therefore
//! gives up first. Its lost signal fires when:
//!
//! - the session expires or is closed, or the lock node is deleted (watch events);
//! - the server may have expired the session: the server keeps a session at least
//!   `session_timeout` after it last heard from the client, and it heard from us no earlier
//!   than when we sent a request it answered. Each held lease probes its node every fifth of
//!   the session timeout, and its lost signal fires at `last answered request's send time +
//!   session_timeout − drift` (drift: 1 % + 2 ms) unless a newer answer came in. A suspended
//!   connection or a paused server therefore ends the lease before the server can hand the lock
//!   to someone else, assuming only that both clocks run at about the same rate;
//! - `valid_until` passes without a successful renewal (the `Lease` watchdog, as for every
//!   backend). Renewal asks the server whether our node still exists under our session.
//!
//! A lease that is lost but not released (for example dropped) still has its node deleted in
//! the background once the server is reachable, so nobody waits for a lock no one claims.
//! A client whose session expired makes a new session on its next call.
//!
//! Needs ZooKeeper 3.5 or later (container nodes, create with stat); tested with 3.8.
//!
//! Lock nodes and the per-name parent nodes (containers, removed by the server when empty) get
//! `CREATOR_ALL` ACLs when the URL carries credentials; the nodes above the root stay open.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, DistributedLock, LockName};
//! let lock = lock_zk::connect("zk://zk1:2181,zk2:2181/myapp/locks", lock_zk::ZkOptions::default()).await?;
//! let lease = lock.acquire(&LockName::new("nightly-report")?, &AcquireOptions::new(Duration::from_secs(10))).await?;
//! println!("fencing token {}", lease.token());
//! lease.release().await?;
//! # Ok(()) }
//! ```

mod config;
mod lock;

pub use config::ZkOptions;
pub use lock::{connect, ZkLock};
