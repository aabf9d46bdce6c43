//! # lock-redis
//!
//! Redis backends for dlock: a single Redis server ([`connect`], `redis://` / `rediss://`) and
//! Redlock over N independent masters ([`connect_redlock`], `redlock://h1:p1,h2:p2,…`). Both
//! implement [`lock_core::DistributedLock`]; waiting, time-outs, cancel-safety and the lease
//! watchdog come from [`lock_core::backend::StoreLock`]. On a single server there are also read-write
//! locks ([`connect_rw`]) and semaphores ([`connect_semaphore`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, DistributedLock, LockName};
//! let lock = lock_redis::connect("redis://:secret@127.0.0.1:6379/0", Default::default()).await?;
//! let lease = lock.acquire(&LockName::new("orders/42")?, &AcquireOptions::new(Duration::from_secs(10))).await?;
//! // pass lease.token() with every write to the protected resource
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Single instance
//!
//! - **Acquire** is one round trip: a Lua script that, when the lock key is absent, issues the
//!   next fencing token, stores `{owner, token}` with `PX ttl` and returns the token; when the
//!   key is ours already (a re-try after a lost reply) it refreshes the expiry and returns the
//!   stored token; otherwise it returns the holder's `PTTL`, which bounds how long a waiter
//!   sleeps. **Renew** and **release** are owner-checked scripts; release hands the lock to
//!   the head of the waiter queue (below). Scripts are called by SHA and re-loaded on `NOSCRIPT`.
//!   Scripts are also loaded once per new connection (one pipelined round trip), so the
//!   first call by SHA does not pay a `NOSCRIPT` round trip.
//! - **Keys**: `<prefix>:{<escaped name>}:lock`, `…:fence`, the waiter queue's `…:waiters`,
//!   `…:waiter-ends` and `…:waiter-entries`, and the channel `…:released`. The
//!   name is percent-escaped (never stripped, so distinct names never collide) and is the hash
//!   tag: all keys of a lock live in one Redis Cluster slot, and every key is passed in `KEYS`,
//!   so every script runs on Redis Cluster (`redis+cluster://`, below).
//! - **Fencing tokens never go backwards**, also when Redis restarts without persistence or
//!   evicts the counter: the script never issues less than the server's `TIME` in microseconds
//!   (`token = max(counter + 1, TIME µs)`). What this still assumes: the server clock does not
//!   jump backwards across a restart by more than the time between two acquisitions.
//! - **Eviction**: run Redis with `maxmemory-policy noeviction`. Under `allkeys-*` policies a
//!   held lock key can be evicted (two holders!); under `volatile-*` policies too, since lock
//!   keys carry an expiry. The fence counter survives eviction thanks to the `TIME` floor.
//! - **Restarts**: a Redis without persistence forgets every lease when it restarts
//!   (`durable_leases` is false): holders find no entry at their next renewal and their lost
//!   signal fires; tokens stay monotonic (`durable_fencing` is true). Until that renewal a
//!   holder still believes its lease, so a server that lost its state **grants nothing for a
//!   quiet period** (docs/contract.md §3): an acquire that finds the name's fence missing (the
//!   free path below says why only then) checks the boot marker `<prefix>:boot`; the
//!   first one to find it missing writes "quiet until" = server `TIME` +
//!   [`RedisOptions::restart_quiet_period`] (default [`RedisOptions::max_ttl`], 60 s, the
//!   longest ttl a client accepts) and every fresh grant of every kind is refused until then,
//!   answered like a busy lock with the time left (waiters sleep exactly that long). A missing
//!   marker also means `FLUSHALL`, a failover to an empty replica, or the first use of a key
//!   prefix on a server: a brand-new deployment waits the quiet period once, unless the operator
//!   writes `SET <prefix>:boot 0` (saying no lease can have been forgotten). Keep every client's
//!   ttl at or below the quiet period; `0s` turns it off, which is only safe on a server that
//!   never loses acknowledged writes. On a Redis Cluster node a script may touch one slot only,
//!   so there the marker is per hash slot (`<prefix>:{<tag>}:boot`, `<tag>` a number hashing
//!   to the slot; [`cluster_boot_markers`] lists them) and the names of a slot whose master
//!   restarted empty wait once. Redlock masters do the same each, so a majority restarting empty grants nothing
//!   while a lease may still be believed.
//! - **The free path** (a free name, nobody queued) is what every uncontended lock pays, so it
//!   makes the fewest server calls that keep the promises above (before: 9 and 4). *Acquire*:
//!   `EXISTS` of the lease and the queue (neither key: free, nobody queued), `GET` (the fence),
//!   `TIME` (the token floor), `SET` (the new fence), `HSET` + `PEXPIRE` (the lease), `PUBLISH
//!   +` (observers): 7 calls, plus `HSET h`/`HSET m` for a holder id or metadata and `PEXPIRE`
//!   of the fence with `idle_gc_after`. *Release* with nobody queued behind the lease: `HMGET`
//!   (owner and the queue mark `q`), `DEL`, `PUBLISH -`: 3 calls. *Renew*: `HGET`, `PEXPIRE`.
//!   A waiter's claim of its own lease: `EXISTS`, `HGET`, `PEXPIRE`, `HGET`. What each dropped
//!   call was, and which promise makes it unnecessary:
//!   - the boot marker's `GET` is made only when the name has no fence. A fence the server still
//!     has was written by a grant made after the server last lost its state (a loss takes the
//!     fence with it: restart without persistence, `FLUSHALL`, failover to an empty replica),
//!     and the first grant after a loss finds no fence, reads the marker and starts the quiet
//!     period, during which nothing writes a fence (grants are refused; a grant in a release
//!     needs a live lease, which a loss would have taken). So a present fence proves that no
//!     lease of this name was forgotten since its last grant: the quiet period has nothing to
//!     protect. (A restore from an older snapshot brings old fences and an old marker back
//!     together: the marker never detected that either; tokens still rise by the `TIME` floor.)
//!     A server used as a Redlock master must not also serve `redis://` clients with the same
//!     key prefix (Redlock's fence round writes the same key).
//!   - `INCR` of the fence: the token is `max(fence + 1, TIME µs)` from the `GET` the marker
//!     check needed anyway, then one `SET`, as before.
//!   - the owner's `HGET` and the queue's `ZCARD`: one `EXISTS` of both keys says "free, nobody
//!     queued" (an ended lease's key is gone, an empty queue has no key); the owner is read only
//!     when either exists.
//!   - the release's `ZCARD`: every way a waiter comes to be queued behind a lease marks the
//!     lease (`q`): a registration while it is held, a grant that leaves others queued, a grant
//!     in the release that does; a lease without the mark had nobody queued behind it, so its
//!     release publishes `-` without reading the queue (tested one way each).
//!
//!   Kept: `TIME` (a token floored by the server clock never repeats one a promoted replica
//!   missed, or one a restart without persistence forgot), the acquire's `ZCARD` (a free lock
//!   may be reserved for the queue's head, and a free lock has no lease to carry a mark: the
//!   `EXISTS`), the
//!   `+`/`-` messages (election observers of other processes, contract §5.8: skipping them would
//!   need observers registered on the server, a read on every path). Server time per acquire +
//!   release and the floor's: BENCHMARKS.md. Read-write locks, semaphores and Redlock keep
//!   their own scripts (every acquire reads the marker).
//! - **Waiting, in arrival order** (`fifo`): a waiter's first attempt is the same one round
//!   trip as a try; only when refused does it register for its client's wake channel (one pub/sub
//!   connection per client and server, shared by all its waiters, channels reference-counted
//!   and unsubscribed when unused) and attempt once more before it waits, so a release in
//!   between is not missed. SUBSCRIBE is queued without waiting for its confirmation; the
//!   confirmation leaves each waiter a wake-up permit. A refused waiting attempt also takes a
//!   place in the lock's **waiter queue** on the server (two sorted sets and a hash, same hash
//!   tag, O(log n) per attempt however many wait; its rules and assumptions in
//!   `scripts/queue.rs`, its keys in `scripts/waiters.rs`): a free lock goes only to the queue's head (or to
//!   anyone when it is empty, so a free lock stays one round trip), a release publishes
//!   `@<owner>` of the head on the head's client's own wake channel, which wakes that waiter
//!   only and reaches no other client (one delivery per release), and a `try_acquire` never
//!   overtakes a queued waiter. A head that asks no replica acknowledgements and stores no
//!   holder id or metadata is granted the lock by the release itself, provisionally for the
//!   **claim window** (`min(ttl, 1 s)`), and claims it with its own acquire script, woken by
//!   the message: **a grant is confirmed by the server**, the message is a hint that names no
//!   token, and the lease's token and validity come from the claim's reply, as for any
//!   acquire (`handoff.rs`, "Grants in the release" in `scripts/queue.rs`). Bounds: a head that
//!   vanished keeps a free lock from the others for at most 250 ms (its reservation) or, when
//!   the release granted it, the claim window, plus one re-try of the next waiter (at most
//!   `4 × max_poll_interval`): **the bound on an untaken grant**, 3 s plus a round trip with
//!   the default poll settings; a waiter that vanished while others hold the lock drops out
//!   when its registration ends (`2 × (4 × max_poll_interval + request_timeout)`); a wait that
//!   ends without a grant (deadline, dropped future) leaves the queue at once, releasing a
//!   grant it had not claimed and handing it on, one round trip after it ended. A vanished
//!   holder publishes nothing, so waiters also re-try on a timer bounded by the holder's
//!   remaining ttl. Every grant also publishes `+`, and a release with nobody queued `-`,
//!   which no waiter acts on: they wake election observers of any client
//!   (`Capabilities::notify_changes`, contract §5.8). The pub/sub connection is health-checked
//!   with PING; after it reconnects,
//!   every channel is re-subscribed and every waiter re-tries. Read-write locks and semaphores
//!   queue their waiters the same way, on the same structure and cap (`…:rw:waiters`,
//!   `…:sem:waiters`, …; below), so they declare `fifo` too.
//! - **At most [`RedisOptions::max_waiters`] waiters per name** (default 10,000): a waiting
//!   `acquire` that would be one more fails at once with `InvalidOptions` naming the option
//!   (raise it, or let fewer clients wait on one name); it never queues. Clients from before
//!   this queue kept it in one string, `…:queue`, rewritten on every refused attempt (quadratic
//!   work with thousands of waiters); the new keys have other names, so clients of both
//!   versions on one name never meet a `WRONGTYPE`, but each sees only its own version's
//!   waiters: mixed versions lose **fairness** (they may overtake each other) during a rolling
//!   upgrade, **never exclusion**, which the lease alone decides.
//! - **Failures**: every command is bounded by `request_timeout` and every connect by
//!   `connect_timeout`; an unreachable server is `LockError::Unavailable`, a bad URL
//!   `LockError::Config`. A connection that failed or timed out is replaced, never reused.
//!   TLS (`rediss://`) and AUTH / ACL users (`redis://user:password@host`) come from the URL
//!   (servers are verified against the webpki roots, or against `tls_ca_file`); passwords never
//!   appear in `Debug` output, logs or errors. A URL parameter other than `protocol` (e.g. a
//!   misspelt `?tls=true`) is a `Config` error, never silently ignored; `rediss://…#insecure`
//!   (no certificate check) logs a warning at connect.
//! - **Least privilege** (tested with such a user): for the exclusive lock and Redlock,
//!   `ACL SETUSER <user> on >… ~<prefix>:* &<prefix>:* -@all +evalsha +script|load +ping
//!   +subscribe +unsubscribe +publish +hget +hmget +hset +pexpire +pttl +time +incr +get +set +del
//!   +zadd +zrange +zrangebyscore +zscore +zrem +zcard +hdel +exists` (the sorted sets and the
//!   hash: the waiter queue); read-write locks and semaphores add `+zremrangebyscore +zrank
//!   +zcount`; a database other than 0 in the URL adds `+select`.
//!   Every one of them is checked **once at connect** (on Redis ≥ 7, through
//!   `redis.acl_check_cmd`, on this client's own keys and channels): a missing one is a
//!   `Config` error naming it, instead of a script failing half-way (Redis scripts do not roll
//!   back: a release could delete the key and then fail to `PUBLISH`). The `key_prefix` is 1–64
//!   ASCII letters, digits and `- _ . : /`, so `~<prefix>:*` means exactly this client's keys.
//! - **What the channels reveal**: lock names appear (escaped) in key and channel names, so a
//!   user allowed to `PSUBSCRIBE` to `<prefix>:*` or to run `KEYS`/`SCAN` there sees which locks
//!   are used and when they are released. Give other users no access to the prefix.

//! ## Redis Sentinel
//!
//! `redis+sentinel://[user:password@]s1:p1,s2:p2,s3:p3/<master>[/<db>]` (Sentinel port default
//! 26379) is the single-instance backend on the primary the Sentinels name: every connect and
//! reconnect (command and pub/sub connection) asks them again, and the redis crate checks the
//! named server answers `ROLE` as master. A dropped connection, a time-out or a `READONLY`
//! reply (a demoted primary) replaces the connection, so after a failover the client follows
//! the new primary. Credentials and database are the data nodes' and never sent to a
//! Sentinel; the Sentinels' own ACL user, if they need one, is
//! `?sentinel_username=…&sentinel_password=…` (percent-encoded; no other parameter is
//! accepted). `rediss+sentinel://` is TLS to the Sentinels and to the data nodes they name, both
//! verified with `tls_ca_file` (or the webpki roots) and the address the Sentinel gave, before
//! any AUTH: a Sentinel that names a plaintext server or one with another certificate gets an
//! `Unavailable` error, never the password. With plaintext Sentinels, whoever can make a
//! Sentinel answer chooses where the data password goes (docs/security.md).
//! [`sentinel_primary`] finds the primary the same way, for tools.
//!
//! **Failover.** Replication is asynchronous: a grant or renewal the promoted replica never
//! received is forgotten, and another client can get the lock while the holder still believes
//! its lease (until its next renewal answers "not owner"). The restart quiet period does not
//! help here, because the boot marker was replicated long before. [`RedisOptions::min_replicas_ack`]
//! `= n` closes that window: each grant and renewal is followed by `WAIT n` on the same
//! connection, in the same attempt (a retry on a fresh connection sends both again, so a `WAIT`
//! never counts another connection's or node's writes); a grant fewer than `n` replicas acknowledged is released and answered
//! `Unavailable`. This holds when the promoted replica acknowledged: always with `n` = all
//! replicas; with fewer, it rests on Sentinel choosing the replica with the largest
//! replication offset (equal `replica-priority`). Tokens keep rising across a failover
//! because they are floored by the promoted server's `TIME`: this assumes the servers' clocks
//! agree to within the time between two grants of a name.
//!
//! **Clocks.** The promoted replica judges every lease's expiry by its own wall clock: Redis ≥ 7
//! replicates `PEXPIRE`/`PX` as an absolute `PEXPIREAT`, computed by the old primary's clock, so
//! a replica whose clock runs `δ` ahead ends every lease `δ` early. A lease is safe only while
//! the nodes' clocks agree within [`RedisOptions::max_clock_offset`] (default 50 ms), which
//! Sentinel and Cluster clients subtract from every lease:
//! `valid_until = t0 + ttl − (ttl/100 + 2 ms) − max_clock_offset` (docs/contract.md §3; a ttl
//! not above that allowance is `InvalidOptions`). Run NTP on every node; `dlock doctor` reports
//! each node's offset and warns past the allowance.
//!
//! ## Redis Cluster
//!
//! `redis+cluster://[user:password@]n1:p1,n2:p2,…[?tls=true]` (any nodes; the client learns the
//! rest) is the single-instance backend, every kind included, on the redis crate's
//! cluster client: each script goes to the master of its name's slot (one hash tag per name),
//! `MOVED` and `ASK` are followed, the slot map is refreshed when a node stops answering.
//! [`RedisOptions::cluster_node_map`] maps announced node addresses the client cannot reach
//! (NAT, proxies). `list` scans every master.
//!
//! - **Wake-ups**: classic pub/sub on one node at a time; a `PUBLISH` (also from a script)
//!   reaches every node over the cluster bus. When that node goes away the subscriber moves to
//!   the next node of the URL and wakes every waiter; releases published meanwhile are lost, so
//!   waiters stay correct through their timed re-try (bounded by the holder's ttl).
//! - **Failover** (a master killed, its replica promoted after `cluster-node-timeout`): as with
//!   Sentinel, replication is asynchronous, so only [`RedisOptions::min_replicas_ack`] (`WAIT`
//!   on the slot's master after each grant and renewal) keeps a lease across it; it rests on the
//!   promoted replica being one that acknowledged (always so with one replica per master).
//!   `WAIT` goes to the master of the slot in the client's slot map: after a `MOVED` that is the
//!   node that ran the script, but a script that followed `ASK` (a slot half-migrated) ran on
//!   the importing node, and its `WAIT` is counted on the source (not fixed yet: docs/contract.md, Known gaps). A
//!   promoted replica that has no replica itself acknowledges nothing: renewals fail
//!   (`Unavailable`) until one follows it. Tokens rise across it (`TIME` floor; the nodes'
//!   clocks must agree to within the time between two grants of a name). The promoted replica
//!   times the leases by its own clock, as under Sentinel ("Clocks" above): the same
//!   [`RedisOptions::max_clock_offset`] applies.
//! - **Resharding** (a slot migrated while its locks are held): `MIGRATE` moves the lease,
//!   fence and holder keys together (one slot); scripts on a key not yet moved run on the
//!   source, on a moved one the client follows `ASK`. A script needs all its keys on one node:
//!   while a slot is half-moved (some keys of a name moved, others not) it answers
//!   `TRYAGAIN`, reported `Unavailable` and re-tried by waiters and the watchdog.
//! - **Settings**: `maxmemory-policy noeviction` on every node; a short
//!   `cluster-node-timeout` shortens the window with no grant on a dead master's slots.
//!
//! ## Read-write locks and semaphores (single instance)
//!
//! [`connect_rw`] gives a [`RedisRwLock`] ([`lock_core::DistributedRwLock`]) and
//! [`connect_semaphore`] a [`RedisSemaphore`] ([`lock_core::DistributedSemaphore`]). They use
//! the same connection, pub/sub and script machinery as the exclusive lock; each side (read,
//! write, permit) is a small [`lock_core::backend::LeaseStore`], so waiting, time-outs, cancel-safety
//! and the lease watchdog are [`lock_core::backend::StoreLock`]'s. Redlock does not offer them (its
//! capabilities say `rw_lock: false, semaphore: false`).
//!
//! **Keys.** A name used as an exclusive lock, a read-write lock and a semaphore is three
//! different locks: each kind has its own key space under the same hash tag (so one Redis
//! Cluster slot per name), and every script gets all its keys in `KEYS`:
//!
//! | key | type | content |
//! |---|---|---|
//! | `<prefix>:{<name>}:rw:readers` | sorted set | reader owner → server time (ms) its lease ends |
//! | `<prefix>:{<name>}:rw:tokens` | hash | reader owner → its fencing token |
//! | `<prefix>:{<name>}:rw:writer` | hash, `PX ttl` | `{o: owner, f: token}` of the writer |
//! | `<prefix>:{<name>}:rw:waiters` | sorted set, `PX` | waiting reader `r:<owner>` or writer `w:<owner>` → arrival sequence |
//! | `<prefix>:{<name>}:rw:waiter-ends` | sorted set, `PX` | waiting member → server time (ms) its registration ends |
//! | `<prefix>:{<name>}:rw:waiter-entries` | hash, `PX` | waiting member → its entry (`…~<wake channel>`), and the reservation mark `#reserved` |
//! | `<prefix>:{<name>}:rw:waiting-writers` | sorted set, `PX` | the waiting writers' members → their sequence |
//! | `<prefix>:{<name>}:rw:fence` | integer | highest token issued for the read-write lock |
//! | `<prefix>:{<name>}:sem:holders` | sorted set | permit owner → server time (ms) its lease ends |
//! | `<prefix>:{<name>}:sem:tokens` | hash | permit owner → its fencing token |
//! | `<prefix>:{<name>}:sem:permits` | string | the number of permits its users agreed on |
//! | `<prefix>:{<name>}:sem:waiters`, `…:sem:waiter-ends`, `…:sem:waiter-entries` | as `rw:*` | waiting permit owners `p:<owner>` |
//! | `<prefix>:{<name>}:sem:fence` | integer | highest token issued for the semaphore |
//!
//! Channels: each client's wake channel `<prefix>:wake:<client id>`, where its queued readers,
//! writers and permit waiters (entries `<kind>:<owner>~<wake channel>`) are woken by
//! `@<owner>`; `…:rw:to-readers`, `…:rw:to-writers`, `…:sem:released` carry the same wake-ups
//! for an older client's entries (no `~`). The sorted sets, the token hashes and `sem:permits`
//! carry the expiry of their longest lease, and a queue that of its last registration, so
//! nothing is left behind when holders and waiters vanish; the fence counters have no expiry.
//!
//! **Waiter queues** (`fifo`; the rules and assumptions in `scripts/kinds_queue.rs`): a
//! refused *waiting* attempt takes a place at the tail of the kind's queue, as the exclusive
//! lock's waiters do, on the exclusive queue's sorted sets (O(log n) per attempt) and with its
//! cap: past [`RedisOptions::max_waiters`] a new waiting reader, writer or permit waiter fails
//! with `InvalidOptions`. The grantable heads are reserved once each (the reservation mark),
//! so a writer's release that lets in a run of n readers costs O(n) once, not per reader. The queue's **grantable heads** are the head writer alone while nobody
//! holds, the run of consecutive readers at the head while no writer holds, and the first
//! `permits − holders` permit waiters. A queued caller is granted only among them; a caller not
//! queued (a newcomer, `try_acquire_*`, the releaser coming straight back) only when the queue
//! is empty (a semaphore: when more permits are free than waiters are queued), so a free lock
//! stays one round trip, nobody overtakes a queued waiter, and a reader never joins the current
//! readers while a writer is queued. Whenever a script finds grantable heads (a release, a wait
//! that gave up, an attempt that found a lease expired) it reserves them (each gets at most
//! 250 ms to come) and wakes each of them alone by `@<owner>` on its client's own wake channel:
//! one delivery per waiter that can now be granted, across all clients. Bounds: a grantable head that vanished holds the others
//! back for at most its 250 ms reservation plus one re-try of the next waiter (at most `4 ×
//! max_poll_interval`); a waiter that vanished further back drops out when its registration
//! ends (`2 × (4 × max_poll_interval + request_timeout)`); a wait that ends without a grant
//! leaves at once (its release script drops the entry). Exclusion is checked exactly as without
//! a queue: a waiter that misses its turn loses fairness, never safety.
//!
//! **Scripts** (one round trip each; expiries are decided by the server's `TIME`, never by a
//! client clock; every script first drops the holders whose lease ended):
//! - *read acquire*: already ours → extend, same token. Else refused while a writer holds
//!   (answer: its `PTTL`) or while it is not this reader's turn in the queue (answer: until the
//!   reservations ahead end); else the next token, the reader added with `now + ttl`.
//! - *write acquire*: already ours → extend, same token. Else refused while a writer or a reader
//!   holds or while it is not this writer's turn; a refused **waiting** writer keeps its place,
//!   which makes every reader arriving after it wait, so a stream of readers cannot starve it
//!   (readers already in keep their leases). A wait that ends without a grant (time-out, error,
//!   dropped future) leaves the queue at once; a crashed writer's place lapses on its own; a
//!   single `try_acquire_write` takes none. Granted: next token, `rw:writer` with `PX ttl`.
//! - *permit acquire*: `sem:permits` different from the caller's `permits` while anyone holds →
//!   `InvalidOptions` (when the semaphore is empty any number starts afresh); already ours →
//!   extend; all permits taken, or the free ones belong to queued waiters ahead → refused
//!   (answer: until the first lease or reservation ends); else the next token and the holder
//!   added.
//! - *renew* (owner-checked): readers and permits move their score to `now + ttl` if their
//!   lease has not ended; the writer uses the exclusive lock's renew on `rw:writer`.
//! - *release* (owner-checked; also a wait's abandon, which drops the owner's queue entry):
//!   reserves and wakes the grantable heads it lets in — the head writer when the last reader
//!   leaves, the head writer or the run of readers at the head when the writer leaves, the
//!   waiter that gets the freed permit.
//!
//! **Tokens** come from the exclusive lock's scheme, per name and kind: `max(counter + 1, TIME
//! in µs)`, so every grant of a read-write lock (readers included) or of a semaphore gets a
//! token above every earlier one of that name and kind, also after an empty restart. A
//! writer's token is above every reader's before it.
//!
//! **Promised** (`fifo`): waiters are granted in arrival order as far as the kind allows (a
//! writer alone, consecutive readers together, as many permit waiters as permits are free).
//! The price: a grantable head that vanished delays the others by its reservation.
//!
//! ## Redlock
//!
//! `redlock://[user:password@]host1:port1,host2:port2,…[/db][?tls=true]` names N independent
//! masters (not replicas of each other, not a cluster). Use an odd N ≥ 3 (typically 5): the
//! quorum is ⌊N/2⌋ + 1, so 5 masters tolerate 2 down.
//!
//! - **Acquire**: the lease is taken on every master in parallel, each attempt bounded by a
//!   per-master timeout (`min(request_timeout, ttl/3)`); a round stops waiting as soon as its
//!   outcome is decided, so a hung minority costs nothing. It is granted only if a
//!   majority accepted and the whole round (including fencing, below) finished within the
//!   validity time `ttl − elapsed − drift` (`drift = ttl/100 + 2ms`); otherwise it is released
//!   on **all** masters, including those that did not answer, and re-tried after a random delay
//!   (or, if a majority is held by someone else, when woken as the queue's head, below, or
//!   when that lease ends).
//! - **Renewal** extends the lease on every master and needs a majority; a majority of refusals
//!   is a lost lease; anything else is retried by the watchdog until `valid_until`.
//! - **Fencing across the quorum**: the acquire round also reads the counter of each master
//!   that grants (a majority), floored by that master's `TIME` in µs; the token is `max + 1`,
//!   and a second round sends it with set-if-greater to every master. The lock is returned
//!   only after a majority confirmed that it stored exactly this token (a master answering a
//!   higher value means an unseen token: no grant, re-try). Reads and writes each reach a
//!   majority, so any read meets the last write; with all masters up the write reaches all N
//!   (the stores still running when a majority confirmed finish in the background, a master
//!   still reconnecting included), so even two of five masters restarting empty cannot hide the highest token (tested with
//!   counters set far ahead of every clock). Beyond that, a master that restarted empty still
//!   answers at least its clock, which is above any earlier token while the masters' clocks
//!   roughly agree.
//! - **Failed attempts** are undone in the background on every master, scoped to that attempt
//!   (an attempt id stored with the owner), so a late undo never frees the same owner's next,
//!   successful attempt.
//! - **Waiting, in ticket order** (`fifo`): each master keeps a waiter queue per name
//!   (`…:rl-waiters` and `…:rl-waiter-ends`, sorted sets like the single instance's queue, with
//!   its O(log n) updates and its `max_waiters` cap per master), ordered
//!   by a **ticket** the waiter picks once per wait (its wall-clock µs when the wait began, the
//!   owner id breaking ties) and sends with every attempt to every master. Arrival order would
//!   not do: concurrent registrations reach masters in different orders, their heads would
//!   differ and no head would get a majority. A waiting attempt registers before anything
//!   else; a free key goes to the caller only if that master's queue is empty or the caller is
//!   its head; `try_acquire` never registers and never overtakes. A release (and the undo of a
//!   failed round by anyone but the head) reserves the key for the head for 250 ms and wakes it
//!   alone (`PUBLISH <its wake channel> @<owner>`); the head runs its round at the first such message and, being
//!   the head everywhere, wins it in one round. A head whose round fails keeps its place (its
//!   undo frees the key, not the place). Rules, assumptions and why it cannot livelock:
//!   `scripts/redlock.rs`. Clock skew between clients only reorders them (fairness), never
//!   affects exclusion (still a majority of leases); a vanished waiter is skipped once its
//!   registration or reservation ends, as on the single instance.
//!
//! ### What Redlock still assumes, and why the token is the real protection
//!
//! Redlock's exclusivity rests on timing: bounded network delay, bounded process pauses, and
//! clocks that advance at about the same rate on clients and masters. A holder that pauses
//! (GC, swap, SIGSTOP) past its validity, or a master whose clock jumps forward (an NTP step)
//! and expires a key early, can let a second client acquire while the first still believes
//! it holds the lock. dlock fires the lost signal at `valid_until` on the holder's monotonic
//! clock, but a paused process cannot act on it. Therefore: pass [`lock_core::FencingToken`]
//! with every write and make the protected resource reject tokens lower than the highest it
//! has seen ([`lock_core::FencedRegister`]). The tokens stay monotonic even in the scenarios
//! above; exclusivity alone does not. Masters should also run with `noeviction`. Redlock's
//! "delayed restart" (a master that restarts empty must not vote before the longest ttl has
//! passed) is built in: the restart quiet period (see "Restarts" above) keeps such a master
//! from granting until then.

mod acl;
mod backend;
mod boot;
mod cluster;
mod conn;
mod endpoint;
mod handoff;
mod kinds;
mod options;
mod pubsub;
mod redlock;
mod reply;
#[doc(hidden)]
pub mod scripts;
mod sentinel;
mod single;
mod url;

pub use backend::RedisBackend;
pub use boot::cluster_boot_markers;
pub use kinds::{RedisKinds, RedisRwLock, RedisSemaphore};
pub use options::{RedisOptions, DEFAULT_MAX_CLOCK_OFFSET, DEFAULT_MAX_WAITERS};
pub use redlock::RedlockStore;
pub use sentinel::sentinel_primary;
pub use single::RedisStore;

use lock_core::{backend::StoreLock, LockError};

/// A lock client of one Redis server. Backend label `redis`.
pub type RedisLock = StoreLock<RedisStore>;

/// A lock client of N independent Redis masters (Redlock). Backend label `redlock`.
pub type Redlock = StoreLock<RedlockStore>;

/// Connects to one Redis server: `redis://[user:password@]host[:port][/db]`, or `rediss://…`
/// for TLS. Checks the server answers within `connect_timeout + request_timeout`.
///
/// Errors: a malformed URL or bad options is `Config`; an unreachable server is `Unavailable`;
/// rejected credentials are `Config`.
pub async fn connect(url: &str, options: RedisOptions) -> Result<RedisLock, LockError> {
    Ok(StoreLock::new(RedisStore::connect(url, &options, acl::Needs::Exclusive).await?))
}

/// Connects to N independent masters:
/// `redlock://[user:password@]host1:port1,host2:port2,…[/db][?tls=true]` (N odd, ≥ 3). A
/// majority must answer now, else `Unavailable`; the others are reconnected when they return.
pub async fn connect_redlock(url: &str, options: RedisOptions) -> Result<Redlock, LockError> {
    Ok(StoreLock::new(RedlockStore::connect(url, &options).await?))
}

/// Connects a read-write lock client (docs/contract.md §5.2) to one Redis server; same URLs, options and
/// errors as [`connect`]. Shares nothing with other clients: each call opens its own
/// connection (and, when it first waits, its own pub/sub connection).
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, DistributedRwLock, DistributedSemaphore, LockName};
/// let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
/// let rw = lock_redis::connect_rw("redis://127.0.0.1:6379", Default::default()).await?;
/// let name = LockName::new("catalog")?;
/// let read = rw.acquire_read(&name, &opts).await?; // other readers may hold it too
/// read.release().await?;
/// let sem = lock_redis::connect_semaphore("redis://127.0.0.1:6379", Default::default()).await?;
/// let slot = sem.acquire_permit(&LockName::new("encoders")?, 4, &opts).await?; // one of 4
/// slot.release().await?;
/// # Ok(()) }
/// ```
pub async fn connect_rw(url: &str, options: RedisOptions) -> Result<RedisRwLock, LockError> {
    kinds::connect_rw(url, &options).await
}

/// Connects a semaphore client (docs/contract.md §5.3) to one Redis server; same URLs, options and errors
/// as [`connect`].
pub async fn connect_semaphore(url: &str, options: RedisOptions) -> Result<RedisSemaphore, LockError> {
    kinds::connect_semaphore(url, &options).await
}
