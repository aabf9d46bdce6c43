//! The failover model's steps and properties (see the module docs of [`crate::failover`]).

use stateright::{Model, Property};

use crate::explore::Explore;
use crate::properties::{of_kept_leases, Leases};
use crate::shared::Taken;

use super::state::{Client, Data, Node, State, OWNERS};

/// Ticks a lease lasts from its grant or renewal.
pub const TTL: u8 = 3;
/// `min_replicas_ack`.
const ACKS: u8 = 1;

/// Design errors found before, each put back by its switch; every one must give a counterexample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// The `WAIT` goes out on another connection than the script's (sent again alone after a
    /// reconnect): that connection wrote nothing, so it answers at once with every
    /// replica, whatever the script's write became.
    pub wait_on_other_connection: bool,
    /// Not a bug found before but the model's assumption about Sentinel taken away: the
    /// failover promotes any replica, not the one with the largest replication offset
    /// (what lock-redis's docs ask of Sentinel, `replica-priority` left equal): with two
    /// replicas, one that never had an acknowledged grant.
    pub promote_any_replica: bool,
}

/// One model: the clients, the bounds and the bug switches.
#[derive(Clone, Debug)]
pub struct Failover {
    /// Clients contending for the one lock name.
    pub clients: u8,
    /// Acquire attempts each client may make.
    pub attempts: u8,
    /// The last tick explored.
    pub max_tick: u8,
    /// Failovers in one run.
    pub failovers: u8,
    /// Replicas of the primary.
    pub replicas: u8,
    /// Which known errors to put back.
    pub bugs: Bugs,
}

impl Failover {
    /// The bounds the tests check: two clients of two attempts each, four ticks, two failovers
    /// (the second promotes the old primary back).
    pub fn small(bugs: Bugs) -> Failover {
        Failover { clients: 2, attempts: 2, max_tick: 4, failovers: 2, replicas: 1, bugs }
    }

    /// Two replicas, as the tests check them: two clients of one attempt each, four ticks, two
    /// failovers (each promotes the most advanced replica; with the bug, either).
    pub fn two_replicas(bugs: Bugs) -> Failover {
        Failover { attempts: 1, replicas: 2, ..Failover::small(bugs) }
    }

    /// The longer exploration (`DLOCK_MODEL_DEEP=1`): one replica with three attempts each over
    /// five ticks, and two replicas with two attempts each.
    pub fn deep(bugs: Bugs) -> [Failover; 2] {
        [
            Failover { attempts: 3, max_tick: 5, ..Failover::small(bugs) },
            Failover { attempts: 2, ..Failover::two_replicas(bugs) },
        ]
    }
}

/// One step of the exploration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes.
    Tick,
    /// The client's acquire script runs on the primary and grants (a retry may be refused).
    Acquire(u8),
    /// The client's `WAIT` answers (acknowledged, or timed out with fewer).
    Wait(u8),
    /// The holder's renew script runs on the primary.
    Renew(u8),
    /// The `WAIT` after the holder's renewal answers.
    RenewWait(u8),
    /// The holder releases.
    Release(u8),
    /// The holder's validity ran out: the lost signal.
    Lapse(u8),
    /// The replica applies the primary's oldest write it lacks.
    Replicate(u8),
    /// The replica is promoted; the old primary and the other replicas come back as its
    /// replicas.
    Promote(u8),
}

impl Failover {
    /// A write on the primary: its data becomes `data`; the replica will apply it in turn.
    /// Returns the write's offset.
    fn write(s: &mut State, data: Data) -> u8 {
        s.primary.data = data;
        s.primary.offset += 1;
        s.backlog.push(data);
        s.primary.offset
    }

    /// What a `WAIT` of a connection of `epoch` whose write is at `offset` answers now: how many
    /// replicas have that write, or `None` when the connection broke (a failover since).
    fn acked(&self, s: &State, epoch: u8, offset: u8) -> Option<u8> {
        if epoch == s.epoch {
            Some(s.replicas.iter().filter(|r| r.offset >= offset).count() as u8)
        } else if self.bugs.wait_on_other_connection {
            // A fresh connection has written nothing: every replica has all of it.
            Some(ACKS)
        } else {
            None
        }
    }

    /// The acquire script grants `c` (a free key or its own), when it would; a new attempt
    /// (not a retry) takes the next owner id.
    fn grantable(s: &State, c: u8) -> bool {
        let retry = s.clients[c as usize] == Client::Retrying;
        let me = c * OWNERS + s.attempts[c as usize] - u8::from(!retry);
        s.primary.data.lease.is_none_or(|(owner, _, expires)| owner == me || expires <= s.now)
    }

    fn acquire(s: &mut State, c: u8) {
        if !Self::grantable(s, c) {
            // A retry refused (the lock went to another meanwhile): the attempt ends.
            s.clients[c as usize] = Client::Idle;
            return;
        }
        if s.clients[c as usize] != Client::Retrying {
            s.attempts[c as usize] -= 1;
        }
        let me = s.owner(c);
        let mut data = s.primary.data;
        let token = match data.lease {
            Some((owner, token, expires)) if owner == me && expires > s.now => token,
            _ => {
                data.fence += 1;
                data.fence
            }
        };
        data.lease = Some((me, token, s.now + TTL));
        let offset = Self::write(s, data);
        s.clients[c as usize] = Client::Acking { t0: s.now, token, epoch: s.epoch, offset };
    }

    /// The owner-checked release script (also what a grant without its acknowledgements runs).
    fn release(s: &mut State, c: u8) {
        let me = s.owner(c);
        if s.primary.data.lease.is_some_and(|(owner, _, _)| owner == me) {
            let data = Data { lease: None, ..s.primary.data };
            Self::write(s, data);
        }
    }

    fn wait(&self, s: &mut State, c: u8) {
        let Client::Acking { t0, token, epoch, offset } = s.clients[c as usize] else { return };
        // A grant acknowledged only after its validity passed is a lease lost on arrival: its
        // holder never acts on it (and it counts for no taker's token).
        if self.acked(s, epoch, offset).is_some_and(|n| n >= ACKS) && s.now < t0 + TTL {
            s.taken.take(token);
            s.clients[c as usize] = Client::Holding { token, valid_until: t0 + TTL, renewal: None, sent: t0 };
        } else if epoch == s.epoch {
            // Not acknowledged (or too late): released on the same connection.
            Self::release(s, c);
            s.clients[c as usize] = Client::Idle;
        } else {
            // The connection broke: the attempt sends the script and its `WAIT` again.
            s.clients[c as usize] = Client::Retrying;
        }
    }

    fn holder_step(&self, s: &mut State, action: Action, c: u8) {
        let Client::Holding { token, valid_until, renewal, sent } = s.clients[c as usize] else { return };
        let (i, me) = (c as usize, s.owner(c));
        match action {
            Action::Renew(_) => match s.primary.data.lease {
                Some((owner, t, expires)) if owner == me && t == token && expires > s.now => {
                    let data = Data { lease: Some((me, token, s.now + TTL)), ..s.primary.data };
                    let offset = Self::write(s, data);
                    let renewal = Some((s.now, s.epoch, offset));
                    s.clients[i] = Client::Holding { token, valid_until, renewal, sent: s.now };
                }
                _ => s.clients[i] = Client::Ended,
            },
            Action::RenewWait(_) => {
                let Some((t0, epoch, offset)) = renewal else { return };
                let renewed = self.acked(s, epoch, offset).is_some_and(|n| n >= ACKS);
                let valid_until = if renewed { valid_until.max(t0 + TTL) } else { valid_until };
                s.clients[i] = Client::Holding { token, valid_until, renewal: None, sent };
            }
            Action::Release(_) => {
                Self::release(s, c);
                s.clients[i] = if s.attempts[i] > 0 { Client::Idle } else { Client::Ended };
            }
            Action::Lapse(_) => s.clients[i] = Client::Ended,
            _ => {}
        }
    }

    /// Replica `r` may be promoted: it has the largest replication offset (or, with the bug,
    /// whatever it has).
    fn promotable(&self, s: &State, r: usize) -> bool {
        let most = s.replicas.iter().map(|n| n.offset).max().unwrap_or(0);
        self.bugs.promote_any_replica || s.replicas[r].offset == most
    }

    fn promote(s: &mut State, r: usize) {
        s.failovers -= 1;
        s.epoch += 1;
        let new = s.replicas[r];
        for c in 0..s.clients.len() {
            let me = s.owner(c as u8);
            if s.believes(c) && new.data.lease.is_some_and(|(owner, _, _)| owner == me) {
                s.kept_across_failover = true;
            }
        }
        s.primary = new;
        s.replicas.fill(Node { data: new.data, offset: new.offset });
        s.backlog.clear();
    }

    /// Replica `r` applies the primary's next write it lacks; a write every replica has leaves
    /// the backlog.
    fn replicate(s: &mut State, r: usize) {
        let first = s.primary.offset - s.backlog.len() as u8;
        let replica = &mut s.replicas[r];
        replica.data = s.backlog[(replica.offset - first) as usize];
        replica.offset += 1;
        let done = s.replicas.iter().map(|n| n.offset).min().unwrap_or(0) - first;
        s.backlog.drain(..done as usize);
        // Replicas are interchangeable: one order of them is one state.
        s.replicas.sort_unstable();
    }
}

impl Explore for Failover {
    const TICK: Action = Action::Tick;

    fn step(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => s.now += 1,
            Action::Acquire(c) => Self::acquire(s, c),
            Action::Wait(c) => self.wait(s, c),
            Action::Renew(c) | Action::RenewWait(c) | Action::Release(c) | Action::Lapse(c) => {
                self.holder_step(s, action, c)
            }
            Action::Replicate(r) => Self::replicate(s, r as usize),
            Action::Promote(r) => Self::promote(s, r as usize),
        }
    }

    fn client_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        let i = c as usize;
        match s.clients[i] {
            Client::Idle if s.attempts[i] > 0 && Self::grantable(s, c) => actions.push(Action::Acquire(c)),
            Client::Retrying => actions.push(Action::Acquire(c)),
            Client::Acking { .. } => actions.push(Action::Wait(c)),
            Client::Holding { valid_until, renewal, sent, .. } => {
                match renewal {
                    None if sent < s.now => actions.push(Action::Renew(c)),
                    None => {}
                    Some(_) => actions.push(Action::RenewWait(c)),
                }
                if renewal.is_none() && s.now < valid_until {
                    actions.push(Action::Release(c));
                }
                if s.now >= valid_until {
                    actions.push(Action::Lapse(c));
                }
            }
            _ => {}
        }
    }
}

impl Model for Failover {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.clients as usize;
        let node = Node { data: Data { lease: None, fence: 0 }, offset: 0 };
        vec![State {
            now: 0,
            primary: node,
            replicas: vec![node; self.replicas as usize],
            backlog: Vec::new(),
            epoch: 0,
            failovers: self.failovers,
            clients: vec![Client::Idle; n],
            attempts: vec![self.attempts; n],
            taken: Taken::default(),
            kept_across_failover: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.time_and_clients(s, s.now < self.max_tick, actions);
        for r in 0..s.replicas.len() {
            if s.replicas[r].offset < s.primary.offset {
                actions.push(Action::Replicate(r as u8));
            }
            if s.failovers > 0 && self.promotable(s, r) {
                actions.push(Action::Promote(r as u8));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.successor(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        of_kept_leases([Property::sometimes("a lease survives a failover", |_, s: &State| s.kept_across_failover)])
    }
}
