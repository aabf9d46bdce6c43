//! Blocking delivery for Redlock, as lock-redis builds it ("Blocking delivery" in the module
//! docs of [`crate::redlock`]): a waiting client's arms and `BLPOP`s, the release's push (a
//! lease marked pushed), the hold on a majority of pops naming one token (also after the wait's
//! own lease step failed), and the claim that follows it.

use stateright::Property;

use super::model::{Action, Redlock, Reply, WaitAction, MASTERS, QUORUM};
use super::state::{Block, Claim, Client, Key, Master, Op, State, CLAIM};
use crate::properties::Leases;

/// Ticks an arm's mark lives after it ran (its `BLPOP`'s timeout).
pub const BLOCK: u8 = 2;

impl Redlock {
    /// Blocking delivery from the start: two clients of one attempt each, a 2-tick ttl, a 1-tick
    /// claim window, one arm each, no time passing.
    pub fn blocking(bugs: super::Bugs) -> Redlock {
        Redlock { arms: 1, max_tick: 0, ..Redlock::handoff(bugs) }
    }

    /// Blocking delivery over a tick: [`Redlock::blocking`] from a lease client 0 holds on every
    /// master, one tick passing.
    pub fn blocking_held(bugs: super::Bugs) -> Redlock {
        Redlock { held: true, max_tick: 1, ..Redlock::blocking(bugs) }
    }

    /// The bounds `cargo test` checks: [`Redlock::blocking`] and [`Redlock::blocking_held`].
    pub fn blocking_checked(bugs: super::Bugs) -> [Redlock; 2] {
        [Redlock::blocking(bugs), Redlock::blocking_held(bugs)]
    }

    /// Blocking delivery's longer exploration (`DLOCK_MODEL_DEEP=1`, about 40 s in release):
    /// [`Redlock::blocking_held`] with a time-out, with a restart, with re-arms (three arms
    /// each), over two ticks; [`Redlock::blocking`] over a tick. Three clients with no time
    /// passing did not finish in 150 s (from a lease held or not), nor two attempts each from
    /// a held lease in 200 s, and are not in it.
    pub fn blocking_deep(bugs: super::Bugs) -> [Redlock; 5] {
        let held = Redlock::blocking_held(bugs);
        [
            Redlock { lose: 1, ..held.clone() },
            Redlock { restart: 1, ..held.clone() },
            Redlock { arms: 3, ..held.clone() },
            Redlock { max_tick: 2, ..held },
            Redlock { max_tick: 1, ..Redlock::blocking(bugs) },
        ]
    }

    /// Client 0 holds token 1, stored on every master by its attempt 1 at tick 0, its lease
    /// valid for the ttl from then.
    pub(super) fn held_at_start(&self, s: &mut State) {
        s.micros = 1;
        for master in &mut s.masters {
            master.key = Some(Key { owner: 0, acq: 0, attempt: 1, expires: self.ttl, token: 0, pushed: false });
            master.fence = 1;
        }
        s.attempts[0] -= 1;
        s.last_attempt[0] = 1;
        s.taken.take(1);
        s.clients[0] = Client::Holding { token: 1, valid_until: self.ttl, claim: None };
    }

    /// The wait's steps of client `c`, idle between attempts: with an attempt left, or going on
    /// after its last one failed (which may give up). During the wait's own lease step (its
    /// fallback) only its `BLPOP`s end and are re-armed: a pop is read once the step failed
    /// (or never, if it holds), and the arm runs as it is sent, before the step. Ending a
    /// `BLPOP` is offered only when an arm is left to follow it: a `BLPOP` that stays blocked
    /// and is never read does all an ended one does.
    pub(super) fn wait_actions(&self, s: &State, c: u8, actions: &mut Vec<Action>) {
        if self.arms == 0 {
            return;
        }
        let i = usize::from(c);
        let again = s.arms[i] > 0;
        let blocks: Vec<Block> = (0..MASTERS).map(|m| s.blocks[Self::chan(c, m)]).collect();
        match s.clients[i] {
            Client::Idle if s.attempts[i] == 0 => actions.push(Action::Wait(WaitAction::GiveUp(c))),
            Client::Idle => {}
            Client::Round1 { .. } | Client::Round2 { .. } if again && s.wait_open(c) => {
                for (m, block) in (0..MASTERS).zip(blocks) {
                    match block {
                        Block::Idle => actions.push(Action::Wait(WaitAction::Rearm(c, m))),
                        Block::Blocked { .. } => actions.push(Action::Wait(WaitAction::End(c, m))),
                        _ => {}
                    }
                }
                return;
            }
            _ => return,
        }
        if again && blocks.iter().all(|&b| b == Block::Idle) {
            actions.push(Action::Wait(WaitAction::Arm(c)));
            return;
        }
        let stale = again && self.bugs.blocking_stale_arm;
        for (m, block) in (0..MASTERS).zip(blocks) {
            let mut push = |w| actions.push(Action::Wait(w));
            match block {
                Block::Idle if again => push(WaitAction::Rearm(c, m)),
                Block::Sent { .. } => push(WaitAction::Run(c, m)),
                Block::Blocked { .. } if again => push(WaitAction::End(c, m)),
                Block::Popped { .. } => push(WaitAction::Pop(c, m)),
                _ => {}
            }
            if stale && matches!(block, Block::Blocked { .. } | Block::Popped { .. }) {
                push(WaitAction::StaleRearm(c, m));
            }
        }
    }

    pub(super) fn wait_step(&self, s: &mut State, w: WaitAction) {
        let now = s.now;
        match w {
            WaitAction::Arm(c) => {
                s.arms[usize::from(c)] -= 1;
                for m in 0..MASTERS {
                    s.blocks[Self::chan(c, m)] = Block::Sent { t_s: now };
                    self.wait_step(s, WaitAction::Run(c, m));
                }
            }
            WaitAction::Rearm(c, m) => {
                s.arms[usize::from(c)] -= 1;
                s.blocks[Self::chan(c, m)] = Block::Sent { t_s: now };
                self.wait_step(s, WaitAction::Run(c, m));
            }
            // The arm's drain empties the list, so the `BLPOP` pops only what a release pushes
            // after the arm ran (a token pushed before is a hint; its grant lapses or is the
            // head's lease step's, and the token, taken, is nobody's): the lists are not
            // modelled.
            WaitAction::Run(c, m) => {
                let ch = Self::chan(c, m);
                if let Block::Sent { t_s } = s.blocks[ch] {
                    s.armed[ch] = now + BLOCK;
                    s.blocks[ch] = Block::Blocked { t_s };
                }
            }
            WaitAction::End(c, m) => s.blocks[Self::chan(c, m)] = Block::Idle,
            WaitAction::StaleRearm(c, m) => {
                s.arms[usize::from(c)] -= 1;
                let ch = Self::chan(c, m);
                s.blocks[ch] = match s.blocks[ch] {
                    Block::Blocked { .. } => Block::Blocked { t_s: now },
                    Block::Popped { token, .. } => Block::Popped { t_s: now, token },
                    other => other,
                };
            }
            WaitAction::Pop(c, m) => {
                let ch = Self::chan(c, m);
                if let Block::Popped { t_s, token } = s.blocks[ch] {
                    let t_s = if self.bugs.blocking_counts_from_pop { now } else { t_s };
                    s.blocks[ch] = Block::Got { t_s, token };
                    self.hold_on_pops(s, c);
                }
            }
            WaitAction::GiveUp(c) => {
                Self::close_wait(s, c);
                self.withdraw(s, c);
            }
        }
    }

    /// The release on `m` granted the head `h` the key (just written) and left it `x`: an armed
    /// head is pushed the token, which the release takes for it (no lease step answers
    /// "handed" with it then), and its mark goes. An unarmed head is only woken, as without
    /// blocking delivery.
    pub(super) fn push(&self, s: &mut State, m: u8, h: u8, x: u8) {
        let ch = Self::chan(h, m);
        if self.arms == 0 || s.armed[ch] <= s.now {
            return;
        }
        s.armed[ch] = 0;
        let master = &mut s.masters[usize::from(m)];
        if !self.bugs.blocking_release_does_not_take {
            master.next = 0;
        }
        if let Some(key) = master.key.as_mut() {
            key.token = x;
            key.pushed = true;
        }
        if let Block::Blocked { t_s } = s.blocks[ch] {
            s.blocks[ch] = Block::Popped { t_s, token: x };
        }
    }

    /// The wait holds once a majority of its pops name one token (any one pop with
    /// `blocking_holds_on_one_push`), believed until the earliest of those pops' arm instants
    /// plus the claim window, if that is still ahead; the claim is due (sent later, or never,
    /// [`Redlock::send_claim`]), and the wait's other connections close. Anything less waits for more pops, or
    /// for the client's own lease step (the fallback, [`Action::Start`]), which it may take
    /// at any time.
    fn hold_on_pops(&self, s: &mut State, c: u8) {
        let need = if self.bugs.blocking_holds_on_one_push { 1 } else { QUORUM as usize };
        let got: Vec<(u8, u8)> = (0..MASTERS)
            .filter_map(|m| match s.blocks[Self::chan(c, m)] {
                Block::Got { t_s, token } => Some((token, t_s)),
                _ => None,
            })
            .collect();
        // Per token, the latest `need` arm instants: the best majority that names it.
        let until = |x: u8| {
            let mut from: Vec<u8> = got.iter().filter(|g| g.0 == x).map(|g| g.1).collect();
            from.sort_unstable_by(|a, b| b.cmp(a));
            from.get(need - 1).map(|&t_s| t_s + self.claim)
        };
        let best = got
            .iter()
            .filter_map(|&(x, _)| until(x).map(|u| (x, u)))
            .filter(|&(_, u)| u > s.now)
            .max_by_key(|&(_, u)| u);
        let Some((token, until)) = best else { return };
        let i = usize::from(c);
        // A wait going on after its last lease step failed holds with no attempt left.
        s.attempts[i] = s.attempts[i].saturating_sub(1);
        s.pushed_holder = true;
        Self::hold(s, c, token, until);
        s.clients[i] =
            Client::Holding { token, valid_until: until, claim: Some(Claim { sent: None, ok: 0, failed: 0 }) };
        Self::close_wait(s, c);
    }

    /// The holder by pops sends its due claim on every master, behind what it still has in
    /// flight there; a release after it goes behind it on each connection (the same one).
    pub(super) fn send_claim(s: &mut State, c: u8) {
        let i = usize::from(c);
        let Client::Holding { token, claim: Some(claim), .. } = &mut s.clients[i] else { return };
        claim.sent = Some(s.now);
        let (token, acq) = (*token, s.acqs[i]);
        for m in 0..MASTERS {
            s.chans[Self::chan(c, m)].push(Op::Claim { token, acq });
        }
    }

    /// The wait of `c` ended (it holds, by pops or by its own lease step, or gave up): its
    /// connections close, and a pop still outstanding is never read.
    pub(super) fn close_wait(s: &mut State, c: u8) {
        for m in 0..MASTERS {
            s.blocks[Self::chan(c, m)] = Block::Idle;
        }
    }

    /// The claim on one master (lock-redis's `REDLOCK_CLAIM_SRC`): a live key that is the
    /// caller's, whatever its token or attempt id, is extended to `now + ttl`, with the claimed
    /// token as its `t`, no pushed mark and the attempt id [`CLAIM`], which no undo matches; the
    /// master's counter is raised to the token if it is lower (set-if-greater) and the token
    /// marked taken (`claim:<token>`: `next` cleared). Anything else is refused, and nothing is
    /// granted. Bugs: `blocking_claim_keeps_attempt` keeps the key's attempt id (the owner's
    /// failed lease step's, whose late undo then frees the claimed lease) and
    /// `blocking_claim_grants` writes the key where it is not the caller's. (Setting the counter
    /// to the token where it is higher was searched, without a counterexample: module docs.)
    pub(super) fn claim_step(&self, master: &mut Master, c: u8, acq: u8, token: u8, now: u8) -> Reply {
        let own = master.live(now).filter(|k| k.owned_by(c, acq));
        if own.is_none() && !self.bugs.blocking_claim_grants {
            return Reply::Refused;
        }
        let attempt = own.filter(|_| self.bugs.blocking_claim_keeps_attempt).map_or(CLAIM, |k| k.attempt);
        master.fence = master.fence.max(token);
        master.next = 0;
        master.key = Some(Key { owner: c, acq, attempt, expires: now + self.ttl, token, pushed: false });
        Reply::Stored
    }

    /// The claim decided: a majority extends the belief to the claim's send plus the ttl;
    /// otherwise the lease is lost, its belief staying at the pops' window (which the grants
    /// outlast) where it lapses.
    pub(super) fn decide_claim(&self, s: &mut State, c: u8) {
        let i = usize::from(c);
        let Client::Holding { token, valid_until, claim: Some(claim @ Claim { sent: Some(sent), .. }) } = s.clients[i]
        else {
            return;
        };
        if claim.ok.count_ones() >= QUORUM {
            let valid_until = valid_until.max(sent + self.ttl);
            s.clients[i] = Client::Holding { token, valid_until, claim: None };
        } else if claim.failed.count_ones() > u32::from(MASTERS) - QUORUM {
            s.clients[i] = Client::Holding { token, valid_until, claim: None };
        }
    }

    /// Forgets what no longer changes the outcome, so that equal futures are one state: the
    /// connections of a client that no longer waits, the arms of one that never will, marks
    /// past their end, a pop that can no longer be held (a hint), and an arm instant whose
    /// window has passed (0, which has passed too).
    pub(super) fn forget_waits(&self, s: &mut State) {
        if self.arms == 0 {
            return;
        }
        let now = s.now;
        let lapsed = |t_s: u8| t_s + self.claim <= now;
        for c in 0..self.clients {
            let i = usize::from(c);
            let waits = matches!(s.clients[i], Client::Idle | Client::Round1 { .. } | Client::Round2 { .. });
            for m in 0..MASTERS {
                let ch = Self::chan(c, m);
                if s.armed[ch] <= now {
                    s.armed[ch] = 0;
                }
                s.blocks[ch] = match s.blocks[ch] {
                    _ if !waits => Block::Idle,
                    Block::Got { t_s, .. } if lapsed(t_s) => Block::Idle,
                    Block::Sent { t_s } if lapsed(t_s) => Block::Sent { t_s: 0 },
                    Block::Blocked { t_s } if lapsed(t_s) => Block::Blocked { t_s: 0 },
                    Block::Popped { t_s, token } if lapsed(t_s) && !self.bugs.blocking_counts_from_pop => {
                        Block::Popped { t_s: 0, token }
                    }
                    other => other,
                };
            }
            // Arms are kept while the client may still wait: attempts left, idle (going on after
            // its last attempt), or in its last attempt with the wait open.
            if s.attempts[i] == 0 && !(waits && (s.clients[i] == Client::Idle || s.wait_open(c))) {
                s.arms[i] = 0;
            }
        }
    }

    /// What blocking delivery adds to the properties: a believed lease is live on a majority
    /// of masters, its own (until a restart, which takes a key away while its holder believes
    /// it: the quiet period covers that), and the fast path is reached.
    pub(super) fn blocking_properties() -> Vec<Property<Redlock>> {
        vec![
            Property::always("a believed lease is kept by a majority", |model: &Redlock, s: &State| {
                let kept = |c: usize| {
                    let own =
                        s.masters.iter().filter(|m| m.live(s.now).is_some_and(|k| k.owned_by(c as u8, s.acqs[c])));
                    own.count() >= QUORUM as usize
                };
                s.restart < model.restart || (0..s.clients.len()).all(|c| !s.believes(c) || kept(c))
            }),
            Property::sometimes("a client holds by pushed grants", |_, s: &State| s.pushed_holder),
        ]
    }
}

impl State {
    /// The wait of `c` has a `BLPOP` outstanding or a pop not yet read (or counted).
    pub(super) fn wait_open(&self, c: u8) -> bool {
        (0..MASTERS).any(|m| self.blocks[Redlock::chan(c, m)] != Block::Idle)
    }
}
