//! # lock-etcd
//!
//! The etcd v3 backend of dlock (docs/contract.md), built as a third party would build one:
//! on lock-core's public API only, and certified by lock-conformance's public suite.
//!
//! ## Client library
//!
//! [`etcd-client`](https://docs.rs/etcd-client) 0.21, the maintained etcd v3 gRPC client
//! (tonic 0.14 / prost 0.14, the versions already in this workspace). It generates its gRPC
//! code from etcd's protos at build time, so building this crate needs `protoc` (Debian
//! `protobuf-compiler`, or `PROTOC=/path/to/protoc`). That is why the crate is not part of
//! dlock's default build; `scripts/setup-test-env.sh` installs `protoc` and etcd.
//!
//! ## The algorithm (etcd's own `concurrency.Mutex` recipe, with a lease per acquisition)
//!
//! - **A lease per acquisition.** Each `acquire`/`try_acquire` holds its own etcd lease with
//!   the ttl (whole seconds, rounded up: the server keeps the lease at least as long as the
//!   holder relies on it). Renewal is a keep-alive of that lease; release deletes the key (the
//!   lease is then kept or revoked, below). Why not one lease per client (as etcd's
//!   `Session`): the caller's `ttl` is per acquisition (docs/contract.md §3), a keep-alive
//!   failure or a lease expiry then loses one lock instead of every lock of the process, and a
//!   waiter that leaves revokes exactly its own key. The price is one keep-alive per held lease
//!   per renewal.
//! - **A released lease serves the client's next acquisition.** Release deletes the key
//!   (owner-checked) and, when that delete's own answer said the key was ours, keeps the lease,
//!   now without a key, for the next acquisition of this client with the same ttl (in whole
//!   seconds; at most 8 leases, none older than half its ttl, never two acquisitions on one
//!   lease). That acquisition sends its queueing transaction and a keep-alive of the lease
//!   together (one round trip, two requests) and counts its validity from that keep-alive, so
//!   the free path costs the same two durable writes as a bare put-if-absent + delete (the
//!   keep-alive is answered by the leader without a write). Otherwise (a client's first
//!   acquisition with a ttl) the lease is granted with an id the client chooses and the
//!   transaction follows 3 ms later without waiting for the grant's answer (sent at once it
//!   overtakes the grant on etcd 3.4; sent after the answer it costs a round trip); on "lease
//!   not found" it is sent again. A renewal that finds its key gone never revokes the lease:
//!   overlapping a release, it would revoke the next acquisition's key with it. An unused
//!   spare simply expires on the server, carrying nothing.
//! - **A key per waiter**, `<prefix>/lock/<escaped name>/<lease id>`, attached to the lease and
//!   created in a transaction (`create_revision == 0`, so a retried create finds its own key)
//!   that also reads the queue's oldest key.
//! - **The holder is the key with the lowest create revision** under the name's prefix.
//! - **Each waiter watches only its predecessor** (the newest key created before its own) for
//!   deletion, from the revision it read it at, so no deletion is missed and a release wakes
//!   exactly one waiter: FIFO, no herd.
//! - **A grant is confirmed by the server, never inferred from a watch event** (docs/contract.md
//!   §4): after every wake-up the waiter reads, in one transaction that first checks its own
//!   key still exists with its create revision, whether any key is older than its own. Only
//!   "none" grants; a watch event only says "look again".
//! - **The fencing token is the key's create revision**: cluster-wide, strictly increasing,
//!   persisted and replicated, so it survives restarts and leader changes. Grants of a name
//!   follow create-revision order, so tokens grow with each grant.
//! - **Lost signal.** Each renewal keeps the lease alive and then reads the key back (same
//!   create revision, same lease). The lease is lost when the server says the lease or the key
//!   is gone (an operator deleted it), and — as for every backend — by the clock when no
//!   renewal succeeded before `valid_until`, which is counted from the moment the request
//!   that last (re)started the lease was sent (`t0 + ttl − drift`), so `is_valid()` never
//!   claims a lock the server may already have freed.
//! - **Waiters that leave** (timed out, refused, or their `acquire` future dropped) revoke their
//!   lease at once (in the background when dropped), which deletes their key: the next waiter
//!   is woken at once, and a grant the waiter did not take up is withdrawn the same way.
//! - Every request is bounded by `request_timeout` (never beyond the caller's wait); a waiter
//!   keeps its own lease alive while it waits.
//!
//! Assumptions: etcd's linearizable reads and transactions (the default; no `--consistency=s`
//! proxy in between), and clocks on client and server that run at about the same rate (the
//! lease is timed by the leader's clock, the holder's validity by the client's; the drift
//! allowance covers the rest). A holder that pauses past its validity can still write after
//! its lease is gone — use the fencing token (Jepsen's etcd 3.4.3 analysis). A leader that
//! stalls (SIGSTOP, a disk stuck in fsync) past its followers' election can, when it resumes,
//! still revoke the leases that expired by its own stale clock, through the new leader (etcd
//! issues 12528 and 15247, fixed in etcd 3.4.28 and 3.5.11): a holder that kept its lease alive
//! with the new leader then loses its key while it believes it holds. Use an etcd with that fix.
//!
//! Inspection: `inspect` and `list` report the oldest key of each queue (holder id and metadata
//! from its value, its create revision as the token; no remaining time), and `force_release`
//! deletes it (owner-checked by create revision) and revokes its lease.
//!
//! ## Read-write locks and semaphores
//!
//! [`EtcdLock`] also implements [`DistributedRwLock`](lock_core::DistributedRwLock) and
//! [`DistributedSemaphore`](lock_core::DistributedSemaphore) on the same queue machinery
//! (lease per acquisition, key created in a transaction, grant confirmed by a read that first
//! checks our key, create revision as token). Each kind has its own queue, so one name used as
//! a lock, a read-write lock and a semaphore names three independent things:
//! `<prefix>/lock/<name>/`, `<prefix>/rw/<name>/` and `<prefix>/sem/<name>/`.
//!
//! - **Read-write lock**: readers queue `r<lease>`, writers `w<lease>` under one prefix. A
//!   writer holds when no key is older and watches its predecessor; a reader holds when no
//!   *writer* key is older and watches the nearest older writer. FIFO: a queued writer holds
//!   back the readers behind it. A writer's token (its create revision) is above every grant
//!   before it, since all of them queued earlier; co-readers' tokens follow arrival, not the
//!   order in which they learn of their grants.
//! - **Semaphore** of `n` permits: a waiter holds while fewer than `n` keys are older, every one
//!   of which must say the same `n` (`InvalidOptions` otherwise; `n = 0` too). A waiting
//!   permit watches the whole queue for deletions (any holder ahead may leave first), so a
//!   release wakes every waiting permit of that name, each of which reads the queue again; the
//!   exclusive lock and the read-write lock wake exactly one waiter per release.
//!
//! Election observers hear of grants and releases through `watch_changes`: a watch on the
//! lock's queue (any change under it fires the feed; the observer reads the holder back).
//!
//! ## TLS
//!
//! `etcds://[user:pass@]h1:2379,h2:2379/prefix` speaks TLS to every member through
//! etcd-client's `tls` feature: rustls with the ring provider (the one the workspace already
//! builds for sqlx and Redis; no aws-lc or OpenSSL to compile). Members are verified against
//! [`EtcdOptions::tls_ca_file`] (a private CA's PEM) or else the webpki (Mozilla) roots; a
//! certificate that does not verify is a prompt `Unavailable` that names `tls_ca_file`, and a
//! plaintext `etcd://` URL against a TLS port is an `Unavailable` that names `etcds://`.
//! Members that demand a client certificate (`--client-cert-auth`, or in 3.4 any
//! `--trusted-ca-file`) get the one of [`EtcdOptions::tls_cert_file`] and
//! [`EtcdOptions::tls_key_file`] (PEM files, set together; `[etcd] tls_cert_file` /
//! `tls_key_file` in `dlock.toml`), offered in every handshake.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, DistributedLock, LockName};
//! let lock = lock_etcd::connect("etcd://etcd1:2379,etcd2:2379/myapp", lock_etcd::EtcdOptions::default()).await?;
//! let lease = lock.acquire(&LockName::new("nightly-report")?, &AcquireOptions::new(Duration::from_secs(10))).await?;
//! println!("fencing token {}", lease.token());
//! lease.release().await?;
//! # Ok(()) }
//! ```

mod client;
mod config;
mod error;
mod inspect;
mod keepalive;
mod keys;
mod kinds;
mod lease;
mod observe;
mod queue;
mod recipe;
mod spare;

pub use client::{connect, from_client, EtcdLock};
pub use config::{EtcdOptions, DEFAULT_PORT};
