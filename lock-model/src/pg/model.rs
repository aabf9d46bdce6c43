//! The PostgreSQL model's clients, faults and properties (see the module docs of [`crate::pg`]).

use std::time::Duration;

use lock_core::decisions::valid_until;
use stateright::{Model, Property};
use tokio::time::Instant;

use super::state::{Client, InFlight, State, Stmt};
use crate::explore::Explore;
use crate::properties::{lost_lease_signalled, of_issued_leases};
use crate::shared::{belief_end, forget_settled_clients, Hints, Queue, QueueAction, Taken, ValidUntil};

/// Ticks a lease lasts from its grant, claim or renewal.
pub const TTL: u8 = 4;
/// Ticks a release's provisional grant lasts unless its head claims it (`CLAIM_WINDOW`).
pub const CLAIM: u8 = 1;
/// Ticks a queue entry stays live after its waiter's latest attempt.
pub const ENTRY_LIFE: u8 = 2;

/// Design errors found before, each put back by its switch; every one must give a counterexample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// A waiter takes a `dlock-grant:<owner>:<fence>` notification as the lease: its fence,
    /// validity from its latest queued attempt, no statement (before 4355d3d).
    pub trust_notify: bool,
    /// The waiter's record is forgotten before its two abandon statements run, so a clean-up cut
    /// short leaves the background retry nothing to do (before 1668a5f).
    pub abandon_forgets_place_first: bool,
    /// A re-grant of an own row (the claim; the acquire's own-row branch) keeps the row's
    /// `expires_at` while the client counts a full ttl from its send (the SQL re-grant before
    /// d0bcadb, which fixed it for the read-write lock and the semaphore: `Plan::Again` →
    /// `Write::Extend` in `lock-sql/src/decide.rs`).
    pub claim_keeps_expiry: bool,
    /// The head's claim commits without waiting for the WAL flush, so its answer can come back
    /// while the grant it claims is still only in memory: a database crash then loses both,
    /// and the head holds a lease the database no longer has.
    pub claim_not_durable: bool,
    /// The acquire's grant commits without waiting for the WAL flush, as the releases do: a
    /// database crash then loses a lease its holder was told of, and the row is back free (or
    /// with the lease before it, which ends sooner).
    pub grant_not_durable: bool,
    /// The client's lease rule leaves out the drift allowance (lock-core's `valid_until`
    /// without its drift: the whole ttl on a clock the allowance lets run slow).
    pub no_drift_margin: bool,
}

/// One model: the clients, the bounds of the exploration and the bug switches.
#[derive(Clone, Debug)]
pub struct Pg {
    /// Clients contending for the one lock name.
    pub clients: u8,
    /// Acquisitions each client makes (one after another).
    pub rounds: u8,
    /// The last tick explored.
    pub max_tick: u8,
    /// Forged notifications in one run.
    pub forge: u8,
    /// Duplicated notifications in one run.
    pub dup: u8,
    /// Lost notifications or statement replies in one run.
    pub lose: u8,
    /// Fallback re-tries each waiter may make without a notification.
    pub polls: u8,
    /// Processes that may die in one run.
    pub crash: u8,
    /// Waits that may end early (time-out, dropped future) in one run.
    pub leave: u8,
    /// Inline clean-ups that may be cut short in one run.
    pub cut: u8,
    /// Database crashes in one run (each losing what no flush covered).
    pub db_crash: u8,
    /// Which known errors to put back.
    pub bugs: Bugs,
}

impl Pg {
    /// The notifications' faults, as the tests check them: two clients of two acquisitions over
    /// four ticks with renewals, one forged and one lost notification or reply (a duplicate is
    /// in the longer exploration).
    pub fn notify(bugs: Bugs) -> Pg {
        let none = Pg::processes(bugs);
        Pg { forge: 1, lose: 1, polls: 0, crash: 0, leave: 0, cut: 0, ..none }
    }

    /// The processes' faults, as the tests check them: two clients of two acquisitions over four
    /// ticks with renewals, one crash, one early leave whose clean-up may be cut, one re-try.
    pub fn processes(bugs: Bugs) -> Pg {
        let (forge, dup, lose, db_crash) = (0, 0, 0, 0);
        Pg {
            clients: 2,
            rounds: 2,
            max_tick: 4,
            forge,
            dup,
            lose,
            polls: 1,
            crash: 1,
            leave: 1,
            cut: 1,
            db_crash,
            bugs,
        }
    }

    /// The database's crash, as the tests check it: two clients of two acquisitions over three
    /// ticks, one database crash that loses the commits no flush covered yet (a release's
    /// grant to the head, a refusal), a lost notification and a re-try.
    pub fn db_crashes(bugs: Bugs) -> Pg {
        let none = Pg::processes(bugs);
        Pg { max_tick: 2, lose: 1, polls: 1, crash: 0, leave: 0, cut: 0, db_crash: 1, ..none }
    }

    /// The longer exploration (`DLOCK_MODEL_DEEP=1`): the notifications' faults with a
    /// duplicate, both fault sets one tick longer and the database's crash over four ticks (every fault together at once is beyond a
    /// few minutes' memory and time).
    pub fn deep(bugs: Bugs) -> [Pg; 4] {
        let dup = Pg { dup: 1, ..Pg::notify(bugs) };
        let db = Pg { max_tick: 4, ..Pg::db_crashes(bugs) };
        [dup.clone(), Pg { max_tick: 5, ..dup }, Pg { max_tick: 5, ..Pg::processes(bugs) }, db]
    }

    /// The end of a lease the database answered to a statement sent at `t0`, in the database's
    /// ticks: lock-core's own rule (`valid_until`: `ttl − drift` from the send) on the slowest
    /// clock its drift allowance permits ([`belief_end`]), which is `t0 + ttl`.
    pub fn valid_until(&self, t0: u8) -> u8 {
        let rule: ValidUntil = if self.bugs.no_drift_margin { without_drift } else { valid_until };
        belief_end(rule, t0, TTL)
    }
}

/// lock-core's lease rule with the drift left out (the `no_drift_margin` switch): the whole ttl.
fn without_drift(sent: Instant, ttl: Duration, _drift: Duration) -> Option<Instant> {
    sent.checked_add(ttl)
}

/// One step of the exploration (a request is a statement, a hint a notification: anyone who can
/// read the queue can `NOTIFY` a waiter's channel, with a fence of its choosing).
pub type Action = QueueAction<OwnAction>;

/// The steps only this model has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnAction {
    /// The holder sends a renewal.
    Renew(u8),
    /// The database runs the holder's renewal and the answer arrives.
    Renewed(u8),
    /// The holder's validity ran out unrenewed: the lost signal fires.
    Lapse(u8),
    /// The database crashes and comes back with what was flushed.
    DbCrash,
}

impl Pg {
    fn take(&self, s: &mut State, c: u8, token: u8, t0: u8) {
        s.taken.take(token);
        s.clients[c as usize] = Client::Holding { token, valid_until: self.valid_until(t0), renewal: None };
    }

    /// The lease of `c` ended: released (`again`: it may ask again, as a new owner id would;
    /// the model keeps the client's id, so only a release, which frees the row, lets it) or
    /// lost (it is done).
    fn end(s: &mut State, c: u8, again: bool) {
        let i = c as usize;
        s.clients[i] = if again && s.rounds[i] > 0 {
            s.rounds[i] -= 1;
            Client::Idle
        } else {
            Client::Ended
        };
    }

    /// The database runs the attempt of `c`; with `lost`, its answer never arrives.
    fn apply(&self, s: &mut State, c: u8, lost: bool) {
        let Client::Attempting { t0, stmt, leaving } = s.clients[c as usize] else { return };
        let reply = match stmt {
            Stmt::Claim => {
                let claimed = s.row.is_some_and(|r| r.owner == c && r.provisional && r.expires > s.now);
                let reply = self.claim(s, c);
                if claimed && reply.is_some() && !lost {
                    s.handed_over = true;
                }
                reply
            }
            Stmt::Acquire => self.acquire(s, c),
        };
        s.clients[c as usize] = if lost {
            Client::Attempting { t0: s.now, stmt, leaving }
        } else if leaving {
            Client::Leaving { entry_gone: false }
        } else {
            match (reply, stmt) {
                (Some(token), _) => return self.take(s, c, token, t0),
                // The claim found the row not its own: the acquire statement, as after any wake-up.
                (None, Stmt::Claim) => Client::Attempting { t0: s.now, stmt: Stmt::Acquire, leaving },
                (None, Stmt::Acquire) => Client::Waiting { t0 },
            }
        };
    }

    /// A notification reaches `to`: a hint that wakes a waiter to claim (or, with the bug, the
    /// lease itself).
    fn on_notify(&self, s: &mut State, to: u8, token: u8) {
        if let Client::Waiting { t0 } = s.clients[to as usize] {
            if self.bugs.trust_notify {
                self.take(s, to, token, t0);
            } else {
                s.clients[to as usize] = Client::Attempting { t0: s.now, stmt: Stmt::Claim, leaving: false };
            }
        }
    }

    /// A holder's renewal, its answer, its lapse and its release.
    fn holder_step(&self, s: &mut State, action: Action, c: u8) {
        let Client::Holding { token, valid_until, renewal } = s.clients[c as usize] else { return };
        match (action, renewal) {
            (Action::Own(OwnAction::Renew(_)), None) => {
                s.clients[c as usize] = Client::Holding { token, valid_until, renewal: Some(s.now) };
            }
            (Action::Own(OwnAction::Renewed(_)), Some(t0)) => {
                if Self::renew(s, c) {
                    s.renewed = true;
                    let valid_until = valid_until.max(self.valid_until(t0));
                    s.clients[c as usize] = Client::Holding { token, valid_until, renewal: None };
                } else {
                    Self::end(s, c, false);
                }
            }
            (Action::Own(OwnAction::Lapse(_)), _) => {
                // A renewal still in flight may yet run: it can only find the row not ours.
                if renewal.is_some() {
                    s.strays[c as usize] = Some(InFlight::Renew);
                }
                Self::end(s, c, false);
            }
            (Action::Release(_), None) => {
                Self::release(s, c);
                Self::end(s, c, true);
            }
            _ => {}
        }
    }
}

impl Explore for Pg {
    const TICK: Action = Action::Tick;

    fn client_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        let i = c as usize;
        match s.clients[i] {
            Client::Idle => actions.push(Action::Send(c)),
            Client::Attempting { leaving, .. } => Action::of_attempt(c, leaving, s.leave, &s.net, actions),
            Client::Waiting { .. } => Action::of_waiter(c, s.polls[i], s.leave, &s.net, actions),
            Client::Holding { valid_until, renewal, .. } => {
                match renewal {
                    // A renewal sent in the tick its lease was counted from would extend nothing.
                    None if valid_until < self.valid_until(s.now) => actions.push(Action::Own(OwnAction::Renew(c))),
                    None => {}
                    Some(_) => actions.push(Action::Own(OwnAction::Renewed(c))),
                }
                // Renewal and release of one lease run one at a time; a lease already lost by
                // time is not released but signalled (`Lapse`).
                if renewal.is_none() && s.now < valid_until {
                    actions.push(Action::Release(c));
                }
                if s.now >= valid_until {
                    actions.push(Action::Own(OwnAction::Lapse(c)));
                }
            }
            Client::Leaving { .. } => {
                actions.push(Action::Abandon(c));
                if self.bugs.abandon_forgets_place_first && s.cut > 0 {
                    actions.push(Action::Cut(c));
                }
            }
            Client::Left | Client::Ended | Client::Dead { .. } => {}
        }
        if s.crash > 0 && !s.clients[i].gone() {
            actions.push(Action::Crash(c));
        }
        if s.strays[i].is_some() {
            actions.push(Action::Stray(c));
        }
    }

    fn step(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => {
                s.now += 1;
                // The WAL writer flushes within three `wal_writer_delay`s (0.6 s), under a tick.
                s.unflushed = None;
            }
            Action::Own(OwnAction::DbCrash) => {
                s.db_crash -= 1;
                Self::db_crash(s);
            }
            Action::Send(c) => {
                s.clients[c as usize] = Client::Attempting { t0: s.now, stmt: Stmt::Acquire, leaving: false }
            }
            Action::Poll(c) => {
                s.polls[c as usize] -= 1;
                s.clients[c as usize] = Client::Attempting { t0: s.now, stmt: Stmt::Acquire, leaving: false };
            }
            Action::Apply(c) => self.apply(s, c, false),
            Action::ApplyReplyLost(c) => {
                s.net.lose -= 1;
                self.apply(s, c, true);
            }
            Action::Leave(c) => {
                s.leave -= 1;
                s.clients[c as usize] = match s.clients[c as usize] {
                    // The leave runs after its own statement in flight (awaited, same connection).
                    Client::Attempting { t0, stmt, .. } => Client::Attempting { t0, stmt, leaving: true },
                    _ => Client::Leaving { entry_gone: false },
                };
            }
            Action::Abandon(c) => {
                let Client::Leaving { entry_gone } = s.clients[c as usize] else { return };
                if entry_gone {
                    Self::leave_hand_on(s, c);
                    s.clients[c as usize] = Client::Left;
                } else {
                    Self::leave_queue(s, c);
                    s.clients[c as usize] = Client::Leaving { entry_gone: true };
                }
            }
            Action::Cut(c) => {
                s.cut -= 1;
                s.clients[c as usize] = Client::Left;
            }
            Action::Stray(c) => match s.strays[c as usize].take() {
                Some(InFlight::Acquire) => drop(self.acquire(s, c)),
                Some(InFlight::Renew) => drop(Self::renew(s, c)),
                None => {}
            },
            Action::Release(c) | Action::Own(OwnAction::Renew(c) | OwnAction::Renewed(c) | OwnAction::Lapse(c)) => {
                self.holder_step(s, action, c)
            }
            Action::Crash(c) => {
                s.crash -= 1;
                let held = matches!(s.clients[c as usize], Client::Holding { .. });
                s.strays[c as usize] = match s.clients[c as usize] {
                    // A claim in flight is an acquire's own-row branch (it may do less, never more).
                    Client::Attempting { .. } => Some(InFlight::Acquire),
                    Client::Holding { renewal: Some(_), .. } => Some(InFlight::Renew),
                    _ => None,
                };
                s.clients[c as usize] = Client::Dead { held };
            }
            Action::Net(a) => {
                if let Some((to, token)) = s.net.step(a) {
                    self.on_notify(s, to, token);
                }
            }
        }
    }

    /// Forgets what can no longer change the outcome, so equal futures are one state: a lapsed
    /// queue entry's end (only its place matters until it is refreshed or deleted).
    fn normalize(&self, s: &mut State) {
        let now = s.now;
        let lapsed = |queue: &mut Queue| queue.iter_mut().filter(|e| e.1 <= now).for_each(|e| e.1 = 0);
        lapsed(&mut s.queue);
        if let Some(back) = s.unflushed.as_mut() {
            lapsed(&mut back.queue);
        }
        forget_settled_clients!(s, self.bugs.trust_notify);
    }
}

impl Model for Pg {
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
            polls: vec![self.polls; n],
            rounds: vec![self.rounds.saturating_sub(1); n],
            strays: vec![None; n],
            net: Hints::new(self.forge, self.dup, self.lose),
            crash: self.crash,
            db_crash: self.db_crash,
            unflushed: None,
            leave: self.leave,
            cut: self.cut,
            taken: Taken::default(),
            handed_over: false,
            renewed: false,
            grant_lost: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.time_and_clients(s, s.now < self.max_tick, actions);
        s.net.actions(|a| actions.push(Action::Net(a)));
        if s.db_crash > 0 && s.unflushed.is_some() {
            actions.push(Action::Own(OwnAction::DbCrash));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.successor(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        of_issued_leases([
            lost_lease_signalled(),
            Property::always("an untaken grant lapses", |_, s: &State| {
                let Some(r) = s.live_row() else { return true };
                match s.clients.get(r.owner as usize) {
                    Some(Client::Left) => false,
                    Some(Client::Dead { held: false } | Client::Leaving { .. }) if r.provisional => {
                        r.expires <= s.now + CLAIM
                    }
                    _ => true,
                }
            }),
            Property::sometimes("a head claims the release's grant", |_, s: &State| s.handed_over),
            Property::sometimes("a renewal extends a lease", |_, s: &State| s.renewed),
            Property::sometimes("a database crash loses a grant", |m: &Pg, s: &State| m.db_crash == 0 || s.grant_lost),
        ])
    }
}
