//! Redlock over three independent masters, as lock-redis's `RedlockStore` runs it.
//!
//! ## The protocol
//! - **Owner**: an acquisition (its attempts and its wait) has one owner id, drawn afresh for
//!   each acquisition, so a request of a client's earlier acquisition (a late release, undo,
//!   withdrawal or claim) never matches a key granted to its later one. The model's owner is
//!   the client and its acquisition's generation ([`Key::acq`]: a release with attempts left
//!   starts the next, dropping the earlier one's arm marks), compared together; symmetry
//!   renames a client with its generation.
//! - **Round 1**: an attempt (with a fresh attempt id) asks every master to take the key for
//!   its owner (a free key, or one the owner already has, which is re-granted with the new
//!   attempt id) and to read the fence floor: the master's counter, at least its clock. The
//!   attempt stops waiting once a majority granted, or once a majority refused or timed out.
//! - **Round 2**: the token is the highest floor read + 1; a majority must store it
//!   (set-if-greater, only a store by this attempt counts) before the lease is taken, valid for
//!   the ttl from the attempt's start, provided that time has not passed.
//! - **Undo**: an attempt without a lease frees, in the background, what it may have taken on
//!   every master that did not answer "held", and only that attempt (the key's attempt id).
//! - **Restart**: a master that lost its data grants nothing for a ttl (the quiet period).
//!
//! ## Tokens left by the release ([`Redlock::claim`] > 0; lock-redis `src/scripts/redlock.rs`)
//! - **Release** (owner-checked, per master, sent after whatever the holder still has in flight
//!   on that connection, a claim it sent included) **carries the holder's token** (the one its
//!   round stored or a majority named; none for a withdrawal): where the key is the releaser's,
//!   deletes it and **leaves the next token**: the counter is first raised to the carried token
//!   (set-if-greater, what the claim does, so that a holder that never claimed still aligns a
//!   master whose counter fell behind), then `X = fence + 1` becomes the fence and `next`, the
//!   token left for the next taker (`X = max(fence, token) + 1`);
//!   if the master's queue has a head (another client), the release also **grants** it the key,
//!   with the grant's attempt id ([`GRANT`], which no undo matches), for the claim window. The queue is not modelled: each
//!   master's release grants any other client or nobody (a head on some masters only, a stale
//!   entry, a free key), chosen as it runs; the grant names the head's current acquisition
//!   (a granted waiter keeps its entry until it releases; an entry of an earlier acquisition,
//!   released, would name an owner no request matches, a key that only lapses, as a grant to
//!   a client done with the lock does). A client whose last attempt failed withdraws with
//!   the same script, in the background on every master; a client that released with attempts
//!   left may acquire again. The message to the head is a hint:
//!   the model's clients may start an attempt at any time anyway.
//! - **Lease step**: a caller that takes a free key or its own grant while `next` is still the
//!   fence answers "handed X" (and the floor) and **takes** the token (`next` cleared), once;
//!   the key becomes an ordinary lease of the attempt. A fence store clears `next` too.
//! - **Decision**: once a majority granted, a majority of "handed" with the same `X`, within
//!   the validity (`now < t0 + ttl`), is held with token `X`, no fence store; otherwise round 2
//!   as above, the handed masters counting as grants with their floors.
//!
//! Assumed: a token is left, and a grant made, only where the release deleted the releaser's
//! own key (never over another's lease, never on a master that lost the releaser's key in a
//! restart, so never in a quiet period); a lease step on the caller's own grant makes it an
//! ordinary lease whether it answers "handed" or not; the mark of the token left is
//! overwritten by a store (a store of `X` by an attempt does not count as the token left).
//!
//! Checked ([`Redlock::handoff_checked`], [`Redlock::handoff_deep`]): every property holds with
//! partial grants, tokens left on free keys and taken by whoever comes first, withdrawals,
//! grants lapsing before their claim, a late fence store of a failed attempt (time-out bounds),
//! a restart. Switches:
//! - `head_trusts_message` gives two believers at once: the release grants one head on one
//!   master and another head on another, and both take their message as the lock.
//! - `release_sets_token` (the release *sets* the counter to the carried token + 1, not
//!   set-if-greater) gives a token that does not increase (15 steps from client 0's lease, a
//!   1-tick ttl, two attempts each, breadth-first in release): at tick 1 client 0's lease has
//!   lapsed but it has not released; client 1 takes a higher token on masters 0 and 1 and
//!   releases, granting both to client 0's acquisition (a granted waiter keeps its queue entry
//!   until it releases); client 0's release frees those grants, its own acquisition's, and sets
//!   both counters back to 2, which client 1's next acquisition takes ("handed"): below its
//!   previous token. With set-if-greater that release leaves a token above client 1's (none
//!   within 17 steps without the switch, 10.8 M states breadth-first, 52 s). (The
//!   14-step trace found while the owner was the client, a first release freeing the grant
//!   made to the same client's second acquisition, is gone with the owner per acquisition.)
//! - `left_token_taken_twice` (the lease step leaves the token there) gives a token that does
//!   not increase: the first client takes the lock, releases, takes the token its release left
//!   and lets that lease lapse; the second takes the same token from the free keys (15 steps,
//!   36 s breadth-first: a deep-only test; lock-redis's script tests check the taking on a
//!   real server).
//! - Also searched, without a counterexample, so not kept as switches: holding the largest of
//!   "handed" answers whose tokens differ, a release that does not raise the fence to the
//!   token it leaves, and a lease step that does not check the token left is still the fence
//!   (two clients to the end of every bound above; three clients, no time, two minutes each,
//!   unfinished). Why, in the model: an ordinary round's token is floored by the masters'
//!   clock, above every fence and `X` (the clock advances with every request), so only a later
//!   hand-off could take a token at or below a handed one, which needs more acquisitions than
//!   the bounds hold; without the fence raised, the `next == fence` check refuses every take;
//!   and a store between a release and the take comes from an attempt that cannot hold. The
//!   "one token" rule is checked on real servers by lock-redis's
//!   `a_hand_off_is_confirmed_by_a_majority_naming_one_token`, which fails when the largest is
//!   held.
//!
//! ## Blocking delivery (built: lock-redis `src/redlock/blocking.rs`; [`Redlock::arms`] > 0)
//! The fast path that takes the head's lease step off the hand-off, after the single
//! instance's ([`crate::handoff`]'s "Blocking delivery", lock-redis `blocking.rs`); its scripts
//! are lock-redis `src/scripts/redlock.rs`'s (`REDLOCK_ARM_SRC`, the release's push,
//! `REDLOCK_CLAIM_SRC`, `REDLOCK_ABANDON_SRC`):
//! - **Wait**: a waiting client sends, on a dedicated connection to each master, an **arm**
//!   (marks it armed there for [`BLOCK`] ticks) and a `BLPOP` of its own list, back to back, and
//!   remembers each arm's send instant `t_s`.
//! - **Release**: where it grants the key to a head armed there (for the claim window, as
//!   above), it **takes** the token it leaves on the head's behalf (not `next` any more: no lease
//!   step answers "handed" with it), marks the lease **pushed** (`p`, [`Key::pushed`]) and
//!   **pushes** the token to the head's list; the arm's mark goes.
//! - **Hold**: once pops from a **majority of masters name one token**, the head holds it,
//!   believed until the earliest of those masters' `t_s` plus the claim window, if that is still
//!   ahead, and closes its other connections. Its **claim** is then **due**, not sent: it goes
//!   out on every master at once at any moment of the belief ([`Action::SendClaim`]; lock-core
//!   defers it a third into the window), behind what is in flight there and ahead of a later
//!   release on the same connection; a release before it means it is never sent (lock-core's
//!   `end_claim`: a short hold never claims; the claim at once is the case sent right after
//!   the hold). The claim (the first renewal, `REDLOCK_CLAIM_SRC` as changed after masters'
//!   counters drifted apart by one under contention) extends **any** live key that is still its own, whatever its token and attempt
//!   id (a pushed lease, a grant made without a push, one its own lease step took or
//!   re-granted), to a whole ttl; it raises the master's counter to the claimed token if it is
//!   lower (set-if-greater, never lowers), writes that token as the lease's `t`, marks it taken
//!   (`claim:<token>` in fence-by: `next` cleared), sets the attempt id to `claim` ([`CLAIM`])
//!   and removes `g` and `p`. A key that is not its own (free, lapsed, another's) answers 0: it
//!   never grants. Answered 1 by a majority, the belief runs to the claim's send plus the ttl,
//!   else the lease is lost (its belief stays at the window's end).
//! - **Fallback**: anything less (a minority, differing tokens, a pop whose window passed) is a
//!   hint: the head takes its ordinary lease step ([`Action::Start`], open to it at any time).
//!   The step does **not end the wait**: if it holds, the wait closes (a `BLPOP` still
//!   outstanding is never read); if it fails (no majority: its undo goes out in the
//!   background), the wait **goes on** and may hold on pops that arrive later, including pops
//!   from masters where the failed step ran, also after the client's last attempt (it stays
//!   idle with none left until it holds or gives up, [`WaitAction::GiveUp`], and withdraws). A
//!   lease step of the owner on its pushed lease **re-grants** it to that attempt (its attempt
//!   id written, expiry a ttl from then, which is at least the window) and answers "granted",
//!   not "handed" (the token was taken); `t` and `p` stay, and a fence store of that attempt
//!   writes its own token to `t` (the claim extends the lease all the same, and the counter
//!   stays at that store's token, above the claimed one).
//! - **The `p` mark**: the undo of an attempt never frees a lease marked `p`, even one that
//!   attempt's step re-granted (`REDLOCK_ABANDON_SRC`'s `not l[3]`). The claim removes the mark
//!   and **writes the attempt id `claim`**, which no undo matches: a claim that kept the
//!   attempt id (lock-redis's before 2b38644) loses a claimed lease, as
//!   `blocking_claim_keeps_attempt` below shows.
//! - A `BLPOP` that ended (its timeout) may be re-armed: the new arm's instant goes with that
//!   arm's pops only.
//!
//! Why it holds: a push runs after the arm ran (the arm's drain empties the list, so nothing
//! pushed before the arm is popped), the arm after `t_s`, so each popped grant lives at least
//! until `t_s` plus the window: a re-grant by the owner's own failed step only extends it, and
//! no undo of that step frees it (the mark), nor, once claimed, any undo at all (the claim's
//! attempt id); a majority of them is the lock as a majority of
//! leases is; the token named by a majority is above every earlier taker's for the reason a
//! handed one is (above), and taken by the release it is handed once. The claim only extends
//! what is already the claimant's, so a claim that runs late (after the belief ended, another
//! client's round, or a grant to the same client made since) takes nothing from anyone; and it
//! only raises counters, so every master it reached leaves the next taker a token above the
//! claimed one.
//!
//! Modelled as: the arm runs as it is sent (a push between send and run would go to the list
//! and be drained, a hint; counting from the send only shortens the belief), so no arm runs
//! during a lease step (an ended `BLPOP` may be re-armed then); a pop that arrives during the
//! wait's own lease step is read once the step failed (the code reads its pushed grants
//! between attempts), and a hold after a failed last attempt needs no attempt left; the lists
//! are not modelled (what reaches one is drained as a hint: its grant lapses or becomes the
//! head's ordinary lease, its token, taken, is nobody's); a `BLPOP` may end only where an arm
//! is left to follow it (one that stays blocked unread does all an ended one does); a restart
//! drops the marks and keeps the `BLPOP`s blocked, as after `FLUSHALL`; a client waits while it
//! is idle with an attempt left, or after its last one failed with its wait open, any other
//! client being its possible releaser; a key's `t` is kept in these bounds only and read by no
//! step (the release's next token is `max(fence, carried token) + 1` as above, as lock-redis's
//! `max(counter, t, token) + 1` is: the counter is at least `t`, which every writer of `t`, the
//! claim included, makes so); a claim is sent only while its holder believes the lease (lock-core
//! sends it a third into the window); a claim answered after its client's belief ended is ignored. The
//! property added: `a believed lease is kept by a majority` (while a client believes a lease,
//! a majority of masters keep its key live, until a restart: the lost signal is honest). With time
//! passing, the bounds start from a lease client 0 holds on every master ([`Redlock::held`]);
//! the races of a first acquisition are the bounds without time's. These bounds also rename
//! the masters in the symmetry reduction.
//!
//! Checked, with the claim as changed, deferred, and the release carrying the token: every
//! property holds in [`Redlock::blocking_checked`] (448,740 states, 98,097 unique, without
//! time; 252,794 and 62,144 from a held lease over a tick; were 441,971/96,419 and
//! 246,537/60,514 with the claim at once; about 5 s in release) and [`Redlock::blocking_deep`]
//! (1.8 M, 1.2 M, 1.8 M, 3.5 M and 3.8 M states; 398 k, 237 k, 447 k, 691 k and 788
//! k unique, were 385 k, 231 k, 445 k, 688 k and 780 k; with [`Redlock::handoff_deep`], 6.68 M
//! and 3.16 M unique, 67 s in release at load average about 2). So the claim is not needed for safety: the paths where the holder releases or
//! lapses without sending it are explored, and its belief, the claim window from its arms'
//! send, is outlasted by each pushed grant (pushed after its arm ran, live for the window).
//! Nor is it for the tokens left: the release carrying the token raises a master that fell
//! behind as the claim would have. Switches, each with a counterexample:
//! - `blocking_holds_on_one_push` (hold on one master's pop) gives two believers (three
//!   clients, no time): the release pushes to one waiter on one master and to the other waiter
//!   on another, and each holds on its one pop.
//! - `blocking_counts_from_pop` (the belief counted from the pop's arrival) outlasts its grants
//!   (`a believed lease is kept by a majority`): pushed at tick 0, popped at tick 1. With a
//!   third client it gives two believers (deep only, 12 steps, 81 to 96 s breadth-first): that
//!   client takes the lapsed grants in an ordinary round before the head's second pop arrives.
//! - `blocking_stale_arm` (a `BLPOP` given up by the client's own timer and re-armed on the
//!   same connection: the earlier `BLPOP`'s pop read as the new arm's) outlasts its grants too.
//! - `blocking_release_does_not_take` (the release pushes the token and leaves it marked
//!   `next`) hands one token twice (`tokens increase`): the head holds it on two pushes, its
//!   grants lapse, and the former holder, acquiring again, is handed it by the free keys.
//! - `blocking_undo_frees_pushed` (the undo frees a pushed lease its owner's failed step
//!   re-granted, as it would without the mark) outlasts its grants (`a believed lease is kept
//!   by a majority`, 13 steps from client 0's lease, [`Redlock::blocking_held`]): at tick 1
//!   client 0 releases on master 0, pushing to client 1, which pops it; client 1's fallback
//!   re-grants master 0 and is refused by masters 1 and 2 (still client 0's); client 0's
//!   release on master 2 pushes there; the undo frees master 0; client 1 pops master 2 and
//!   holds until tick 2 on masters 0 and 2 while only master 2 keeps its key.
//! - `blocking_claim_keeps_attempt` (lock-redis's claim before 2b38644, found by the model:
//!   the claim extends the lease and removes `p`, but the lease keeps the attempt id `a` of the
//!   owner's failed step that re-granted it) loses a claimed lease (`a believed lease is kept
//!   by a majority`, 15 steps from client 0's lease): as above up to client 0's release on master 2
//!   pushing there; client 1 holds on both pops (until tick 2) and sends its claim; the claim reaches
//!   master 0 first and removes the mark, then the failed attempt's undo, sent late (a
//!   background task), frees master 0. Keeping the mark in the claim instead is not enough
//!   (searched with the attempt id kept, 16 steps): the failed step took the token a release
//!   left on a free master 0 ("handed", `t` written, no mark), the pushes of masters 1 and 2
//!   are held, the claim is answered by masters 0 and 2 (belief to tick 2), master 1's pushed
//!   grant lapses at tick 1 and the late undo frees master 0. The fix: the claim writes an
//!   attempt id no undo matches (lock-redis: `a = 'claim'`, [`CLAIM`]).
//! - `blocking_claim_grants` (the claim extends or creates the key where it is not the
//!   claimant's, as the owner check stops) takes a believed lease (`a believed lease is kept by
//!   a majority`, 13 steps from client 0's lease, two attempts each, a 1-tick ttl; deep only,
//!   46 s breadth-first in release): client 0 releases on masters 1 and 2, pushing to
//!   client 1, which holds on both pops until tick 1 and claims; its claims wait; at tick 1 the
//!   pushed grants lapse, client 0 acquires again and is granted master 2; client 1's claim
//!   runs there and takes the key; master 1 grants client 0 too, both store its token (a store
//!   does not check the key) and it holds, to tick 2, with its key on master 1 alone. With the
//!   2-tick ttl a trace of the same kind gives two believers (14 steps, 93 s): two late claims
//!   make a majority, extending client 1's belief to tick 2 beside client 0's new lease.
//!   With the claim deferred the trace takes 14 steps (about two minutes). While the owner was
//!   the client, breadth-first first found a 14-step trace without the switch (client 0's late
//!   release freeing the grant pushed to its next acquisition); with the owner per acquisition
//!   the bound without the switch has no counterexample within 16 steps (25.9 M states
//!   breadth-first, 151 s, not to the end: two attempts each stay outside the checked bounds).
//!
//! Not checked: three clients (no time passing, from a held lease or not: unfinished after
//! 150 s before the continued wait, no property violated in the 1.1 to 1.3 M unique states
//! seen), two attempts each for the design itself (a wait going on across a second lease step:
//! from a held lease over a tick, unfinished after 200 s in release; only
//! `blocking_release_does_not_take`'s search has them), renewals after the claim, and the
//! cost (a connection per waiting head and master; a pushed lease that a failed step re-granted
//! is never undone, it lapses after its ttl); whether `blocking_stale_arm` also gives two
//! believers (three clients over a tick, three arms each: none found breadth-first in 160 s,
//! 20.9 M unique states); lock-redis's `GRACE` (pops that do not make a majority within it wake
//! the wait: a hint, which the model's fallback at any time covers). Not kept as switches:
//! holding the largest of differing tokens, searched without a counterexample in
//! [`Redlock::blocking`] with a time-out, with a restart and over a tick (before the continued
//! wait; without time and over a tick its state counts were the design's: with two clients of
//! one attempt there is one release, run after the holder's stores on each connection, so
//! every pop names the same token; differing ones need a third client or a second attempt, not
//! searched); a pop read after its wait ended (the model closes a wait's connections when it
//! holds or gives up; a second wait of the same client, which could read one, needs two
//! attempts each with time passing); a claim that **lowers** a higher counter to the claimed
//! token (not set-if-greater): with it, [`Redlock::blocking_checked`] and
//! [`Redlock::blocking_deep`] hold with the same state counts, and a search for `tokens
//! increase` from a held lease with two attempts each and a 1-tick ttl over a tick found
//! none (unfinished after 150 s breadth-first and 150 s depth-first, in release). Why, in the
//! model: an ordinary round's token is floored by the masters' clock, so only a release's
//! token can go back; the claim's owner check means it lowers only a key that is still the
//! claimant's, whose counter above the claimed token can only hold a token stored by an
//! attempt that never held (the claimant's own failed fallback), until a
//! claim that runs late, after the claimant's belief ended and another client took a higher
//! token, finds a grant made to the claimant since; lowering that master and one more, then a
//! release there by the claimant and a hand-off to a majority naming the lowered token, is
//! beyond the bounds. lock-redis's set-if-greater is kept on that reasoning, unchecked by a
//! counterexample. Nor does the model check what the change was for (pushes naming one token
//! under contention: liveness), only that the claim as changed keeps every property.
//!
//! ## Faults in the model
//! A client may stop waiting for any master (a time-out) while its request stays in flight and
//! runs later or never; the answers of a finished round are ignored. Requests on one connection
//! run in the order they were sent; a background undo is sent whenever its task gets to run,
//! possibly after the same client's next attempt. A master may restart with its data lost.
//! The waiter queue ordered by tickets decides only *who* is granted next (it refuses, never
//! grants more), so it is left out: exclusion rests on the majority alone.
//!
//! ## Properties
//! - `no two believers`: never two clients that each hold a lease they believe valid by their
//!   own clock.
//! - `tokens increase`: each client that takes the lock has a token above every earlier taker's.
//!
//! Clocks run at the same rate (the code's `drift` margin covers a bounded difference), and the
//! masters' clocks, which floor the tokens, agree and advance between any two requests: with
//! a coarser clock (every request of a tick at the same instant, as masters whose clocks
//! disagree by that much) the checker finds tokens that do not increase: a grant's floor read
//! on a master before an earlier holder's token was stored there, and that master restarted
//! (its counter lost) before the later grant's store reached it. Renewals are not modelled.

mod blocking;
mod handoff;
mod model;
mod state;
mod symmetry;
mod values;

pub use blocking::BLOCK;
pub use model::{Action, Bugs, Redlock, WaitAction, MASTERS, QUORUM};
pub use state::{Block, Claim, Client, Handed, Key, Master, Op, State, CLAIM, GRANT};
