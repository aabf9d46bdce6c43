//! # lock-zk
//!
//! The ZooKeeper backend of dlock (docs/contract.md §6): the classic lock, read-write lock and semaphore
//! recipes on [`zookeeper-client`](https://docs.rs/zookeeper-client).
//!
//! - A lock is a queue of **ephemeral sequential** znodes under a per-name parent
//!   (`<root>/<escaped name>/_c_<owner uuid>-lock-<sequence>`). The lowest sequence holds the
//!   lock; every waiter watches only its immediate predecessor, so a release wakes exactly one
//!   waiter (no herd effect) and waiters are served in arrival (FIFO) order.
//! - Because the nodes are **ephemeral**, a holder that crashes or is cut off cannot deadlock
//!   the lock: the server deletes its nodes when its session expires.
//! - The owner id in the node name is unique per acquisition, so a create whose reply was lost
//!   is recognised on retry (looked for behind a `sync`, so a lagging follower cannot hide it),
//!   and a cancelled or timed-out wait deletes exactly its own nodes. Should a second node of
//!   the same acquisition exist anyway, it is deleted, never waited on, and release deletes
//!   every node with the acquisition's prefix.
//! - The **fencing token** is the created node's `czxid`, which grows strictly for the whole
//!   ensemble and survives restarts (the per-parent sequence number does not: it is 32-bit
//!   and restarts when the container parent is removed).
//! - The **lease is the session**. Renewal checks that our node still exists under our session;
//!   the lost signal fires when the session expires, our node is deleted, or the connection
//!   stays suspended for so long that the server may have expired the session.
//!
//! ## Read-write locks and semaphores
//!
//! [`ZkLock`] also implements [`DistributedRwLock`](lock_core::DistributedRwLock) and
//! [`DistributedSemaphore`](lock_core::DistributedSemaphore) (docs/contract.md §5.2, §5.3) with the same
//! machinery: the same session-bound lease and loss detection, lost-create recovery, cancel-safe
//! waits, and zxid tokens. Each kind has its own parent, so one name used as a lock, a read-write
//! lock and a semaphore names three independent things: `<root>/<escaped name>`,
//! `<root>/rw~<escaped name>` and `<root>/sem~<escaped name>` (escaped names never contain `~`).
//!
//! - **Read-write lock** (the ZooKeeper docs' recipe, as in kazoo): readers create
//!   `_c_<owner>-read-<seq>`, writers `_c_<owner>-write-<seq>` under one parent. A reader holds
//!   when no write node has a lower sequence, and otherwise watches only the **nearest earlier
//!   write node**; a writer holds when it is the lowest node and otherwise watches only its
//!   **predecessor**. The queue is FIFO, so a waiting writer holds back the readers that come
//!   after it (writers are not starved), and a release wakes only the nodes waiting on it: a
//!   writer's release wakes the readers right behind it (they all get in) or, if a writer comes
//!   next, that writer; a reader's release at most the one writer right behind it. (Curator's
//!   readers watch the *first* writer and wake more than needed.)
//! - **Semaphore** of `n` permits: nodes `_c_<owner>-permits<n>-<seq>`. A node holds while
//!   fewer than `n` nodes precede it. The first waiter (exactly `n` nodes ahead, all holding)
//!   watches those `n` holders, and any of them leaving lets it in. A waiter further back
//!   watches only its predecessor, which rewrites its data when it is granted: that wakes the
//!   waiter, now the first one, to watch the holders. So a release wakes one waiter and each
//!   grant the one behind it, never the whole queue (the first waiter may also wake once for
//!   a holder whose grant mark lands after it began to watch, since a node watch fires on a
//!   data change as well as on deletion). (Watching only the node `n` places ahead
//!   is not enough: when another holder leaves, the waiter that could go in would sleep on.)
//!   Every node's name carries its `n`, so all users of a semaphore are checked to agree:
//!   a node ahead of us with another count makes our call fail with `InvalidOptions`
//!   (`try_acquire_permit` checks every node), and `n = 0` is `InvalidOptions` too.
//! - **Tokens** (what docs/contract.md §2 asks of shared holders, and what the suite's `rw_lock` and
//!   `semaphore` cases check on every backend): no two grants of a name share a token, and a
//!   writer's token exceeds every token granted before it. A reader's or writer's token is its
//!   node's `czxid`, so read-write tokens follow **arrival** (queue) order; every holder granted
//!   before a writer queued ahead of it, hence the writer's token is above theirs. Co-readers'
//!   tokens do **not** follow the order of their grants: of two readers holding together, the
//!   one with the lower token may learn of its grant later. A resource fenced by read-write
//!   tokens must therefore reject only tokens below the highest *writer* token it has seen, not
//!   a co-reader's lower token. A permit's token is the `mzxid` of its grant mark, so permit
//!   tokens grow in the order grants complete.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, DistributedRwLock, DistributedSemaphore, LockName};
//! let zk = lock_zk::connect("zk://zk1:2181/myapp/locks", lock_zk::ZkOptions::default()).await?;
//! let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(30));
//! let catalog = LockName::new("catalog")?;
//! let read = zk.acquire_read(&catalog, &opts).await?; // shared with other readers
//! read.release().await?;
//! let write = zk.acquire_write(&catalog, &opts).await?; // alone
//! write.release().await?;
//! // At most 4 exports at once; every user of "exports" must say 4.
//! let permit = zk.acquire_permit(&LockName::new("exports")?, 4, &opts).await?;
//! permit.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## When a lease counts as lost
//!
//! The server expires a session `session_timeout` after it last heard from the client, and
//! then deletes the session's nodes, so another client may get the lock. The holder therefore
//! gives up first. Its lost signal fires when:
//!
//! - the session expires or is closed, or the lock node is deleted (watch events);
//! - the server may have expired the session: the leader keeps a session at least
//!   `session_timeout` after it last heard of it, and it heard of us no earlier than half a tick
//!   and 9/20 of the session before we sent a request the quorum answered (below).
//!   `valid_until` is bounded by that, so a
//!   suspended connection or a paused server ends the lease by the clock before the server can
//!   hand the lock to someone else, assuming only that both clocks run at about the same rate;
//! - `valid_until` passes without a successful renewal (the `Lease` watchdog, as for every
//!   backend). Renewal asks the server, behind a `sync` through the leader, whether our node
//!   still exists under our session.
//!
//! A held lease costs no request while nothing happens: the session's heartbeat keeps all of its
//! nodes. One task per session watches the held nodes, and the renewals of a session's leases
//! share rounds (one `sync`, then one multi-read of all their nodes behind it; one `exists` per
//! lease, pipelined, on a server before 3.6). A lease's own node watch is set 50 ms after its
//! grant (a hold released sooner costs no watch; a node deleted meanwhile is found by the
//! watch's first read). A session holding more than 64 leases watches the further ones with
//! one persistent recursive watch on the root (ZooKeeper 3.6+; about 1.8 KiB per held lease in
//! all instead of 4.8 KiB): it then receives every change under the root, of every client, for
//! as long as it holds them; each of those leases is checked once when it joins and again after
//! every reconnection (a persistent watch replays nothing missed while disconnected).
//!
//! `valid_until` never exceeds what the server keeps for us (docs/contract.md §3): the lease runs on
//! what the **leader** is sure to keep of the negotiated session after a request the quorum
//! answered, whenever the asked ttl is longer (then [`Lease::ttl`] reports that bound, and a
//! `renew_every` the shorter lease could not survive is cut to a third of it;
//! [`ZkOptions::lease_bound`] tells it in advance). It counts from the send of the request that
//! found our node holding: the create, when the listing pipelined behind it did, else the
//! listing sent behind a `sync` that did (never from an earlier create whose answer was lost,
//! which would start the lease spent after a stall). Each renewal (a `sync` and a read)
//! moves it to `sent + bound − drift`. So `is_valid()` is right by the clock alone, even after a
//! process stall during which no task ran. With `auto_renew(false)` a lease therefore ends one
//! bound after the grant unless you call `renew()`.
//!
//! The bound is `session_timeout − tickTime/2 − 9/20 · session_timeout` (at least 3/10 of the
//! session; 4.5 s of a 10 s session at ZooKeeper's default 2 s tick). Only the leader expires
//! sessions, and through a follower it hears of ours only from the follower's answers to its
//! pings, every half tick; a create or `sync` the follower forwards refreshes nothing. A
//! follower cut off from the leader right after our request never reports it, so the leader's
//! last news of us may be half a tick older than the request, and older again by however long
//! our client went without reaching the follower: up to 9/20 of the session while it keeps its
//! connection (its ping and connection timers), for instance across a stalled link. Measured in
//! `tests/ensemble.rs` at the default tick: with the former ¾ of the session, such a grant
//! outlived the leader's view of the session by 3.9 s. The assumptions: [`ZkOptions::tick_time`]
//! is at least the servers' `tickTime` (taken as at most half the session, as ZooKeeper's
//! default `minSessionTimeout` ensures), and a client given to [`from_client`] has a connection
//! timeout of at most 2/5 of its session (the crate's default).
//!
//! [`Lease::ttl`]: lock_core::Lease::ttl
//!
//! A lease that is lost but not released (for example dropped) still has its node deleted in
//! the background once the server is reachable, so nobody waits for a lock no one claims.
//! A client whose session expired makes a new session on its next call.
//!
//! Needs ZooKeeper 3.5 or later (container nodes, create with stat); tested with 3.8.
//!
//! ## TLS
//!
//! With the crate's `tls` feature (dlock-rs's `zk-tls`), [`ZkOptions::tls_ca_file`] names a PEM file of the CA(s)
//! that sign the servers' certificates; every connection then uses TLS (point the URL at
//! ZooKeeper's `secureClientPort`), verifying the chain and that the certificate names the
//! URL's host or IP, so digest credentials no longer cross the wire in clear. The feature is
//! off by default because the client crate's TLS brings `aws-lc-rs`, a C library built from
//! source. A server whose certificate the CA did not sign, a plaintext port, or a plaintext
//! client on the TLS port gives no session: `Unavailable` after `connect_timeout`. Servers
//! need `serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory`, a keystore,
//! and `ssl.clientAuth=none` (client certificates are not supported yet).
//!
//! ## ACLs
//!
//! Without credentials in the URL every node is open to everyone (anyone who can reach the
//! ensemble can then delete or plant lock nodes). With `user:password@` (digest auth),
//! everything dlock creates carries `CREATOR_ALL` (readable and writable by that user only): the
//! root, the nodes above it that were missing, the per-name parents of every kind (containers,
//! removed by the server when empty) and the lock nodes. ZooKeeper checks ACLs per node, so:
//!
//! - an **existing root** whose ACL lets anyone else write, create, delete or administer is
//!   refused at connect with a `Config` error naming the entries (reading by others is
//!   allowed); so is a root of another user;
//! - the root keeps a persistent child `~dlock`, so it is never empty: an empty root under a
//!   parent others may change (`/`, say) could be deleted and recreated open.
//!
//! Tested: an unauthenticated client can neither list, read, plant nor delete anything under a
//! protected root, held or idle.
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

mod acl;
mod acquire;
mod client;
mod config;
mod hints;
mod inspect;
mod keeper;
mod lease;
mod node;
mod observe;
mod recipe;
mod root_watch;
mod scope;
mod session;
mod tls;

pub use client::{connect, from_client, ZkLock};
pub use config::ZkOptions;
