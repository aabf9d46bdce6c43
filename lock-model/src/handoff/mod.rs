//! The exclusive lock's waiter queue with the grant in the release.
//!
//! ## The protocol (Redis scripts and PostgreSQL statements alike)
//! - **Acquire** (one server step): a lease past its expiry is gone; a lease that is the
//!   caller's own is re-granted for a full ttl, same token (contract §3: this is also how a head
//!   *claims* a grant); a free lock goes to the caller when nobody live is queued ahead of it,
//!   with the next fencing token; a free lock owed to a live queue head is handed to that head and
//!   the caller is queued; a held lock queues the caller (or refreshes its entry).
//! - **Release** (one server step, owner-checked) hands the lock to the first live queue entry:
//!   a *provisional* grant of [`CLAIM`] ticks with the next token, and a message to that head.
//! - **The message is a hint.** A waiter that hears it runs its acquire again, which claims the
//!   grant (re-grant to the same owner) and answers the server's token; the waiter's validity
//!   counts from that attempt's send instant.
//! - **Leaving** (a wait that timed out, a dropped future, in a live process) runs one abandon
//!   step after any attempt of its own still in flight (same connection, or awaited): its entry
//!   goes and a grant it holds is released and handed on, together.
//! - Queue entries stay live for [`ENTRY_LIFE`] ticks after their waiter's latest attempt; a
//!   waiter re-tries on a fallback timer, so a lost message costs latency, never the lock.
//!
//! ## Faults in the model
//! Grant messages are lost, duplicated, delivered late and in any order, and forged (a message to
//! any waiter with a token no server issued: anyone who can read the queue and publish). An
//! attempt's reply is lost after the server ran it (the client re-sends). Clients leave while
//! waiting or with an attempt in flight, and die at any point (a request already sent still runs).
//!
//! ## Properties
//! - `no two believers`: never two clients that each hold a lease they believe valid by their own
//!   clock (`now < valid_until`, with `valid_until = t0 + ttl` and `t0` the send instant of the
//!   attempt that answered the grant).
//! - `tokens come from the server`: no client holds a token the server did not issue.
//! - `tokens increase`: each client that takes a lease has a token above every earlier taker's.
//! - `an untaken grant lapses`: a hand-off grant whose waiter died or left is live at most
//!   [`CLAIM`] ticks more; a waiter that finished leaving holds no grant at all.
//!
//! Time is abstract: a tick is the unit of ttl; server and clients share the clock's rate (the
//! code's `drift` margin is what covers a bounded rate difference).

use stateright::{Model, Property};

mod symmetry;

/// Ticks a lease lasts from its grant or claim.
pub const TTL: u8 = 4;
/// Ticks a provisional hand-off grant lasts unless its head claims it.
pub const CLAIM: u8 = 1;
/// Ticks a queue entry stays live after its waiter's latest attempt.
pub const ENTRY_LIFE: u8 = 2;
/// The token a forged message names: above anything the server issues within the bounds.
pub const FORGED: u8 = 200;

/// Design errors found before, each put back by its switch; every one must give a counterexample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// A waiter takes a grant message as the grant: the message's token, validity from its latest
    /// queued attempt, no server step (the shortcut that trusted `!owner:token:n` and
    /// `dlock-grant:owner:fence`).
    pub trust_message: bool,
    /// The release grants the head its whole ttl at once instead of a provisional claim window.
    pub full_ttl_grant: bool,
    /// Abandon gives up the waiter's queue entry first and releases a grant it received in a
    /// second step that can be cut (the background retry then finds nothing to do).
    pub abandon_forgets_place_first: bool,
    /// Abandon can run before the waiter's own attempt still in flight on another connection:
    /// that late attempt then queues, or is granted to, a waiter that is gone.
    pub abandon_overtakes_attempt: bool,
}

/// One model: the clients, the bounds of the exploration and the bug switches.
#[derive(Clone, Debug)]
pub struct Handoff {
    /// Clients contending for the one lock name.
    pub clients: u8,
    /// The last tick explored.
    pub max_tick: u8,
    /// Forged messages an attacker may send in one run.
    pub forge: u8,
    /// Messages the network may duplicate in one run.
    pub dup: u8,
    /// Messages or replies the network may lose in one run.
    pub lose: u8,
    /// Fallback re-tries each waiter may make without a message.
    pub polls: u8,
    /// Acquisitions each client makes (one after another).
    pub rounds: u8,
    /// Processes that may die in one run.
    pub crash: u8,
    /// Waits that may end early (time-out, dropped future) in one run.
    pub leave: u8,
    /// Which known errors to put back.
    pub bugs: Bugs,
}

impl Handoff {
    /// The network's faults, as the tests check them: two clients of two acquisitions each over
    /// five ticks, with one forged, one duplicated and one lost message or reply. No fallback
    /// re-tries: a message (forged ones too) already makes a waiter try again at any moment, and
    /// each re-try multiplies the states by four here.
    pub fn network(bugs: Bugs) -> Handoff {
        Handoff { clients: 2, rounds: 2, max_tick: 5, forge: 1, dup: 1, lose: 1, polls: 0, crash: 0, leave: 0, bugs }
    }

    /// The processes' faults, as the tests check them: two clients of two acquisitions each over
    /// six ticks, with one crash and one early leave (time-out or dropped future).
    pub fn processes(bugs: Bugs) -> Handoff {
        Handoff { clients: 2, rounds: 2, max_tick: 6, forge: 0, dup: 0, lose: 0, polls: 1, crash: 1, leave: 1, bugs }
    }

    /// The longer exploration (`DLOCK_MODEL_DEEP=1`): every fault together, and three clients so
    /// that a grant passes a dead or departed head on to a third.
    pub fn deep(bugs: Bugs) -> [Handoff; 2] {
        let all = Handoff {
            clients: 2,
            rounds: 2,
            max_tick: 6,
            forge: 1,
            dup: 1,
            lose: 1,
            polls: 1,
            crash: 1,
            leave: 1,
            bugs,
        };
        [all.clone(), Handoff { clients: 3, rounds: 1, max_tick: 4, ..all }]
    }
}

/// What one client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Has not asked for the lock yet.
    Idle,
    /// An acquire sent at `t0` awaits the server; `leaving`: its wait ended meanwhile.
    Attempting {
        /// Send instant.
        t0: u8,
        /// The wait ended while the attempt was in flight.
        leaving: bool,
    },
    /// Its latest attempt, sent at `t0`, answered "queued".
    Waiting {
        /// Send instant of that attempt.
        t0: u8,
    },
    /// Holds a lease with `token`, believed valid while `now < valid_until`.
    Holding {
        /// The fencing token it acts with.
        token: u8,
        /// By its own clock.
        valid_until: u8,
    },
    /// Its wait ended in a live process; the abandon step still has to run (`release_only`: with
    /// the bug, only its second step is left).
    Leaving {
        /// The entry is already gone, the release of a grant is still to run.
        release_only: bool,
    },
    /// Finished leaving.
    Left,
    /// Released its lease.
    Done,
    /// Its process died; `held`: while holding a lease it had taken.
    Dead {
        /// It held a lease.
        held: bool,
    },
}

/// The server's lease record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grant {
    /// Whose it is.
    pub client: u8,
    /// Its fencing token.
    pub token: u8,
    /// The tick from which it is gone.
    pub expires: u8,
    /// Granted by a release to a queue head that has not claimed it yet.
    pub handoff: bool,
}

/// Server, clients and network.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The server's clock (the clients' run at the same rate).
    pub now: u8,
    /// The lease, if one was granted (it may be past `expires`).
    pub owner: Option<Grant>,
    /// The last token issued.
    pub fence: u8,
    /// Queue entries in order: client and the tick its entry stops being live.
    pub queue: Vec<(u8, u8)>,
    /// Each client's state.
    pub clients: Vec<Client>,
    /// Fallback re-tries left per client.
    pub polls: Vec<u8>,
    /// Acquisitions left per client after its current one.
    pub rounds: Vec<u8>,
    /// A request of a client that is gone, still to run on the server.
    pub strays: Vec<bool>,
    /// Grant messages in flight: recipient and token (kept sorted: order is not information).
    pub net: Vec<(u8, u8)>,
    /// Fault budgets left.
    pub forge: u8,
    /// Duplications left.
    pub dup: u8,
    /// Losses left.
    pub lose: u8,
    /// Crashes left.
    pub crash: u8,
    /// Early leaves left.
    pub leave: u8,
    /// The highest token any client took.
    pub max_taken: u8,
    /// A client took a token not above an earlier taker's.
    pub regressed: bool,
    /// A queued waiter took a lease handed to it by a release (shows the path is reached).
    pub handed_over: bool,
}

/// One step of the exploration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes.
    Tick,
    /// The client asks for the lock.
    Send(u8),
    /// The server runs the client's attempt and the reply arrives.
    Apply(u8),
    /// The server runs it, the reply is lost: the client sends it again.
    ApplyReplyLost(u8),
    /// A waiter's fallback timer: it tries again without a message.
    Poll(u8),
    /// The waiter's wait ends (time-out or dropped future).
    Leave(u8),
    /// The server runs the leaving waiter's abandon step.
    Abandon(u8),
    /// (bug) The second abandon step never runs.
    CutCleanup(u8),
    /// A request of a client that is gone runs on the server.
    Stray(u8),
    /// The holder releases.
    Release(u8),
    /// The client's process dies.
    Crash(u8),
    /// Message `i` of the network arrives.
    Deliver(usize),
    /// Message `i` is lost.
    Drop(usize),
    /// Message `i` is duplicated.
    Dup(usize),
    /// An attacker sends a grant to the client with a token of its choosing.
    Forge(u8),
}

impl State {
    fn grant_live(&self) -> Option<Grant> {
        self.owner.filter(|g| g.expires > self.now)
    }

    fn prune(&mut self) {
        let now = self.now;
        if self.owner.is_some_and(|g| g.expires <= now) {
            self.owner = None;
        }
        self.queue.retain(|&(_, live)| live > now);
    }

    fn enqueue(&mut self, c: u8) {
        let live = self.now + ENTRY_LIFE;
        match self.queue.iter_mut().find(|(q, _)| *q == c) {
            Some(e) => e.1 = live,
            None => self.queue.push((c, live)),
        }
    }

    fn take(&mut self, c: u8, token: u8, valid_until: u8) {
        if token <= self.max_taken {
            self.regressed = true;
        }
        self.max_taken = self.max_taken.max(token);
        self.clients[c as usize] = Client::Holding { token, valid_until };
    }
}

impl Handoff {
    /// The release's hand-on: the first live entry gets a provisional grant and a message.
    fn hand_on(&self, s: &mut State) {
        s.prune();
        if s.queue.is_empty() {
            s.owner = None;
            return;
        }
        let (head, _) = s.queue.remove(0);
        s.fence += 1;
        let window = if self.bugs.full_ttl_grant { TTL } else { CLAIM };
        s.owner = Some(Grant { client: head, token: s.fence, expires: s.now + window, handoff: true });
        s.net.push((head, s.fence));
        s.net.sort_unstable();
    }

    /// The acquire step on the server: `Some(token)` granted, `None` queued.
    fn acquire(&self, s: &mut State, c: u8) -> Option<u8> {
        s.prune();
        match s.owner {
            Some(g) if g.client == c => {
                s.owner = Some(Grant { expires: s.now + TTL, handoff: false, ..g });
                Some(g.token)
            }
            Some(_) => {
                s.enqueue(c);
                None
            }
            None => match s.queue.first() {
                Some(&(head, _)) if head != c => {
                    self.hand_on(s);
                    s.enqueue(c);
                    None
                }
                _ => {
                    s.queue.retain(|&(q, _)| q != c);
                    s.fence += 1;
                    s.owner = Some(Grant { client: c, token: s.fence, expires: s.now + TTL, handoff: false });
                    Some(s.fence)
                }
            },
        }
    }

    /// The owner-checked release step.
    fn release(&self, s: &mut State, c: u8) {
        s.prune();
        if s.owner.is_some_and(|g| g.client == c) {
            self.hand_on(s);
        }
    }

    /// A reply to `c`'s attempt sent at `t0`.
    fn answer(&self, s: &mut State, c: u8, t0: u8, reply: Option<u8>) {
        match reply {
            Some(token) => s.take(c, token, t0 + TTL),
            None => s.clients[c as usize] = Client::Waiting { t0 },
        }
    }

    fn client_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        match s.clients[c as usize] {
            Client::Idle => actions.push(Action::Send(c)),
            Client::Attempting { leaving, .. } => {
                actions.push(Action::Apply(c));
                if !leaving {
                    if s.lose > 0 {
                        actions.push(Action::ApplyReplyLost(c));
                    }
                    if s.leave > 0 {
                        actions.push(Action::Leave(c));
                    }
                }
            }
            Client::Waiting { .. } => {
                if s.polls[c as usize] > 0 {
                    actions.push(Action::Poll(c));
                }
                if s.leave > 0 {
                    actions.push(Action::Leave(c));
                }
            }
            Client::Holding { .. } => actions.push(Action::Release(c)),
            Client::Leaving { release_only } => {
                actions.push(Action::Abandon(c));
                if release_only {
                    actions.push(Action::CutCleanup(c));
                }
            }
            Client::Left | Client::Done | Client::Dead { .. } => {}
        }
        if s.crash > 0 && !matches!(s.clients[c as usize], Client::Left | Client::Done | Client::Dead { .. }) {
            actions.push(Action::Crash(c));
        }
        if s.strays[c as usize] {
            actions.push(Action::Stray(c));
        }
        if s.forge > 0 && matches!(s.clients[c as usize], Client::Waiting { .. }) {
            actions.push(Action::Forge(c));
        }
    }

    fn on_message(&self, s: &mut State, to: u8, token: u8) {
        if let Client::Waiting { t0 } = s.clients[to as usize] {
            if self.bugs.trust_message {
                s.take(to, token, t0 + TTL);
                if token != FORGED {
                    s.handed_over = true;
                }
            } else {
                s.clients[to as usize] = Client::Attempting { t0: s.now, leaving: false };
            }
        }
    }

    fn step(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => s.now += 1,
            Action::Send(c) | Action::Poll(c) => {
                if matches!(action, Action::Poll(_)) {
                    s.polls[c as usize] -= 1;
                }
                s.clients[c as usize] = Client::Attempting { t0: s.now, leaving: false };
            }
            Action::Apply(c) => {
                let Client::Attempting { t0, leaving } = s.clients[c as usize] else { return };
                let was_handoff = s.owner.is_some_and(|g| g.client == c && g.handoff && g.expires > s.now);
                let reply = self.acquire(s, c);
                if leaving {
                    s.queue.retain(|&(q, _)| q != c);
                    self.release(s, c);
                    s.clients[c as usize] = Client::Left;
                } else {
                    if was_handoff && reply.is_some() {
                        s.handed_over = true;
                    }
                    self.answer(s, c, t0, reply);
                }
            }
            Action::ApplyReplyLost(c) => {
                s.lose -= 1;
                self.acquire(s, c);
                s.clients[c as usize] = Client::Attempting { t0: s.now, leaving: false };
            }
            Action::Leave(c) => {
                s.leave -= 1;
                let in_flight = matches!(s.clients[c as usize], Client::Attempting { .. });
                s.clients[c as usize] = if in_flight && !self.bugs.abandon_overtakes_attempt {
                    Client::Attempting { t0: s.now, leaving: true }
                } else {
                    if in_flight {
                        s.strays[c as usize] = true;
                    }
                    Client::Leaving { release_only: false }
                };
            }
            Action::Abandon(c) => {
                let Client::Leaving { release_only } = s.clients[c as usize] else { return };
                s.queue.retain(|&(q, _)| q != c);
                if self.bugs.abandon_forgets_place_first && !release_only {
                    s.clients[c as usize] = Client::Leaving { release_only: true };
                } else {
                    self.release(s, c);
                    s.clients[c as usize] = Client::Left;
                }
            }
            Action::CutCleanup(c) => s.clients[c as usize] = Client::Left,
            Action::Stray(c) => {
                s.strays[c as usize] = false;
                self.acquire(s, c);
            }
            Action::Release(c) => {
                self.release(s, c);
                s.clients[c as usize] = if s.rounds[c as usize] > 0 {
                    s.rounds[c as usize] -= 1;
                    Client::Idle
                } else {
                    Client::Done
                };
            }
            Action::Crash(c) => {
                s.crash -= 1;
                let held = matches!(s.clients[c as usize], Client::Holding { .. });
                if matches!(s.clients[c as usize], Client::Attempting { .. }) {
                    s.strays[c as usize] = true;
                }
                s.clients[c as usize] = Client::Dead { held };
            }
            Action::Deliver(i) => {
                let (to, token) = s.net.remove(i);
                self.on_message(s, to, token);
            }
            Action::Drop(i) => {
                s.lose -= 1;
                s.net.remove(i);
            }
            Action::Dup(i) => {
                s.dup -= 1;
                let m = s.net[i];
                s.net.push(m);
                s.net.sort_unstable();
            }
            Action::Forge(c) => {
                s.forge -= 1;
                s.net.push((c, FORGED));
                s.net.sort_unstable();
            }
        }
    }
}

impl Handoff {
    /// Forgets what can no longer change the outcome, so equal futures are one state: the send
    /// instant of a queued attempt (only a waiter that trusts messages reads it), messages to and
    /// budgets of clients that are gone or done.
    fn normalize(&self, s: &mut State) {
        for c in 0..s.clients.len() {
            match s.clients[c] {
                Client::Waiting { .. } if !self.bugs.trust_message => s.clients[c] = Client::Waiting { t0: 0 },
                Client::Left | Client::Done | Client::Dead { .. } => {
                    s.polls[c] = 0;
                    s.rounds[c] = 0;
                    let gone = c as u8;
                    s.net.retain(|&(to, _)| to != gone);
                }
                _ => {}
            }
        }
    }
}

impl Model for Handoff {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.clients as usize;
        vec![State {
            now: 0,
            owner: None,
            fence: 0,
            queue: Vec::new(),
            clients: vec![Client::Idle; n],
            polls: vec![self.polls; n],
            rounds: vec![self.rounds.saturating_sub(1); n],
            strays: vec![false; n],
            net: Vec::new(),
            forge: self.forge,
            dup: self.dup,
            lose: self.lose,
            crash: self.crash,
            leave: self.leave,
            max_taken: 0,
            regressed: false,
            handed_over: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.max_tick {
            actions.push(Action::Tick);
        }
        for c in 0..self.clients {
            self.client_actions(s, c, actions);
        }
        for i in 0..s.net.len() {
            actions.push(Action::Deliver(i));
            if s.lose > 0 {
                actions.push(Action::Drop(i));
            }
            if s.dup > 0 {
                actions.push(Action::Dup(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        self.step(&mut s, action);
        self.normalize(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no two believers", |_, s: &State| {
                let believers = s
                    .clients
                    .iter()
                    .filter(|c| matches!(c, Client::Holding { valid_until, .. } if s.now < *valid_until));
                believers.count() <= 1
            }),
            Property::always("tokens come from the server", |_, s: &State| {
                s.clients.iter().all(|c| !matches!(c, Client::Holding { token, .. } if *token > s.fence))
            }),
            Property::always("tokens increase", |_, s: &State| !s.regressed),
            Property::always("an untaken grant lapses", |_, s: &State| {
                let Some(g) = s.grant_live() else { return true };
                match s.clients[g.client as usize] {
                    Client::Left => false,
                    Client::Dead { held: false } | Client::Leaving { .. } if g.handoff => g.expires <= s.now + CLAIM,
                    _ => true,
                }
            }),
            Property::sometimes("a queued waiter is handed the lock", |_, s: &State| s.handed_over),
        ]
    }
}
