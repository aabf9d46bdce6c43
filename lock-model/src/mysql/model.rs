//! The MySQL model's clients, bounds and properties (see the module docs of [`crate::mysql`]).

use lock_core::decisions::valid_until;
use stateright::{Model, Property};

use super::state::{place_of, Answer, Attempt, Bump, Client, State, Then, LAST};
use crate::explore::Explore;
use crate::properties::of_kept_leases;
use crate::shared::{belief_end, Taken};

/// Ticks a lease lasts from its grant.
pub const TTL: u8 = 2;
/// Ticks a queue entry lives after its latest write (`lifetime`), and the bump's reach.
pub const LIFE: u8 = 2;

/// Design errors, each put back by its switch; every one must give a counterexample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// The enqueue writes `expires_at = now + lifetime`, not capped by the `queued_until` its
    /// attempt returned: with a tick between the attempt and the enqueue the entry outlives the
    /// summary, and a light attempt overtakes it.
    pub enqueue_ignores_bump: bool,
    /// The attempt does not bump; a statement of its own after the enqueue does: between the two
    /// the entry is live and not summarized.
    pub bump_after_enqueue: bool,
    /// The collector deletes a lease row by its `expires_at` alone: a live entry's row is gone,
    /// and the next attempt's insert grants with no condition.
    pub collector_ignores_queue: bool,
    /// A light attempt's refusal of a free row is final: no fallback with the queue subquery
    /// (a `try_acquire` is refused; a waiting acquire queues).
    pub no_fallback: bool,
    /// (`read_back`) A read-back that finds no row gives the enqueue no cap (`now + lifetime`)
    /// instead of `V = 0`: the entry is live while its row is gone.
    pub missing_row_uncapped: bool,
}

/// One model: the clients, the bounds of the exploration and the bug switches.
#[derive(Clone, Debug)]
pub struct Mysql {
    /// Clients contending for the one lock name.
    pub clients: u8,
    /// Acquisitions each client makes (one after another), each a `try_acquire` or a waiting
    /// `acquire`.
    pub rounds: u8,
    /// The last tick explored.
    pub max_tick: u8,
    /// The collector's `idle` in ticks.
    pub idle: u8,
    /// Waits that may end early in one run.
    pub leave: u8,
    /// Processes that may die in one run.
    pub crash: u8,
    /// Enqueue answers that may be lost in one run (the statement ran).
    pub lose: u8,
    /// MySQL without `RETURNING`: an attempt's answer (owner, fence, `V`) comes from a `SELECT`
    /// of its own after it (lock-sql's read-back), time and other statements between; else
    /// from the attempt itself (MariaDB 10.5+).
    pub read_back: bool,
    /// Which design errors to put in.
    pub bugs: Bugs,
}

impl Mysql {
    /// Two clients of three acquisitions over six ticks (a holder coming back is the newcomer),
    /// the collector with `idle` 0, one early leave, one crash, one lost enqueue answer; the
    /// answers in the attempt (`RETURNING`).
    pub fn pair(bugs: Bugs) -> Mysql {
        Mysql { clients: 2, rounds: 3, max_tick: 6, idle: 0, leave: 1, crash: 1, lose: 1, read_back: false, bugs }
    }

    /// Three clients of one acquisition each over six ticks, the collector with `idle` 1, one
    /// early leave, one crash, one lost enqueue answer.
    pub fn trio(bugs: Bugs) -> Mysql {
        Mysql { rounds: 1, clients: 3, idle: 1, ..Mysql::pair(bugs) }
    }

    /// The answers read back (MySQL without `RETURNING`): two clients of two acquisitions over
    /// five ticks, otherwise as [`Mysql::pair`] (a statement more per attempt: three
    /// acquisitions over six ticks are 27 M states, in the longer exploration).
    pub fn read_back(bugs: Bugs) -> Mysql {
        Mysql { rounds: 2, max_tick: 5, read_back: true, ..Mysql::pair(bugs) }
    }

    /// The longer exploration (`DLOCK_MODEL_DEEP=1`): three clients of two acquisitions each
    /// over five ticks (`idle` 1); the answers read back at the bounds of [`Mysql::pair`];
    /// two clients of four acquisitions over seven ticks (`idle` 1).
    pub fn deep(bugs: Bugs) -> [Mysql; 3] {
        [
            Mysql { rounds: 2, max_tick: 5, ..Mysql::trio(bugs) },
            Mysql { read_back: true, ..Mysql::pair(bugs) },
            Mysql { rounds: 4, max_tick: 7, idle: 1, ..Mysql::pair(bugs) },
        ]
    }

    /// The end of a lease granted to an attempt sent at `t0`: lock-core's rule, which with the
    /// clients' clocks the database's is `t0 + ttl`, the `expires_at` the attempt wrote.
    fn valid_until(t0: u8) -> u8 {
        belief_end(valid_until, t0, TTL)
    }

    /// The acquisition of `c` is over (released, or a `try_acquire` refused): another one if it
    /// has any left.
    fn next_round(s: &mut State, c: u8) {
        let i = c as usize;
        s.clients[i] = if s.rounds[i] > 0 {
            s.rounds[i] -= 1;
            Client::Idle
        } else {
            Client::Ended
        };
    }

    /// How a waiting acquire's refused attempt bumps: in the attempt, unless the bump is a
    /// statement after the enqueue (`bump_after_enqueue`).
    fn bump(&self, how: Bump) -> Bump {
        if self.bugs.bump_after_enqueue {
            Bump::No
        } else {
            how
        }
    }

    /// Client `c` sends the attempt `then`: light while it is not queued, full with the place
    /// last for the fallback, full with its place for a poll; bumping when its refusal may be
    /// followed by the enqueue.
    fn send(&self, s: &mut State, c: u8, then: Then) {
        let (how, bump) = match then {
            Then::Try => (Attempt::Light, Bump::No),
            // Also when the summary alone refused a free row, before the fallback (lock-sql binds
            // the lifetime whenever a refusal may be followed by the enqueue: `Wait::refresh`).
            Then::Acquire { .. } => (Attempt::Light, self.bump(Bump::Refused)),
            Then::Fallback { wait: true, .. } => (Attempt::Full { place: LAST }, self.bump(Bump::Refused)),
            Then::Fallback { wait: false, .. } => (Attempt::Full { place: LAST }, Bump::No),
            Then::Poll { seq, fresh: true } => (Attempt::Full { place: seq }, Bump::No),
            Then::Poll { seq, fresh: false } => (Attempt::Full { place: seq }, self.bump(Bump::Refused)),
        };
        let t0 = s.now;
        let answer = self.attempt(s, c, how, bump);
        let for_nothing = matches!(answer, Answer::Refused { .. }) && s.free_for(c);
        if self.read_back {
            s.clients[c as usize] = Client::Reading { then, t0, for_nothing };
        } else {
            self.answered(s, c, then, answer, t0, for_nothing);
        }
    }

    /// (`read_back`) The `SELECT` of the row after the attempt: granted if the row is `c`'s
    /// (lock-sql checks the owner only), else refused, free when the row has no live lease,
    /// with the row's `queued_until` as `V` (0 when the row is gone: an entry capped by it is
    /// written lapsed).
    fn read(&self, s: &mut State, c: u8) {
        let Client::Reading { then, t0, for_nothing } = s.clients[c as usize] else { return };
        let answer = match s.row {
            Some(r) if r.owner == Some(c) => Answer::Granted(r.token),
            Some(r) => Answer::Refused { free: r.owner.is_none() || r.expires <= s.now, queued_until: r.queued_until },
            None => Answer::Refused { free: true, queued_until: if self.bugs.missing_row_uncapped { LAST } else { 0 } },
        };
        // The refusal was for nothing if its statement found the row free to `c` and, as the
        // client learns it, it still is (a lock taken meanwhile is not a refusal for nothing).
        let for_nothing = for_nothing && s.free_for(c);
        self.answered(s, c, then, answer, t0, for_nothing);
    }

    /// What `c` does with the answer to its attempt `then` sent at `t0`; `for_nothing`: a
    /// refusal that the full condition with the place last would not have given.
    fn answered(&self, s: &mut State, c: u8, then: Then, answer: Answer, t0: u8, for_nothing: bool) {
        let i = c as usize;
        let (free, v) = match answer {
            Answer::Granted(token) => {
                s.fallback_granted |= matches!(then, Then::Fallback { .. });
                s.taken.take(token);
                s.clients[i] = Client::Holding { token, valid_until: Self::valid_until(t0), entry: then.entry() };
                return;
            }
            Answer::Refused { free, queued_until } => (free, queued_until),
        };
        // A free row refused by the light condition: the summary alone refused it.
        let fallback = free && !self.bugs.no_fallback;
        s.clients[i] = match then {
            Then::Try if fallback => Client::Fallback { wait: false, entry: false },
            Then::Acquire { entry } if fallback => Client::Fallback { wait: true, entry },
            Then::Try | Then::Fallback { wait: false, .. } => {
                s.refused_for_nothing |= for_nothing;
                return Self::next_round(s, c);
            }
            Then::Poll { seq, fresh: true } => Client::Queued { seq, fresh: true },
            Then::Acquire { .. } | Then::Fallback { wait: true, .. } | Then::Poll { .. } => Client::Enqueue { v },
        };
    }
}

/// One step of the exploration: each client step is one statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes.
    Tick,
    /// `try_acquire`'s light attempt.
    Try(u8),
    /// A waiting `acquire`'s attempt while not queued (its first, or after its enqueue's answer
    /// was lost), light.
    Acquire(u8),
    /// The full attempt with the place last, after a light attempt refused a free row.
    Fallback(u8),
    /// A refused waiting acquire writes its entry.
    Enqueue(u8),
    /// The same, and its answer (the place) is lost.
    EnqueueLost(u8),
    /// (`bump_after_enqueue`) The bump after the enqueue.
    Bump(u8),
    /// A queued waiter's full attempt with its place.
    Poll(u8),
    /// (`read_back`) The `SELECT` that reads the row back after an attempt.
    ReadBack(u8),
    /// A waiter gives up and deletes its entry.
    Leave(u8),
    /// A waiter granted while queued deletes its entry.
    Dequeue(u8),
    /// The holder releases.
    Release(u8),
    /// The holder's validity ran out unreleased: it signals the loss and asks no more.
    Lapse(u8),
    /// The client's process dies.
    Crash(u8),
    /// `collect_idle(idle)`'s first statement: the entries `idle` past their end.
    CollectEntries,
    /// `collect_idle(idle)`'s second statement: the lease row if it is idle.
    CollectRow,
}

impl Explore for Mysql {
    const TICK: Action = Action::Tick;

    fn client_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        match s.clients[c as usize] {
            Client::Idle => actions.extend([Action::Try(c), Action::Acquire(c)]),
            Client::Fallback { .. } => actions.push(Action::Fallback(c)),
            Client::Reading { .. } => actions.push(Action::ReadBack(c)),
            Client::Enqueue { .. } => {
                actions.push(Action::Enqueue(c));
                if s.lose > 0 {
                    actions.push(Action::EnqueueLost(c));
                }
            }
            Client::Bump { .. } => actions.push(Action::Bump(c)),
            Client::Queued { .. } => actions.push(Action::Poll(c)),
            Client::Unplaced => actions.push(Action::Acquire(c)),
            Client::Holding { entry: true, .. } => actions.push(Action::Dequeue(c)),
            Client::Holding { valid_until, .. } if s.now < valid_until => actions.push(Action::Release(c)),
            Client::Holding { .. } => actions.push(Action::Lapse(c)),
            Client::Left | Client::Ended | Client::Dead => return,
        }
        // A waiter gives up between its statements.
        if s.leave > 0 && matches!(s.clients[c as usize], Client::Queued { .. } | Client::Unplaced) {
            actions.push(Action::Leave(c));
        }
        if s.crash > 0 {
            actions.push(Action::Crash(c));
        }
    }

    fn step(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => {
                s.now += 1;
                for client in &mut s.clients {
                    if let Client::Queued { fresh, .. } | Client::Reading { then: Then::Poll { fresh, .. }, .. } =
                        client
                    {
                        *fresh = false;
                    }
                }
            }
            Action::Try(c) => self.send(s, c, Then::Try),
            Action::Acquire(c) => {
                let entry = s.clients[c as usize] == Client::Unplaced;
                self.send(s, c, Then::Acquire { entry });
            }
            Action::Fallback(c) => {
                if let Client::Fallback { wait, entry } = s.clients[c as usize] {
                    self.send(s, c, Then::Fallback { wait, entry });
                }
            }
            Action::Poll(c) => {
                if let Client::Queued { seq, fresh } = s.clients[c as usize] {
                    self.send(s, c, Then::Poll { seq, fresh });
                }
            }
            Action::ReadBack(c) => self.read(s, c),
            Action::Enqueue(c) => {
                if let Client::Enqueue { v } = s.clients[c as usize] {
                    let seq = self.enqueue(s, c, v);
                    s.clients[c as usize] = if self.bugs.bump_after_enqueue {
                        Client::Bump { seq }
                    } else {
                        Client::Queued { seq, fresh: true }
                    };
                }
            }
            Action::EnqueueLost(c) => {
                if let Client::Enqueue { v } = s.clients[c as usize] {
                    s.lose -= 1;
                    // (`bump_after_enqueue`: the client, which saw an error, sends no bump after it.)
                    self.enqueue(s, c, v);
                    s.clients[c as usize] = Client::Unplaced;
                }
            }
            Action::Bump(c) => {
                if let Client::Bump { seq } = s.clients[c as usize] {
                    Self::bump_alone(s);
                    s.clients[c as usize] = Client::Queued { seq, fresh: true };
                }
            }
            Action::Leave(c) => {
                s.leave -= 1;
                Self::leave_queue(s, c);
                s.clients[c as usize] = Client::Left;
            }
            Action::Dequeue(c) => {
                Self::leave_queue(s, c);
                if let Client::Holding { entry, .. } = &mut s.clients[c as usize] {
                    *entry = false;
                }
            }
            Action::Release(c) => {
                Self::release(s, c);
                Self::next_round(s, c);
            }
            Action::Lapse(c) => s.clients[c as usize] = Client::Ended,
            Action::Crash(c) => {
                s.crash -= 1;
                s.clients[c as usize] = Client::Dead;
            }
            Action::CollectEntries => self.collect_entries(s),
            Action::CollectRow => self.collect_row(s),
        }
    }

    /// Forgets what can no longer change the outcome: a client's acquisitions once it is gone;
    /// an expired row's owner and fence (nobody attempts as that owner again); a time already
    /// `idle` past (the collector's and every condition's answer are the same for 0); the
    /// places' values beyond their order.
    fn normalize(&self, s: &mut State) {
        let (now, idle) = (s.now, self.idle);
        let past = |t: &mut u8| {
            if *t + idle <= now {
                *t = 0;
            }
        };
        for (c, client) in s.clients.iter_mut().enumerate() {
            match client {
                Client::Left | Client::Ended | Client::Dead => s.rounds[c] = 0,
                Client::Enqueue { v } => past(v),
                // A lease whose belief already ended: only that it ended matters.
                Client::Holding { valid_until, .. } if *valid_until <= now => *valid_until = 0,
                Client::Reading { t0, .. } if *t0 + TTL <= now => *t0 = 0,
                _ => {}
            }
        }
        // An expired row's owner is read only by that owner's read-back.
        let reading = |o: u8| matches!(s.clients[o as usize], Client::Reading { .. });
        if let Some(r) = s.row.as_mut() {
            if r.expires <= now && !r.owner.is_some_and(reading) {
                r.owner = None;
                r.token = 0;
            }
            past(&mut r.expires);
            past(&mut r.queued_until);
        }
        for e in &mut s.queue {
            past(&mut e.expires);
        }
        // Places renumbered 1, 2, … in their order (distinct: each is the clock at its insert).
        let mut seqs: Vec<u8> = s.queue.iter().map(|e| e.seq).chain(s.clients.iter().filter_map(place_of)).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let rank = |seq: &mut u8| *seq = seqs.iter().position(|q| q == seq).map_or(0, |i| i as u8 + 1);
        for e in &mut s.queue {
            rank(&mut e.seq);
        }
        for client in &mut s.clients {
            if let Client::Queued { seq, .. }
            | Client::Bump { seq }
            | Client::Reading { then: Then::Poll { seq, .. }, .. } = client
            {
                rank(seq);
            }
        }
    }
}

impl Model for Mysql {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.clients as usize;
        vec![State {
            now: 0,
            row: None,
            fence: 0,
            queue: Vec::new(),
            clients: vec![Client::Idle; n],
            rounds: vec![self.rounds.saturating_sub(1); n],
            leave: self.leave,
            crash: self.crash,
            lose: self.lose,
            taken: Taken::default(),
            overtaken: false,
            refused_for_nothing: false,
            fallback_granted: false,
            collected: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.time_and_clients(s, s.now < self.max_tick, actions);
        // The collector's statements, each offered when it would delete something.
        if s.queue.iter().any(|e| self.idle_past(e.expires, s.now)) {
            actions.push(Action::CollectEntries);
        }
        if self.row_idle(s) {
            actions.push(Action::CollectRow);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.successor(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        of_kept_leases([
            Property::always("no overtaking", |_, s: &State| !s.overtaken),
            Property::always("queued_until covers the live queue", |_, s: &State| s.queue_covered()),
            Property::always("a try is refused only for a holder or a live waiter", |_, s: &State| {
                !s.refused_for_nothing
            }),
            Property::sometimes("the fallback grants a free row the summary refused", |_, s: &State| {
                s.fallback_granted
            }),
            Property::sometimes("the collector deletes the lease row", |_, s: &State| s.collected),
            Property::sometimes("a queued waiter is served", |_, s: &State| {
                s.clients.iter().any(|c| matches!(c, Client::Holding { entry: true, .. }))
            }),
        ])
    }
}
