//! The Redis single-instance model's clients, faults and properties (see the module docs of
//! [`crate::handoff`]).

use lock_core::decisions::valid_until;
use stateright::{Model, Property};

use crate::explore::Explore;
use crate::properties::{of_issued_leases, Leases};

use super::blocking::BlockAction;
use super::server::WAKE;
use super::state::{Block, Claim, Client, State};
use super::{Delivery, Handoff, CLAIM, TTL};
use crate::shared::{belief_end, dequeue, forget_settled_clients, Hints, QueueAction, Taken, FORGED};

/// One step of the exploration.
pub type Action = QueueAction<OwnAction>;

/// The steps only this model has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnAction {
    /// The server restarts without its data.
    Restart,
    /// Blocking delivery: a step of a head's dedicated connection or of its claim.
    Block(BlockAction),
}

impl Handoff {
    /// A message reaches `to`: a hint that wakes a waiter (or, with the bug, a grant naming a
    /// token is taken as the lease).
    fn on_message(&self, s: &mut State, to: u8, token: u8) {
        let Client::Waiting { t0 } = s.clients[to as usize] else { return };
        if self.bugs.trust_message && token != WAKE {
            s.take(to, token, belief_end(valid_until, t0, TTL));
            self.close_block(s, to);
            s.handed_over |= token != FORGED;
        } else {
            s.clients[to as usize] = Client::Attempting { t0: s.now, leaving: false };
        }
    }

    fn apply(&self, s: &mut State, c: u8) {
        let Client::Attempting { t0, leaving } = s.clients[c as usize] else { return };
        let was_handoff = s.grant_live().is_some_and(|g| g.client == c && g.handoff);
        let reply = self.acquire(s, c);
        if leaving {
            self.abandon(s, c);
            s.clients[c as usize] = Client::Left;
            return;
        }
        match reply {
            Some(token) => {
                s.handed_over |= was_handoff;
                s.take(c, token, belief_end(valid_until, t0, TTL));
                self.close_block(s, c);
            }
            None => s.clients[c as usize] = Client::Waiting { t0 },
        }
    }

    fn leave(&self, s: &mut State, c: u8) {
        s.leave -= 1;
        // Its wait is over: it closes its connection (a grant popped there is its abandon's).
        s.blocks[c as usize] = Block::Idle;
        let in_flight = matches!(s.clients[c as usize], Client::Attempting { .. });
        s.clients[c as usize] = if in_flight && !self.bugs.abandon_overtakes_attempt {
            Client::Attempting { t0: s.now, leaving: true }
        } else {
            s.strays[c as usize] |= in_flight;
            Client::Leaving { release_only: false }
        };
    }
}

impl Explore for Handoff {
    const TICK: Action = Action::Tick;

    fn client_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        let i = c as usize;
        match s.clients[i] {
            Client::Idle => actions.push(Action::Send(c)),
            Client::Attempting { leaving, .. } => Action::of_attempt(c, leaving, s.leave, &s.net, actions),
            Client::Waiting { .. } => Action::of_waiter(c, s.polls[i], s.leave, &s.net, actions),
            Client::Holding { .. } if self.may_release(s, c) => actions.push(Action::Release(c)),
            Client::Holding { .. } => {}
            Client::Leaving { release_only } => {
                actions.push(Action::Abandon(c));
                if release_only {
                    actions.push(Action::Cut(c));
                }
            }
            Client::Left | Client::Done | Client::Dead { .. } => {}
        }
        if s.crash > 0 && !s.clients[i].gone() {
            actions.push(Action::Crash(c));
        }
        if s.strays[i] {
            actions.push(Action::Stray(c));
        }
        if self.blocks() {
            Self::block_actions(s, c, |a| actions.push(Action::Own(OwnAction::Block(a))));
        }
    }

    fn step(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => s.now += 1,
            Action::Send(c) => s.clients[c as usize] = Client::Attempting { t0: s.now, leaving: false },
            Action::Poll(c) => {
                s.polls[c as usize] -= 1;
                s.clients[c as usize] = Client::Attempting { t0: s.now, leaving: false };
            }
            Action::Apply(c) => self.apply(s, c),
            Action::ApplyReplyLost(c) => {
                s.net.lose -= 1;
                self.acquire(s, c);
                s.clients[c as usize] = Client::Attempting { t0: s.now, leaving: false };
            }
            Action::Leave(c) => self.leave(s, c),
            Action::Abandon(c) => {
                let Client::Leaving { release_only } = s.clients[c as usize] else { return };
                if self.bugs.abandon_forgets_place_first && !release_only {
                    dequeue(&mut s.queue, c);
                    s.clients[c as usize] = Client::Leaving { release_only: true };
                } else {
                    self.abandon(s, c);
                    s.clients[c as usize] = Client::Left;
                }
            }
            Action::Cut(c) => s.clients[c as usize] = Client::Left,
            Action::Stray(c) => {
                s.strays[c as usize] = false;
                self.acquire(s, c);
            }
            Action::Release(c) => {
                self.end_claim(s, c);
                self.release(s, c);
                let i = c as usize;
                s.clients[i] = if s.rounds[i] > 0 { Client::Idle } else { Client::Done };
                s.rounds[i] = s.rounds[i].saturating_sub(1);
            }
            Action::Crash(c) => {
                s.crash -= 1;
                let held = matches!(s.clients[c as usize], Client::Holding { .. });
                s.strays[c as usize] |= matches!(
                    s.clients[c as usize],
                    Client::Attempting { .. } | Client::Holding { claim: Some(Claim::Sent(_)), .. }
                );
                s.clients[c as usize] = Client::Dead { held };
            }
            Action::Own(OwnAction::Restart) => {
                s.restart -= 1;
                Self::restart(s);
            }
            Action::Own(OwnAction::Block(a)) => self.block_step(s, a),
            Action::Net(a) => {
                if let Some((to, token)) = s.net.step(a) {
                    self.on_message(s, to, token);
                }
            }
        }
    }

    /// Forgets what can no longer change the outcome, so equal futures are one state: the send
    /// instant of a queued attempt (only a waiter that trusts messages reads it), messages to and
    /// budgets of clients that are gone or done.
    fn normalize(&self, s: &mut State) {
        forget_settled_clients!(&mut *s, self.bugs.trust_message);
        if self.blocks() {
            self.forget_blocks(s);
        }
    }
}

impl Model for Handoff {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.clients as usize;
        let arms = match self.delivery {
            Delivery::Hint => 0,
            Delivery::Blocking { arms } => arms,
        };
        vec![State {
            now: 0,
            owner: None,
            fence: 0,
            queue: Vec::new(),
            marker: Some(0),
            clients: vec![Client::Idle; n],
            polls: vec![self.polls; n],
            rounds: vec![self.rounds.saturating_sub(1); n],
            strays: vec![false; n],
            net: Hints::new(self.forge, self.dup, self.lose),
            crash: self.crash,
            leave: self.leave,
            restart: self.restart,
            taken: Taken::default(),
            handed_over: false,
            blocks: vec![Block::Idle; n],
            arms: vec![arms; n],
            armed: vec![0; n],
            lists: vec![Vec::new(); n],
            late: vec![None; n],
            late_claim_changed: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.time_and_clients(s, s.now < self.max_tick, actions);
        if s.restart > 0 {
            actions.push(Action::Own(OwnAction::Restart));
        }
        s.net.actions(|a| actions.push(Action::Net(a)));
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.successor(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut blocking: Vec<Property<Self>> = Vec::new();
        if self.blocks() {
            // Only a popped grant leaves its holder with a claim in flight.
            blocking.push(Property::sometimes("a blocked head is handed the lock", |_, s: &State| {
                s.clients.iter().any(|c| matches!(c, Client::Holding { claim: Some(_), .. }))
            }));
            blocking.push(Property::always(
                "a believed lease is the server's until a restart",
                |m: &Handoff, s: &State| {
                    s.restart < m.restart || (0..s.clients.len()).all(|c| !s.believes(c) || s.kept(c))
                },
            ));
            // The claim script is checked against owner and token and never grants: after the
            // release, the grant it was for is gone for good.
            blocking.push(Property::always("a claim after its release changes nothing", |_, s: &State| {
                !s.late_claim_changed
            }));
            blocking.push(Property::sometimes("a claim is out after its release", |_, s: &State| {
                s.late.iter().any(Option::is_some)
            }));
        }
        of_issued_leases(
            [
                Property::always("an untaken grant lapses", |_, s: &State| {
                    let Some(g) = s.grant_live() else { return true };
                    match s.clients[g.client as usize] {
                        Client::Left => false,
                        Client::Dead { held: false } | Client::Leaving { .. } if g.handoff => {
                            g.expires <= s.now + CLAIM
                        }
                        _ => true,
                    }
                }),
                Property::sometimes("a queued waiter is handed the lock", |_, s: &State| s.handed_over),
            ]
            .into_iter()
            .chain(blocking),
        )
    }
}
