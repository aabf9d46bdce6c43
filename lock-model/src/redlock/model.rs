//! The Redlock model's steps and properties (see the module docs of [`crate::redlock`]).

use stateright::{Model, Property};

use crate::explore::Explore;
use crate::properties::{no_two_believers, tokens_increase};
use crate::shared::Taken;

use super::state::{Block, Claim, Client, Key, Master, Op, State};

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
    /// (hand-off) The head holds on the release's message (its token, counted from the message's
    /// tick) without a lease step of its own: the one-round hand-over reverted in 124835b.
    pub head_trusts_message: bool,
    /// (hand-off) The lease step that answers "handed" leaves the token there: the next taker
    /// of a free key gets the same token (a deep-only search, module docs).
    pub left_token_taken_twice: bool,
    /// (blocking delivery) The head holds on one master's pushed grant, no majority.
    pub blocking_holds_on_one_push: bool,
    /// (blocking delivery) The head counts its belief from the pop's arrival, not the arm's send.
    pub blocking_counts_from_pop: bool,
    /// (blocking delivery) A wait whose `BLPOP` timed out by its own timer re-arms on the same
    /// connection: the earlier `BLPOP`'s pop is counted from the later arm's send instant.
    pub blocking_stale_arm: bool,
    /// (blocking delivery) The release pushes the token it leaves without taking it (it stays
    /// marked `next`): an ordinary lease step can take it too.
    pub blocking_release_does_not_take: bool,
    /// (blocking delivery) The undo of the owner's failed attempt frees a pushed lease its lease
    /// step re-granted (no `p` mark, or an undo that ignores it): the wait, going on after the
    /// failed fallback, then holds on pops while a master no longer keeps the lease.
    pub blocking_undo_frees_pushed: bool,
    /// (blocking delivery, found by the model in lock-redis's claim as built) The claim keeps
    /// the lease's attempt id (and removes the pushed mark): a lease step of the owner's failed
    /// fallback that re-granted the pushed lease, or took a token left there ("handed"), left
    /// its attempt id, and that attempt's late undo frees the claimed lease.
    pub blocking_claim_keeps_attempt: bool,
    /// (blocking delivery) The claim extends the key, or creates it, where it is not the
    /// claimant's (a free key, or another's lease): it grants, and a claim that arrives late
    /// takes a lease another client holds.
    pub blocking_claim_grants: bool,
    /// (blocking delivery, the release carrying the holder's token) The release *sets* the
    /// counter to the carried token + 1, even where the counter is higher (not set-if-greater):
    /// the token it leaves may be at or below one a later round already took.
    pub release_sets_token: bool,
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
    /// The hand-off's claim window in ticks (the release grants the head for this long); 0: no
    /// hand-off (the release frees the key on every master at once and the client is done).
    pub claim: u8,
    /// (blocking delivery, [`crate::redlock`]'s module docs) Arm-and-`BLPOP` sends each client
    /// may make in one run: one arms every master, one re-arms a master whose `BLPOP` ended; 0:
    /// no blocking delivery (the release's grant is only woken).
    pub arms: u8,
    /// Client 0 starts holding a lease it took on every master (`Redlock::held_at_start`): the
    /// bounds with time passing, where the first acquisition's races would take too long.
    pub held: bool,
    /// Which known errors to put back.
    pub bugs: Bugs,
}

impl Redlock {
    /// Time-outs and a restart: two clients of one attempt each, a 2-tick ttl over one tick,
    /// one time-out and one master restarting without its data (11.8 million states: the
    /// longer exploration's; the tests check its parts, [`Redlock::checked`]).
    pub fn small(bugs: Bugs) -> Redlock {
        Redlock {
            clients: 2,
            attempts: 1,
            ttl: 2,
            max_tick: 1,
            lose: 1,
            restart: 1,
            claim: 0,
            arms: 0,
            held: false,
            bugs,
        }
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

    /// The hand-off: two clients of one attempt each (a waiter's attempt may reach a master
    /// before or after the holder's release), a 2-tick ttl, a 1-tick claim window, over one
    /// tick, no time-out, no restart; a release grants the other client or nobody on each
    /// master, and a client whose attempt failed withdraws (the release script in the
    /// background on every master).
    pub fn handoff(bugs: Bugs) -> Redlock {
        Redlock { lose: 0, restart: 0, claim: 1, ..Redlock::small(bugs) }
    }

    /// The hand-off's bounds `cargo test` checks: [`Redlock::handoff`], and with no time
    /// passing, with a time-out and with a restart.
    pub fn handoff_checked(bugs: Bugs) -> [Redlock; 3] {
        let base = Redlock::handoff(bugs);
        let still = Redlock { max_tick: 0, ..base.clone() };
        [base, Redlock { lose: 1, ..still.clone() }, Redlock { restart: 1, ..still }]
    }

    /// Three clients of one attempt each, no time passing: the bug searches' bound (a release
    /// can grant a different head on each master).
    pub fn handoff_three(bugs: Bugs) -> Redlock {
        Redlock { clients: 3, max_tick: 0, ..Redlock::handoff(bugs) }
    }

    /// The hand-off's longer exploration (`DLOCK_MODEL_DEEP=1`): over one tick, a time-out and
    /// a restart (6.7 M and 3.2 M unique states, about 90 s together). Two attempts
    /// each (a client acquiring again after its release) did not finish in four minutes, with
    /// or without time passing, and is not in it.
    pub fn handoff_deep(bugs: Bugs) -> [Redlock; 2] {
        let base = Redlock::handoff(bugs);
        [Redlock { lose: 1, ..base.clone() }, Redlock { restart: 1, ..base }]
    }

    /// The longer exploration (`DLOCK_MODEL_DEEP=1`): every fault of each bound together.
    pub fn deep(bugs: Bugs) -> [Redlock; 2] {
        [Redlock::small(bugs), Redlock::retries(bugs)]
    }

    pub(super) fn chan(c: u8, m: u8) -> usize {
        usize::from(c) * usize::from(MASTERS) + usize::from(m)
    }

    /// Runs `op` of client `c` on master `m` (a release with `head` the queue's head, if any);
    /// the answer the client counts, if any.
    pub(super) fn apply(&self, s: &mut State, c: u8, m: u8, op: Op, head: Option<u8>) -> Option<Reply> {
        let now = s.now;
        let micros = s.micros;
        let master = &mut s.masters[usize::from(m)];
        match op {
            Op::Acquire { attempt, acq } => {
                let live = master.live(now);
                let mine = live.is_some_and(|k| k.owned_by(c, acq));
                if (live.is_some() && !mine) || (live.is_none() && now < master.quiet_until) {
                    return Some(Reply::Refused);
                }
                let handed = self.take_left_token(master, live);
                // A re-grant of the caller's own key keeps its token and pushed mark (`t`, `p`);
                // a token taken ("handed") is written as `t`. Only the claim reads `t`: kept with
                // blocking delivery only.
                let kept = live.filter(|_| mine).map_or((0, false), |k| (k.token, k.pushed));
                let (token, pushed) = if handed > 0 { (handed, kept.1) } else { kept };
                let token = if self.arms > 0 { token } else { 0 };
                master.key = Some(Key { owner: c, acq, attempt, expires: now + self.ttl, token, pushed });
                Some(Reply::Granted { floor: master.fence.max(micros), handed })
            }
            Op::Fence { token, attempt } => {
                let stored = token > master.fence;
                master.fence = master.fence.max(token);
                if stored {
                    master.next = 0;
                    // The store writes its token into the attempt's lease (`t`), which only the
                    // claim reads: kept with blocking delivery only.
                    let own = |k: &&mut Key| k.owner == c && k.attempt == attempt;
                    if let Some(key) = master.key.as_mut().filter(own).filter(|_| self.arms > 0) {
                        key.token = token;
                    }
                }
                Some(if stored { Reply::Stored } else { Reply::Refused })
            }
            Op::Undo { attempt, acq } => {
                let spared = |k: Key| k.pushed && !self.bugs.blocking_undo_frees_pushed;
                let matches = |k: Key| {
                    k.owned_by(c, acq) && (self.bugs.undo_frees_any_attempt || k.attempt == attempt) && !spared(k)
                };
                if master.live(now).is_some_and(matches) {
                    master.key = None;
                }
                None
            }
            Op::Release { token, acq } => {
                if master.live(now).is_some_and(|k| k.owned_by(c, acq)) {
                    master.key = None;
                    if self.claim > 0 {
                        self.leave_token(s, m, head, token);
                    }
                }
                None
            }
            Op::Claim { token, acq } => Some(self.claim_step(master, c, acq, token, now)),
        }
    }

    /// The answer of `m` to `c`'s current round (a late answer of an earlier attempt is
    /// ignored: its future was dropped).
    fn answer(s: &mut State, c: u8, m: u8, op: Op, reply: Reply) {
        let bit = 1u8 << m;
        let ok = matches!(reply, Reply::Granted { .. } | Reply::Stored);
        match (&mut s.clients[usize::from(c)], op) {
            (
                Client::Round1 { attempt, granted, refused, failed, floor: f, handed, .. },
                Op::Acquire { attempt: a, .. },
            ) if *attempt == a && (*granted | *refused | *failed) & bit == 0 => {
                if let Reply::Granted { floor, handed: x } = reply {
                    *granted |= bit;
                    *f = (*f).max(floor);
                    handed[usize::from(m)] = x;
                } else {
                    *refused |= bit;
                }
            }
            (Client::Round2 { token, stored, failed, .. }, Op::Fence { token: t, .. })
            | (
                Client::Holding { token, claim: Some(Claim { sent: Some(_), ok: stored, failed }), .. },
                Op::Claim { token: t, .. },
            ) if *token == t && (*stored | *failed) & bit == 0 => {
                if ok {
                    *stored |= bit;
                } else {
                    *failed |= bit;
                }
            }
            _ => {}
        }
    }

    /// The master runs `c`'s oldest request on that connection (a release with `head`); its
    /// answer arrives.
    fn run(&self, s: &mut State, c: u8, m: u8, head: Option<u8>) {
        s.micros += 1;
        let op = s.chans[Self::chan(c, m)].remove(0);
        if let Some(reply) = self.apply(s, c, m, op, head) {
            Self::answer(s, c, m, op, reply);
            self.decide(s, c);
        }
    }

    /// The round's decision once a majority decided it, as the code breaks out of its loops.
    fn decide(&self, s: &mut State, c: u8) {
        let i = usize::from(c);
        match s.clients[i] {
            Client::Round1 { attempt, t0, granted, refused, failed, floor, handed } => {
                if granted.count_ones() >= QUORUM {
                    if let Some(token) = Self::handed_token(&handed).filter(|_| s.now < t0 + self.ttl) {
                        s.handed_holder = true;
                        Self::hold(s, c, token, t0 + self.ttl);
                        return;
                    }
                    let token = floor + 1;
                    for m in 0..MASTERS {
                        s.chans[Self::chan(c, m)].push(Op::Fence { token, attempt });
                    }
                    s.clients[i] = Client::Round2 { attempt, t0, token, refused1: refused, stored: 0, failed: 0 };
                } else if (refused | failed).count_ones() > u32::from(MASTERS) - QUORUM {
                    self.fail(s, c, attempt, refused);
                }
            }
            Client::Round2 { attempt, t0, token, refused1, stored, failed } => {
                if stored.count_ones() >= QUORUM {
                    if s.now < t0 + self.ttl {
                        Self::hold(s, c, token, t0 + self.ttl);
                    } else {
                        self.fail(s, c, attempt, refused1);
                    }
                } else if failed.count_ones() > u32::from(MASTERS) - QUORUM {
                    self.fail(s, c, attempt, refused1);
                }
            }
            Client::Holding { claim: Some(_), .. } => self.decide_claim(s, c),
            _ => {}
        }
    }

    /// `c` takes the lock with `token`, believed until `valid_until`; its wait, if any, ends.
    pub(super) fn hold(s: &mut State, c: u8, token: u8, valid_until: u8) {
        Self::close_wait(s, c);
        s.second_holder |= s.taken.max > 0;
        s.taken.take(token);
        s.clients[usize::from(c)] = Client::Holding { token, valid_until, claim: None };
    }

    /// No grant: undo the attempt in the background on every master that did not refuse it;
    /// with the hand-off, a client out of attempts also withdraws its wait (the release script
    /// on every master, in the background: a grant it got is released and handed on), unless
    /// its blocking delivery is still open: that wait goes on (idle, no attempt left) and
    /// withdraws when it gives up ([`WaitAction::GiveUp`]).
    fn fail(&self, s: &mut State, c: u8, attempt: u8, refused: u8) {
        let acq = s.acqs[usize::from(c)];
        for m in (0..MASTERS).filter(|m| refused & (1 << m) == 0) {
            s.pool.push((c, m, Op::Undo { attempt, acq }));
        }
        s.pool.sort_unstable();
        let i = usize::from(c);
        if s.attempts[i] > 0 || (self.arms > 0 && s.wait_open(c)) {
            s.clients[i] = Client::Idle;
        } else {
            self.withdraw(s, c);
        }
    }

    /// A client out of attempts is done; with the hand-off it withdraws its wait.
    pub(super) fn withdraw(&self, s: &mut State, c: u8) {
        if self.claim > 0 {
            let acq = s.acqs[usize::from(c)];
            s.pool.extend((0..MASTERS).map(|m| (c, m, Op::Release { token: 0, acq })));
            s.pool.sort_unstable();
        }
        s.clients[usize::from(c)] = Client::Done;
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
    /// (hand-off) The master runs the client's release at the front of that connection, and
    /// that master's queue has a head, the third client: the release grants it.
    Hand(u8, u8, u8),
    /// (bug `head_trusts_message`) The client takes the release's message `i` as the lock.
    Trust(u8, usize),
    /// (blocking delivery) A step of a waiting client's dedicated connections.
    Wait(WaitAction),
    /// (blocking delivery) The holder by pops sends its due claim on every master.
    SendClaim(u8),
}

/// A step of a waiting client's dedicated connections, one per master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitAction {
    /// The waiting client sends an arm and a `BLPOP` to every master, back to back, at one
    /// instant.
    Arm(u8),
    /// It sends them again to one master, whose `BLPOP` ended.
    Rearm(u8, u8),
    /// The master runs the arm; the `BLPOP` after it blocks.
    Run(u8, u8),
    /// The master's `BLPOP` ends without a pop (its timeout, the connection closed).
    End(u8, u8),
    /// The master's popped grant reaches the wait.
    Pop(u8, u8),
    /// (bug `blocking_stale_arm`) The client's own timer gives up on the master's `BLPOP` and
    /// arms again on the same connection, the earlier `BLPOP` still there: whatever it pops is
    /// read as the new arm's.
    StaleRearm(u8, u8),
    /// A wait that went on after its last lease step failed gives up (its deadline): its
    /// connections close and it withdraws.
    GiveUp(u8),
}

/// What a master answers to a request the client counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// Granted (or re-granted), with the fence floor read and, if it was the caller's grant
    /// with the fence still at its token, that token ("handed"; else 0).
    Granted {
        /// max(fence, clock).
        floor: u8,
        /// The handed token, 0: none.
        handed: u8,
    },
    /// The token was stored.
    Stored,
    /// Refused: held by another or quiet (a lease step), not above the fence (a store).
    Refused,
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
        self.handoff_actions(s, c, actions);
        self.wait_actions(s, c, actions);
        match s.clients[i] {
            Client::Idle if s.attempts[i] > 0 => actions.push(Action::Start(c)),
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
            Client::Holding { valid_until, claim, .. } => {
                actions.push(Action::Release(c));
                // The claim is due from the hold by pops and sent at any moment of the belief.
                if claim.is_some_and(|k| k.sent.is_none()) && s.now < valid_until {
                    actions.push(Action::SendClaim(c));
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
            Action::Tick => s.now += 1,
            Action::Start(c) => {
                let i = usize::from(c);
                s.attempts[i] -= 1;
                s.last_attempt[i] += 1;
                // A wait's lease step (its fallback) leaves the wait open: if the step fails,
                // the wait goes on and may count pops that arrive later.
                let (attempt, acq) = (s.last_attempt[i], s.acqs[i]);
                for m in 0..MASTERS {
                    s.chans[Self::chan(c, m)].push(Op::Acquire { attempt, acq });
                }
                s.clients[i] =
                    Client::Round1 { attempt, t0: s.now, granted: 0, refused: 0, failed: 0, floor: 0, handed: [0; 3] };
            }
            Action::Run(c, m) => self.run(s, c, m, None),
            Action::Hand(c, m, h) => self.run(s, c, m, Some(h)),
            Action::Trust(c, i) => {
                let (_, token, tick) = s.msgs.remove(i);
                Self::hold(s, c, token, tick + self.ttl);
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
                s.masters[usize::from(m)] = Master { key: None, fence: 0, next: 0, quiet_until };
                // The marks go with the data; a `BLPOP` stays blocked, as after `FLUSHALL`.
                for c in 0..self.clients {
                    s.armed[Self::chan(c, m)] = 0;
                }
            }
            Action::Release(c) => self.release(s, c),
            Action::Lapse(c) => s.clients[usize::from(c)] = Client::Done,
            Action::Wait(w) => self.wait_step(s, w),
            Action::SendClaim(c) => Self::send_claim(s, c),
        }
    }

    fn normalize(&self, s: &mut State) {
        self.forget_waits(s);
        s.compress_fence_values();
    }
}

impl Model for Redlock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = usize::from(self.clients);
        let master = Master { key: None, fence: 0, next: 0, quiet_until: 0 };
        let mut s = State {
            now: 0,
            micros: 0,
            masters: vec![master; usize::from(MASTERS)],
            chans: vec![Vec::new(); n * usize::from(MASTERS)],
            pool: Vec::new(),
            clients: vec![Client::Idle; n],
            attempts: vec![self.attempts; n],
            acqs: vec![0; n],
            last_attempt: vec![0; n],
            lose: self.lose,
            restart: self.restart,
            taken: Taken::default(),
            second_holder: false,
            handed_holder: false,
            msgs: Vec::new(),
            blocks: vec![Block::Idle; n * usize::from(MASTERS)],
            armed: vec![0; n * usize::from(MASTERS)],
            arms: vec![self.arms; n],
            pushed_holder: false,
            masters_interchangeable: self.arms > 0,
        };
        if self.held {
            self.held_at_start(&mut s);
        }
        vec![s]
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
        let mut properties = vec![
            no_two_believers(),
            tokens_increase(),
            Property::sometimes("a second client holds after the first", |_, s: &State| s.second_holder),
        ];
        if self.claim > 0 {
            properties.push(Property::sometimes("a client holds by a handed majority", |_, s: &State| s.handed_holder));
        }
        if self.arms > 0 {
            properties.extend(Self::blocking_properties());
        }
        properties
    }
}
