//! The Redlock model's steps and properties (see the module docs of [`crate::redlock`]).

use stateright::{Model, Property};

use crate::explore::Explore;
use crate::properties::{no_two_believers, tokens_increase};
use crate::shared::Taken;

use super::state::{Client, Key, Master, Op, State};

/// Masters (independent Redis instances).
pub const MASTERS: u8 = 3;
/// The majority of [`MASTERS`].
pub const QUORUM: u32 = 2;

/// Design errors found before, each put back by its switch; every one must give a counterexample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// The undo of a failed attempt frees the owner's key whatever attempt granted it (before
    /// 30c4146): a late undo frees the same owner's next, successful attempt.
    pub undo_frees_any_attempt: bool,
    /// A master that restarted without its data grants at once (before c010c65's quiet period):
    /// the key a holder had there is given to another.
    pub no_quiet_period: bool,
}

/// One model: the clients, the bounds and the bug switches.
#[derive(Clone, Debug)]
pub struct Redlock {
    /// Clients contending for the one lock name.
    pub clients: u8,
    /// Attempts each client may make (a failed one is undone and re-tried).
    pub attempts: u8,
    /// The lease's ttl, in ticks.
    pub ttl: u8,
    /// The last tick explored.
    pub max_tick: u8,
    /// Requests that may time out in one run (the request stays in flight and may still run).
    pub lose: u8,
    /// Masters that may restart without their data in one run.
    pub restart: u8,
    /// Which known errors to put back.
    pub bugs: Bugs,
}

impl Redlock {
    /// Time-outs and a restart: two clients of one attempt each, a 2-tick ttl over one tick,
    /// one time-out and one master restarting without its data (11.8 million states: the
    /// longer exploration's; the tests check its parts, [`Redlock::checked`]).
    pub fn small(bugs: Bugs) -> Redlock {
        Redlock { clients: 2, attempts: 1, ttl: 2, max_tick: 1, lose: 1, restart: 1, bugs }
    }

    /// Re-tries: two clients of two attempts each (a failed attempt is undone in the background
    /// while the next runs), one time-out, no time passing (14.2 million states: the longer
    /// exploration's).
    pub fn retries(bugs: Bugs) -> Redlock {
        Redlock { attempts: 2, max_tick: 0, restart: 0, ..Redlock::small(bugs) }
    }

    /// The bounds `cargo test` checks: [`Redlock::small`]'s time-out and restart apart, and
    /// [`Redlock::retries`] with attempts that fail by refusal (their undo still runs late).
    pub fn checked(bugs: Bugs) -> [Redlock; 3] {
        [
            Redlock { restart: 0, ..Redlock::small(bugs) },
            Redlock { lose: 0, ..Redlock::small(bugs) },
            Redlock { lose: 0, ..Redlock::retries(bugs) },
        ]
    }

    /// The longer exploration (`DLOCK_MODEL_DEEP=1`): every fault of each bound together.
    pub fn deep(bugs: Bugs) -> [Redlock; 2] {
        [Redlock::small(bugs), Redlock::retries(bugs)]
    }

    fn chan(c: u8, m: u8) -> usize {
        usize::from(c) * usize::from(MASTERS) + usize::from(m)
    }

    /// Runs `op` of client `c` on master `m`; the answer: `Some(true)` granted or stored,
    /// `Some(false)` refused, `None` for requests that answer nothing the client counts.
    fn apply(&self, s: &mut State, c: u8, m: u8, op: Op) -> (Option<bool>, u8) {
        let now = s.now;
        let master = &mut s.masters[usize::from(m)];
        match op {
            Op::Acquire { attempt } => {
                let live = master.live(now);
                let mine = live.is_some_and(|k| k.owner == c);
                if (live.is_some() && !mine) || (live.is_none() && now < master.quiet_until) {
                    return (Some(false), 0);
                }
                master.key = Some(Key { owner: c, attempt, expires: now + self.ttl });
                (Some(true), master.fence.max(s.micros))
            }
            Op::Fence { token } => {
                let stored = token > master.fence;
                master.fence = master.fence.max(token);
                (Some(stored), 0)
            }
            Op::Undo { attempt } => {
                let matches = |k: Key| k.owner == c && (self.bugs.undo_frees_any_attempt || k.attempt == attempt);
                if master.live(now).is_some_and(matches) {
                    master.key = None;
                }
                (None, 0)
            }
            Op::Release => {
                if master.live(now).is_some_and(|k| k.owner == c) {
                    master.key = None;
                }
                (None, 0)
            }
        }
    }

    /// The answer of `m` to `c`'s current round (a late answer of an earlier attempt is
    /// ignored: its future was dropped).
    fn answer(s: &mut State, c: u8, m: u8, op: Op, ok: bool, floor: u8) {
        let bit = 1u8 << m;
        match (&mut s.clients[usize::from(c)], op) {
            (Client::Round1 { attempt, granted, refused, failed, floor: f, .. }, Op::Acquire { attempt: a })
                if *attempt == a && (*granted | *refused | *failed) & bit == 0 =>
            {
                if ok {
                    *granted |= bit;
                    *f = (*f).max(floor);
                } else {
                    *refused |= bit;
                }
            }
            (Client::Round2 { token, stored, failed, .. }, Op::Fence { token: t })
                if *token == t && (*stored | *failed) & bit == 0 =>
            {
                if ok {
                    *stored |= bit;
                } else {
                    *failed |= bit;
                }
            }
            _ => {}
        }
    }

    /// The round's decision once a majority decided it, as the code breaks out of its loops.
    fn decide(&self, s: &mut State, c: u8) {
        let i = usize::from(c);
        match s.clients[i] {
            Client::Round1 { attempt, t0, granted, refused, failed, floor } => {
                if granted.count_ones() >= QUORUM {
                    let token = floor + 1;
                    for m in 0..MASTERS {
                        s.chans[Self::chan(c, m)].push(Op::Fence { token });
                    }
                    s.clients[i] = Client::Round2 { attempt, t0, token, refused1: refused, stored: 0, failed: 0 };
                } else if (refused | failed).count_ones() > u32::from(MASTERS) - QUORUM {
                    self.fail(s, c, attempt, refused);
                }
            }
            Client::Round2 { attempt, t0, token, refused1, stored, failed } => {
                if stored.count_ones() >= QUORUM {
                    if s.now < t0 + self.ttl {
                        s.second_holder |= s.taken.max > 0;
                        s.taken.take(token);
                        s.clients[i] = Client::Holding { token, valid_until: t0 + self.ttl };
                    } else {
                        self.fail(s, c, attempt, refused1);
                    }
                } else if failed.count_ones() > u32::from(MASTERS) - QUORUM {
                    self.fail(s, c, attempt, refused1);
                }
            }
            _ => {}
        }
    }

    /// No grant: undo the attempt in the background on every master that did not refuse it.
    fn fail(&self, s: &mut State, c: u8, attempt: u8, refused: u8) {
        for m in (0..MASTERS).filter(|m| refused & (1 << m) == 0) {
            s.pool.push((c, m, Op::Undo { attempt }));
        }
        s.pool.sort_unstable();
        let i = usize::from(c);
        s.clients[i] = if s.attempts[i] > 0 { Client::Idle } else { Client::Done };
    }
}

/// One step of the exploration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes.
    Tick,
    /// The client starts an attempt: round 1's requests go out to every master.
    Start(u8),
    /// The master runs the client's oldest request on that connection; its answer arrives.
    Run(u8, u8),
    /// The client stops waiting for that master in this round (the request may still run).
    Timeout(u8, u8),
    /// A background task (an undo) sends its request.
    Send(usize),
    /// The master restarts with its data lost.
    Restart(u8),
    /// The holder releases on every master.
    Release(u8),
    /// The holder's validity ran out.
    Lapse(u8),
}

impl Explore for Redlock {
    const TICK: Action = Action::Tick;

    fn client_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        let i = usize::from(c);
        for m in 0..MASTERS {
            if !s.chans[Self::chan(c, m)].is_empty() {
                actions.push(Action::Run(c, m));
            }
        }
        match s.clients[i] {
            Client::Idle => actions.push(Action::Start(c)),
            Client::Round1 { granted, refused, failed, .. } if s.lose > 0 => {
                for m in (0..MASTERS).filter(|m| (granted | refused | failed) & (1 << m) == 0) {
                    actions.push(Action::Timeout(c, m));
                }
            }
            Client::Round2 { stored, failed, .. } if s.lose > 0 => {
                for m in (0..MASTERS).filter(|m| (stored | failed) & (1 << m) == 0) {
                    actions.push(Action::Timeout(c, m));
                }
            }
            Client::Holding { valid_until, .. } => {
                actions.push(Action::Release(c));
                if s.now >= valid_until {
                    actions.push(Action::Lapse(c));
                }
            }
            _ => {}
        }
    }

    fn step(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => s.now += 1,
            Action::Start(c) => {
                let i = usize::from(c);
                s.attempts[i] -= 1;
                s.last_attempt[i] += 1;
                let attempt = s.last_attempt[i];
                for m in 0..MASTERS {
                    s.chans[Self::chan(c, m)].push(Op::Acquire { attempt });
                }
                s.clients[i] = Client::Round1 { attempt, t0: s.now, granted: 0, refused: 0, failed: 0, floor: 0 };
            }
            Action::Run(c, m) => {
                s.micros += 1;
                let op = s.chans[Self::chan(c, m)].remove(0);
                if let (Some(ok), floor) = self.apply(s, c, m, op) {
                    Self::answer(s, c, m, op, ok, floor);
                    self.decide(s, c);
                }
            }
            Action::Timeout(c, m) => {
                s.lose -= 1;
                let bit = 1u8 << m;
                match &mut s.clients[usize::from(c)] {
                    Client::Round1 { failed, .. } | Client::Round2 { failed, .. } => *failed |= bit,
                    _ => {}
                }
                self.decide(s, c);
            }
            Action::Send(k) => {
                let (c, m, op) = s.pool.remove(k);
                s.chans[Self::chan(c, m)].push(op);
            }
            Action::Restart(m) => {
                s.restart -= 1;
                let quiet_until = if self.bugs.no_quiet_period { s.now } else { s.now + self.ttl };
                s.masters[usize::from(m)] = Master { key: None, fence: 0, quiet_until };
            }
            Action::Release(c) => {
                // On every master at once: a slower release only keeps the key longer, and one
                // acquisition per client means it can only ever free its own lease.
                for m in 0..MASTERS {
                    self.apply(s, c, m, Op::Release);
                }
                s.clients[usize::from(c)] = Client::Done;
            }
            Action::Lapse(c) => s.clients[usize::from(c)] = Client::Done,
        }
    }
}

impl Model for Redlock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = usize::from(self.clients);
        let master = Master { key: None, fence: 0, quiet_until: 0 };
        vec![State {
            now: 0,
            micros: 0,
            masters: vec![master; usize::from(MASTERS)],
            chans: vec![Vec::new(); n * usize::from(MASTERS)],
            pool: Vec::new(),
            clients: vec![Client::Idle; n],
            attempts: vec![self.attempts; n],
            last_attempt: vec![0; n],
            lose: self.lose,
            restart: self.restart,
            taken: Taken::default(),
            second_holder: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.time_and_clients(s, s.now < self.max_tick, actions);
        for k in 0..s.pool.len() {
            actions.push(Action::Send(k));
        }
        if s.restart > 0 {
            for m in 0..MASTERS {
                actions.push(Action::Restart(m));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.successor(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            no_two_believers(),
            tokens_increase(),
            Property::sometimes("a second client holds after the first", |_, s: &State| s.second_holder),
        ]
    }
}
