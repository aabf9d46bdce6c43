//! The client's side of a grant in the release (crate::scripts::queue, "Grants in the release"):
//! the exclusive lock of a single instance hands itself to the queue's head, provisionally, and
//! the head claims it with its own acquire script.
//!
//! ## A grant is confirmed by the server (docs/contract.md §4)
//!
//! The release's message to the head (`@<owner>` on the head's wake channel) is a hint, never a
//! grant: it names no token, and a waiter that hears it only wakes and runs its acquire script,
//! as after any wake-up. That script finds the lease its own (the release wrote it) and
//! re-grants it (contract §3): the lease is extended to the head's ttl and the token comes back
//! in the reply. So `acquire` returns only a lease the server confirmed, with the server's token,
//! and its validity counts from that script call's send instant, like any acquire. Anyone who
//! can publish (a user with read rights and `+publish`), a late or a duplicated message can wake
//! a waiter, never make it hold. The cost is one round trip on the hand-off, on the script's
//! shortest path after the free one (`HMGET` of owner, lease end and token, `TIME`, `HSET` of the
//! new lease end).
//!
//! A head armed for blocking delivery (`crate::blocking`) gets the token pushed onto a list of its
//! own instead of the message, and holds at once for the claim window from its arm's send; its
//! lease's first renewal is then the claim (`ClaimPushed`, checked against owner and token).
//!
//! ## The bound on an untaken grant
//!
//! The release grants the head the lease for the claim window only, [`CLAIM_MS`] (at most the
//! head's ttl); the head's claim extends it to its ttl. A head that does not claim — its process
//! died, or was cut off — therefore holds the lock for the claim window, not for its ttl. The
//! grant removed its entry, so once the window has passed the lock is free for the next
//! waiter, which takes it at its next attempt: at most one re-try interval of that waiter later
//! (`4 × max_poll_interval`, 2 s at most, or the holder's remaining lease it last saw if
//! shorter). A vanished head therefore keeps the lock from the others for at most
//! `min(ttl, 1 s) + 4 × max_poll_interval` plus one request (3 s plus a round trip with the
//! default poll settings, whatever the ttl). A wait that ends in a live process (deadline,
//! dropped future) abandons (the abandon script, `crate::scripts::HandOff`): a grant it has not claimed is
//! released there and handed on to the next waiter, in the same script, one round trip after
//! the wait ended.

/// The claim window of a grant in the release (ms): how long the queue's head holds a lock the
/// release granted it before its own acquire script claims it. A woken head claims within a
/// round trip or two; the window is four times the reservation of a woken head that takes no
/// grants (`RESERVE_MS`), so that a head slowed by a loaded machine does not lose its turn, and
/// short beside the ttls locks are taken for, so that a head that died does not hold the lock
/// for its ttl (the module docs).
pub(crate) const CLAIM_MS: u64 = 1000;
