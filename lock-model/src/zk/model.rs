//! The ZooKeeper model's steps and properties (see the module docs of [`crate::zk`]).

use stateright::{Model, Property};

use crate::explore::Explore;
use crate::properties::of_kept_leases;
use crate::shared::Taken;

use std::sync::LazyLock;

use lock_core::LockName;
use lock_zk::decisions::{Recipe, Verdict};

use super::bound;
use super::state::{Client, Link, Session, State};

/// The one lock name the recipe is asked about (the verdict reads only the queue).
static LOCK: LazyLock<Option<LockName>> = LazyLock::new(|| LockName::new("model").ok());

/// Design errors found before, each put back by its switch; every one must give a counterexample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// A lease is believed for ¾ of the session after its confirming request (the rule before
    /// 670434b): it ignores the client's ping gap, so the leader, which last
    /// heard of the session through a follower's ping answer, may expire it first.
    pub renewals_ignore_ping_gap: bool,
    /// The fixed rule without its half tick: the follower's last ping answer before a cut-off
    /// may predate the request.
    pub bound_ignores_half_tick: bool,
}

/// One model: the clients, the session's timing, the bounds and the bug switches.
#[derive(Clone, Debug)]
pub struct Zk {
    /// Clients contending for the one lock, each connected through its own follower.
    pub clients: u8,
    /// Acquisitions each client makes (one after another).
    pub rounds: u8,
    /// The negotiated session timeout, in time units.
    pub session: u8,
    /// The servers' `tickTime`, in the same units.
    pub tick: u8,
    /// The last time unit explored.
    pub max_tick: u8,
    /// Followers that may be cut off from the leader in one run.
    pub cuts: u8,
    /// Which known errors to put back.
    pub bugs: Bugs,
}

impl Zk {
    /// The bounds the tests check: two clients, one acquisition each, a 10-unit session with a
    /// 2-unit tick (lock-zk's rule: 4 units of validity; the ¾ rule: 7), explored until the
    /// session has run out once, with one follower cut off.
    pub fn small(bugs: Bugs) -> Zk {
        Zk { clients: 2, rounds: 1, session: 10, tick: 2, max_tick: 10, cuts: 1, bugs }
    }

    /// The longer exploration (`DLOCK_MODEL_DEEP=1`): the session in twentieths (the client's
    /// timers exactly, 10 units of validity).
    pub fn deep(bugs: Bugs) -> Zk {
        Zk { session: 20, max_tick: 20, ..Zk::small(bugs) }
    }

    /// The validity a confirmed request gives, by the rule in force.
    pub fn validity(&self) -> u8 {
        if self.bugs.renewals_ignore_ping_gap {
            bound::three_quarters(self.session)
        } else if self.bugs.bound_ignores_half_tick {
            bound::without_half_tick(self.session)
        } else {
            bound::fixed(self.session, self.tick)
        }
    }
}

/// One step of the exploration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes; the leader expires the sessions it has not heard of for a session timeout.
    Tick,
    /// The client's ping reaches its follower.
    Touch(u8),
    /// The client's follower answers the leader's ping, listing the sessions it heard from.
    Report(u8),
    /// The client's follower is cut off from the leader.
    Cut(u8),
    /// The client drops its silent connection (suspended).
    Drop(u8),
    /// The client connects to a server that reaches the leader, which revalidates its session
    /// (or tells it the session expired).
    Reconnect(u8),
    /// The client learns its session expired (from a server that reaches the leader).
    Expired(u8),
    /// The client creates its ephemeral sequential node and looks at the children.
    Create(u8),
    /// The watch on its predecessor fired: the waiter looks again (`sync`, then the children).
    Check(u8),
    /// The holder renews: a `sync` and a read of its node.
    Renew(u8),
    /// The holder deletes its node.
    Release(u8),
    /// The holder's watch reports its node deleted.
    Notice(u8),
    /// The holder's validity ran out: the watchdog fires the lost signal.
    Lapse(u8),
    /// A client whose lease ended deletes its node that is still there.
    Clean(u8),
}

impl Zk {
    /// A request or ping of `c` reaches its follower.
    fn touch(s: &mut State, c: usize) {
        let now = s.now;
        let link = &mut s.links[c];
        link.contact = now;
        link.pending = !link.cut;
    }

    /// `c` looks at the children behind a request sent at `t0` that the quorum answered, and
    /// lock-zk's own recipe (`Recipe::verdict`) says whether its node holds or which node it
    /// watches.
    fn look(&self, s: &mut State, c: u8, t0: u8) {
        let Some(mine) = s.node_of(c) else { return };
        let Some(name) = LOCK.as_ref() else { return };
        // The children sorted by their sequence, which follows the czxid; named by it.
        let mut queue: Vec<u8> = s.nodes.iter().map(|&(z, _)| z).collect();
        queue.sort_unstable();
        let children: Vec<String> = queue.iter().map(u8::to_string).collect();
        let Some(index) = queue.iter().position(|&z| z == mine) else { return };
        s.clients[c as usize] = match Recipe::Exclusive.verdict(name, &children, index) {
            Ok(Verdict::Wait(nodes)) => match nodes.first().and_then(|n| n.parse().ok()) {
                Some(watch) => Client::Waiting { watch },
                None => return,
            },
            // The exclusive recipe answers `Hold` or `Wait` for one node, and no error.
            Ok(Verdict::WaitGranted(_)) | Err(_) => return,
            Ok(Verdict::Hold) => {
                s.taken.take(mine);
                Client::Holding { token: mine, valid_until: t0 + self.validity() }
            }
        };
    }

    /// The client knows its session is gone: its lease (if any) is lost, and it starts a new one.
    fn learn_expiry(s: &mut State, c: usize) {
        if s.clients[c] != Client::Idle {
            s.clients[c] = Client::Ended;
        }
        s.sessions[c] = Session { heard: s.now, expired: false };
    }

    /// The client has nothing left to do and no node: it no longer affects anyone.
    fn inert(s: &State, c: usize) -> bool {
        s.clients[c] == Client::Ended && s.rounds[c] == 0 && s.node_of(c as u8).is_none()
    }

    fn tick(&self, s: &mut State) {
        s.now += 1;
        let now = s.now;
        let half = bound::half_tick(self.session, self.tick);
        for c in 0..s.clients.len() {
            if now.is_multiple_of(half) {
                s.links[c].due = !s.links[c].cut;
            }
            let session = &mut s.sessions[c];
            if !session.expired && now >= session.heard + self.session {
                session.expired = true;
                if matches!(s.clients[c], Client::Holding { .. }) {
                    s.expired_under_holder = true;
                }
                let gone = c as u8;
                s.nodes.retain(|&(_, owner)| owner != gone);
            }
        }
    }

    fn tick_allowed(&self, s: &State) -> bool {
        let silence = bound::silence(self.session);
        s.now < self.max_tick
            && (0..s.clients.len()).all(|c| {
                let link = s.links[c];
                let report_waits = link.due && !link.cut;
                let too_silent = link.connected && s.now - link.contact >= silence;
                Self::inert(s, c) || !(report_waits || too_silent)
            })
    }
}

impl Explore for Zk {
    const TICK: Action = Action::Tick;

    fn client_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        let i = c as usize;
        if Self::inert(s, i) {
            return;
        }
        let link = s.links[i];
        let alive = !s.sessions[i].expired;
        if link.connected && link.contact != s.now {
            actions.push(Action::Touch(c));
        }
        if link.due && !link.cut {
            actions.push(Action::Report(c));
        }
        if s.cuts > 0 && link.up() {
            actions.push(Action::Cut(c));
        }
        if link.connected && s.now - link.contact >= bound::silence(self.session) {
            actions.push(Action::Drop(c));
        }
        if !link.up() {
            actions.push(Action::Reconnect(c));
        }
        if link.up() && !alive {
            actions.push(Action::Expired(c));
        }
        let ready = link.up() && alive;
        match s.clients[i] {
            Client::Idle if ready => actions.push(Action::Create(c)),
            Client::Ended if ready && s.rounds[i] > 0 && s.node_of(c).is_none() => actions.push(Action::Create(c)),
            Client::Ended if ready && s.node_of(c).is_some() => actions.push(Action::Clean(c)),
            Client::Waiting { watch } if ready && !s.nodes.iter().any(|&(z, _)| z == watch) => {
                actions.push(Action::Check(c))
            }
            Client::Holding { valid_until, .. } => {
                if ready {
                    actions.push(Action::Renew(c));
                    actions.push(Action::Release(c));
                }
                if link.up() && s.node_of(c).is_none() {
                    actions.push(Action::Notice(c));
                }
                if s.now >= valid_until {
                    actions.push(Action::Lapse(c));
                }
            }
            _ => {}
        }
    }

    fn step(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => self.tick(s),
            Action::Touch(c) => Self::touch(s, c as usize),
            Action::Report(c) => {
                let (now, i) = (s.now, c as usize);
                let link = &mut s.links[i];
                if link.pending && !s.sessions[i].expired {
                    s.sessions[i].heard = now;
                }
                link.pending = false;
                link.due = false;
            }
            Action::Cut(c) => {
                s.cuts -= 1;
                let link = &mut s.links[c as usize];
                link.cut = true;
                link.pending = false;
                link.due = false;
            }
            Action::Drop(c) => s.links[c as usize].connected = false,
            Action::Reconnect(c) => {
                let i = c as usize;
                s.links[i] = Link::fresh(s.now);
                if s.sessions[i].expired {
                    Self::learn_expiry(s, i);
                } else {
                    s.sessions[i].heard = s.now;
                }
            }
            Action::Expired(c) => Self::learn_expiry(s, c as usize),
            Action::Create(c) => {
                let i = c as usize;
                if s.clients[i] == Client::Ended {
                    s.rounds[i] -= 1;
                }
                Self::touch(s, i);
                s.zxid += 1;
                s.nodes.push((s.zxid, c));
                self.look(s, c, s.now);
            }
            Action::Check(c) => {
                let was_waiting = matches!(s.clients[c as usize], Client::Waiting { .. });
                Self::touch(s, c as usize);
                self.look(s, c, s.now);
                if was_waiting && matches!(s.clients[c as usize], Client::Holding { .. }) {
                    s.handed_over = true;
                }
            }
            Action::Renew(c) => {
                let i = c as usize;
                Self::touch(s, i);
                if let Client::Holding { token, .. } = s.clients[i] {
                    s.clients[i] = if s.node_of(c) == Some(token) {
                        Client::Holding { token, valid_until: s.now + self.validity() }
                    } else {
                        Client::Ended
                    };
                }
            }
            Action::Release(c) | Action::Clean(c) => {
                Self::touch(s, c as usize);
                s.nodes.retain(|&(_, owner)| owner != c);
                s.clients[c as usize] = Client::Ended;
            }
            Action::Notice(c) | Action::Lapse(c) => s.clients[c as usize] = Client::Ended,
        }
    }

    /// Forgets what can no longer change the outcome: a client that is done and has no node
    /// keeps no connection or session worth telling apart.
    fn normalize(&self, s: &mut State) {
        for c in 0..s.clients.len() {
            if Self::inert(s, c) {
                s.links[c] = Link { connected: false, cut: false, contact: 0, pending: false, due: false };
                s.sessions[c] = Session { heard: 0, expired: true };
            }
        }
    }
}

impl Model for Zk {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.clients as usize;
        vec![State {
            now: 0,
            zxid: 0,
            nodes: Vec::new(),
            sessions: vec![Session { heard: 0, expired: false }; n],
            links: vec![Link::fresh(0); n],
            clients: vec![Client::Idle; n],
            rounds: vec![self.rounds.saturating_sub(1); n],
            cuts: self.cuts,
            taken: Taken::default(),
            handed_over: false,
            expired_under_holder: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.time_and_clients(s, self.tick_allowed(s), actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.successor(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        of_kept_leases([
            Property::sometimes("a waiter takes the lock from its predecessor", |_, s: &State| s.handed_over),
            Property::sometimes("a session expires under its holder", |_, s: &State| s.expired_under_holder),
        ])
    }
}
