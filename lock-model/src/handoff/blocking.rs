//! Blocking delivery, the client's side: a waiter's dedicated connection (arm and `BLPOP`), the
//! popped grant taken at once, its claim in the background, sent at any moment or never (the
//! holder may release first), and a claim that runs after the release ("Blocking delivery" in
//! the module docs of [`crate::handoff`]; the server's side is the arm, the release's push and
//! the claim in `server.rs`).

use lock_core::decisions::valid_until;

use super::state::{Block, Claim, Client, Grant, State};
use super::{Handoff, CLAIM, TTL};
use crate::shared::belief_end;

/// A step of a client's dedicated connection or of its claim of a popped grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockAction {
    /// A waiter sends its arm and `BLPOP`.
    Arm(u8),
    /// The server runs the arm and the `BLPOP` after it.
    Run(u8),
    /// The `BLPOP` ends without a grant (its timeout, or the connection closed); the client may
    /// arm again.
    End(u8),
    /// The `BLPOP`'s popped grant reaches the client.
    Answer(u8),
    /// The connection drops with the popped grant's reply: the grant is lost to the client.
    Drop(u8),
    /// The holder of a popped grant sends its claim (lock-core defers it into the window).
    SendClaim(u8),
    /// The server runs the claim of a popped grant and its reply arrives.
    Claim(u8),
    /// The server runs the claim, its reply is lost: the client sends it again.
    ClaimReplyLost(u8),
    /// The server runs a claim the client sent before its release.
    LateClaim(u8),
}

impl Handoff {
    /// What client `c`'s connection and claim can do next.
    pub(super) fn block_actions(s: &State, c: u8, mut push: impl FnMut(BlockAction)) {
        let i = c as usize;
        match s.blocks[i] {
            // A waiter arms whether or not it is the head: the model lets any waiter try.
            Block::Idle if s.arms[i] > 0 && matches!(s.clients[i], Client::Waiting { .. }) => push(BlockAction::Arm(c)),
            Block::Idle => {}
            Block::Sent { .. } => push(BlockAction::Run(c)),
            Block::Blocked { .. } => push(BlockAction::End(c)),
            Block::Popped { .. } => {
                push(BlockAction::Answer(c));
                if s.net.lose > 0 {
                    push(BlockAction::Drop(c));
                }
            }
        }
        match s.clients[i] {
            Client::Holding { claim: Some(Claim::Due), .. } => push(BlockAction::SendClaim(c)),
            Client::Holding { claim: Some(Claim::Sent(_)), .. } => {
                push(BlockAction::Claim(c));
                if s.net.lose > 0 {
                    push(BlockAction::ClaimReplyLost(c));
                }
            }
            _ => {}
        }
        if s.late[i].is_some() {
            push(BlockAction::LateClaim(c));
        }
    }

    pub(super) fn block_step(&self, s: &mut State, action: BlockAction) {
        match action {
            BlockAction::Arm(c) => {
                s.arms[c as usize] -= 1;
                s.blocks[c as usize] = Block::Sent { t_s: s.now };
            }
            // The arm's reply is a hint that wakes a waiter, here as the arm runs. The grant it
            // drained also had the release's message, with every fault of the hints: another
            // copy of it in the network would add only states.
            BlockAction::Run(c) => {
                if self.arm(s, c) {
                    if let Client::Waiting { .. } = s.clients[c as usize] {
                        s.clients[c as usize] = Client::Attempting { t0: s.now, leaving: false };
                    }
                }
            }
            BlockAction::End(c) => s.blocks[c as usize] = Block::Idle,
            BlockAction::Answer(c) => self.answer(s, c),
            BlockAction::Drop(c) => {
                s.net.lose -= 1;
                s.blocks[c as usize] = Block::Idle;
            }
            BlockAction::SendClaim(c) => {
                if let Client::Holding { claim, .. } = &mut s.clients[c as usize] {
                    *claim = Some(Claim::Sent(s.now));
                }
            }
            BlockAction::Claim(c) => self.claim(s, c),
            BlockAction::ClaimReplyLost(c) => {
                s.net.lose -= 1;
                if let Client::Holding { token, claim, .. } = &mut s.clients[c as usize] {
                    let token = *token;
                    *claim = Some(Claim::Sent(s.now));
                    self.claim_pushed(s, c, token);
                }
            }
            BlockAction::LateClaim(c) => self.late_claim(s, c),
        }
    }

    /// Whether the claim of `c`, where it stands, goes on after a release: one in flight does
    /// (the request is out); one not sent yet never is sent (lock-core's `end_claim`), unless
    /// the bug forgets that.
    fn outlives_release(&self, claim: Option<Claim>) -> bool {
        match claim {
            Some(Claim::Sent(_)) => true,
            Some(Claim::Due) => self.bugs.claim_after_release,
            None => false,
        }
    }

    /// `c` may release: at once, whatever its claim, unless the release would leave a claim in
    /// flight while an earlier one is still to run (one per client in the state: both went on
    /// its command connection, where the earlier claim runs before this release).
    pub(super) fn may_release(&self, s: &State, c: u8) -> bool {
        let Client::Holding { claim, .. } = s.clients[c as usize] else { return false };
        !(self.outlives_release(claim) && s.late[c as usize].is_some())
    }

    /// Before `c`'s release: its claim, if it goes on, is left to run after the release.
    pub(super) fn end_claim(&self, s: &mut State, c: u8) {
        if let Client::Holding { token, claim, .. } = s.clients[c as usize] {
            if self.outlives_release(claim) {
                s.late[c as usize] = Some(token);
            }
        }
    }

    /// A claim sent before `c`'s release runs, after it: the claim script (`claim_pushed`),
    /// checked against owner and token, finds the grant released (or lapsed) and changes
    /// nothing; its answer goes to a lease that is over. With the bug, a naive claim that
    /// re-creates the pushed lease on a free key (a `SET NX` of owner and token) gives it back
    /// to `c`, which no longer holds it: the re-acquire of `c` later takes that token again.
    fn late_claim(&self, s: &mut State, c: u8) {
        let Some(token) = s.late[c as usize].take() else { return };
        let before = s.owner;
        if self.bugs.claim_after_release && s.grant_live().is_none() {
            s.owner = Some(Grant { client: c, token, expires: s.now + TTL, handoff: false });
        } else {
            self.claim_pushed(s, c, token);
        }
        s.late_claim_changed |= s.owner != before;
    }

    /// The popped grant reaches `c`. A waiter holds at once, from its arm's send instant for the
    /// claim window: the push ran after the arm (which drained what came before), the arm after
    /// that instant, so the server's provisional grant ends no sooner. Its claim is then due, sent
    /// when lock-core chooses or never (a release first); an acquire already in flight is that
    /// claim, already sent. A grant whose window has passed by then is only a hint: a later taker
    /// may hold a newer token already. A client that no longer waits drops the grant: its
    /// abandon, or the window's end, gives it up.
    fn answer(&self, s: &mut State, c: u8) {
        let i = c as usize;
        let Block::Popped { t_s, token } = s.blocks[i] else { return };
        s.blocks[i] = Block::Idle;
        let claim = match s.clients[i] {
            Client::Waiting { .. } => Claim::Due,
            Client::Attempting { t0, leaving: false } => Claim::Sent(t0),
            _ => return,
        };
        let from = if self.bugs.pop_counts_from_reply { s.now } else { t_s };
        let until = belief_end(valid_until, from, CLAIM);
        if until <= s.now && !self.bugs.take_lapsed_pop {
            let t0 = if let Claim::Sent(t0) = claim { t0 } else { s.now };
            s.clients[i] = Client::Attempting { t0, leaving: false };
            return;
        }
        s.take(c, token, until);
        s.clients[i] = Client::Holding { token, valid_until: until, claim: Some(claim) };
    }

    /// The claim of a popped grant runs (lock-redis `ClaimPushed`: the renew script checked
    /// against owner and token, which never grants): a grant it extended extends the belief to
    /// a full ttl from the claim's send instant; otherwise (the window ended first) the belief
    /// stays at the window's end.
    fn claim(&self, s: &mut State, c: u8) {
        let Client::Holding { token, valid_until: until, claim: Some(Claim::Sent(sent)) } = s.clients[c as usize]
        else {
            return;
        };
        let until = if self.claim_pushed(s, c, token) { until.max(belief_end(valid_until, sent, TTL)) } else { until };
        s.clients[c as usize] = Client::Holding { token, valid_until: until, claim: None };
    }

    /// A wait of `c` ended by its own acquire: it closes its connection, so that no later wait
    /// of its takes that `BLPOP`'s reply (a grant of this wait's, maybe held and released since).
    /// An arm not run yet is dropped with it: run, its mark and drain would only move a later
    /// grant's token into a list the next arm drains.
    pub(super) fn close_block(&self, s: &mut State, c: u8) {
        if !self.bugs.pop_after_wait_ends {
            s.blocks[c as usize] = Block::Idle;
        }
    }

    /// Forgets, under blocking delivery, what no longer changes the outcome, so that equal
    /// futures are one state: the connection of a client that is gone (closed with its process
    /// or its wait); the marker and list of a client that will never arm again with no `BLPOP`
    /// outstanding (a push there moves only a token no one pops); a marker past its end; an
    /// arm's send instant whose window has passed (a pop then is a hint, whatever the instant);
    /// the end of a belief that has passed (it only ends sooner than a claim's, which replaces
    /// it).
    pub(super) fn forget_blocks(&self, s: &mut State) {
        for i in 0..s.clients.len() {
            if s.clients[i].gone() {
                s.blocks[i] = Block::Idle;
                s.arms[i] = 0;
            }
            let never_pops = s.arms[i] == 0 && s.blocks[i] == Block::Idle;
            if s.armed[i] <= s.now || never_pops {
                s.armed[i] = 0;
            }
            if never_pops {
                s.lists[i].clear();
            }
            let lapsed = |t_s: u8| if belief_end(valid_until, t_s, CLAIM) <= s.now { 0 } else { t_s };
            s.blocks[i] = match s.blocks[i] {
                Block::Sent { t_s } => Block::Sent { t_s: lapsed(t_s) },
                Block::Blocked { t_s } => Block::Blocked { t_s: lapsed(t_s) },
                Block::Popped { t_s, token } if !self.bugs.pop_counts_from_reply => {
                    Block::Popped { t_s: lapsed(t_s), token }
                }
                other => other,
            };
            if let Client::Holding { valid_until: until, .. } = &mut s.clients[i] {
                if *until <= s.now {
                    *until = 0;
                }
            }
        }
    }
}
