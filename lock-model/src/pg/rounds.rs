//! Renewal rounds on PostgreSQL: one statement renews every lease of a process that is due, and
//! one lease's trouble must not delay another's renewal past its validity
//! (`SqlStore::renew_many` in `lock-sql/src/store/mod.rs`).
//!
//! ## The protocol
//! - A process holds leases on two names. Each lease's renewal comes due by lock-core's own
//!   rule, called here ([`renewal_due`]: a cadence from the last answered send, never later
//!   than halfway through what is left; [`due_tick`] rounds its instant up to a tick); the
//!   driver gathers the leases due into one round.
//! - The round is one `UPDATE … FROM unnest(…) … FOR UPDATE SKIP LOCKED`: a row another
//!   transaction holds locked is skipped, not waited for. A lease the round did not renew is
//!   renewed apart, bounded by `min(request timeout, ttl/8)` (under a tick here): a row still
//!   locked answers nothing in time, and the watchdog tries again.
//! - Another client acquires a name whose row is free or expired (its statement waits while the
//!   row is locked).
//!
//! ## Faults
//! Another transaction (a hanging statement, an operator's `SELECT … FOR UPDATE`) locks the
//! second name's row at any moment and keeps it as long as it likes. Statements that wait on no
//! lock take no time (time does not pass while one is due or in flight and not blocked).
//!
//! ## Properties
//! - `no two believers` (per name), `a lost lease is signalled before it is gone`.
//! - `an untroubled lease is renewed in time`: the lease whose row nobody locks never passes
//!   its validity unrenewed.

use std::time::Duration;

use lock_core::decisions::renewal_due;
use stateright::{Model, Property, Representative};
use tokio::time::Instant;

use crate::shared::{instant, tick_at_or_after, TICK};

/// Ticks a lease lasts from its grant or renewal.
pub const TTL: u8 = 6;
/// The renewal cadence (`renew_every`, ttl/3 by default).
pub const EVERY: u8 = 2;
/// The name whose row another transaction may lock.
pub const LOCKED_NAME: usize = 1;

/// A renewal schedule with lock-core's signature: when the next renewal is due, from `now`, the
/// lease's `valid_until`, the validity one answered request gives and the cadence.
pub type Schedule = fn(Instant, Instant, Duration, Duration) -> Instant;

/// The holder's next renewal in ticks, as `schedule` (lock-core's [`renewal_due`] unless a test
/// passes another) decides it: the instant it returns, rounded up to the next tick, the first
/// tick at which a driver woken by ticks would run it (never earlier than the code's due).
pub fn due_tick(schedule: Schedule, now: u8, valid_until: u8, validity: u8, every: u8) -> u8 {
    let span = |ticks: u8| TICK * u32::from(ticks);
    tick_at_or_after(schedule(instant(now), instant(valid_until), span(validity), span(every)))
}

/// Design errors found before, each put back by its switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// The round's statement waits for a row another transaction holds locked (before 51f408d:
    /// no `SKIP LOCKED`, no renewal apart), so every lease of the round waits with it.
    pub round_waits_for_locked_rows: bool,
}

/// One model of renewal rounds.
#[derive(Clone, Debug)]
pub struct Rounds {
    /// The last tick explored.
    pub max_tick: u8,
    /// When a lease's renewal comes due: lock-core's [`renewal_due`], or a broken rule in the
    /// test that shows a broken schedule breaks a property.
    pub schedule: Schedule,
    /// Which known errors to put back.
    pub bugs: Bugs,
}

impl Rounds {
    /// The bounds the tests check: past one ttl and a half, the row locked at any moment.
    pub fn small(bugs: Bugs) -> Rounds {
        Rounds { max_tick: TTL + 3, schedule: renewal_due, bugs }
    }
}

/// One of the holder's leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lease {
    /// Held, believed while `now < valid_until`; its renewal is due at `due`; `waiting`: its
    /// renewal is in a round that waits on a locked row, sent at that instant.
    Held {
        /// The fencing token.
        token: u8,
        /// By the database's ticks.
        valid_until: u8,
        /// When the next renewal is due.
        due: u8,
        /// Send instant of a renewal waiting on a row lock.
        waiting: Option<u8>,
    },
    /// Lost: a renewal found the row not ours, or the validity passed unrenewed.
    Lost,
}

/// The database, the holder's leases, the other client and the locking transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The database's clock.
    pub now: u8,
    /// Per name: the row's owner (0 the holder, 1 the other client), token and expiry.
    pub rows: [Option<(u8, u8, u8)>; 2],
    /// Per name: the last fence issued.
    pub fence: [u8; 2],
    /// Per name: the holder's lease.
    pub leases: [Lease; 2],
    /// Per name: the other client's belief, valid until.
    pub other: [Option<u8>; 2],
    /// Another transaction holds the second name's row locked.
    pub locked: bool,
    /// Row locks the other transaction may still take.
    pub lock_budget: u8,
    /// The driver ran a round at this tick already.
    pub ran: bool,
    /// A lease whose row was never locked passed its validity unrenewed.
    pub untroubled_lost: bool,
    /// A round renewed a lease while the other's row was locked (shows the path is reached).
    pub renewed_beside_lock: bool,
}

/// One step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes.
    Tick,
    /// The driver sends one round for every lease due.
    Round,
    /// The round that waited on the locked row runs.
    Finish,
    /// Another transaction locks the second name's row.
    Lock,
    /// It commits.
    Unlock,
    /// The lease of the name passed its validity: the lost signal.
    Lapse(usize),
    /// The other client's acquire statement on the name.
    Acquire(usize),
}

impl Rounds {
    fn due(s: &State, n: usize) -> bool {
        matches!(s.leases[n], Lease::Held { due, waiting: None, .. } if due <= s.now)
    }

    /// The renewal of name `n`'s lease sent at `t0` runs: renewed, or lost (not ours).
    fn renew(&self, s: &mut State, n: usize, t0: u8) {
        let Lease::Held { token, valid_until, .. } = s.leases[n] else { return };
        match s.rows[n] {
            Some((0, t, expires)) if t == token && expires > s.now => {
                s.rows[n] = Some((0, token, s.now + TTL));
                let valid_until = valid_until.max(t0 + TTL);
                let due = due_tick(self.schedule, s.now, valid_until, TTL, EVERY);
                s.leases[n] = Lease::Held { token, valid_until, due, waiting: None };
                if s.locked && n != LOCKED_NAME {
                    s.renewed_beside_lock = true;
                }
            }
            _ => s.leases[n] = Lease::Lost,
        }
    }

    fn round(&self, s: &mut State) {
        s.ran = true;
        let due: Vec<usize> = (0..2).filter(|&n| Self::due(s, n)).collect();
        let blocked = s.locked && due.contains(&LOCKED_NAME);
        if blocked && self.bugs.round_waits_for_locked_rows {
            for &n in &due {
                if let Lease::Held { waiting, .. } = &mut s.leases[n] {
                    *waiting = Some(s.now);
                }
            }
            return;
        }
        for n in due {
            if s.locked && n == LOCKED_NAME {
                // Skipped, then renewed apart: no answer within its bound; tried again soon.
                if let Lease::Held { due, .. } = &mut s.leases[n] {
                    *due = s.now + 1;
                }
            } else {
                self.renew(s, n, s.now);
            }
        }
    }

    fn tick_allowed(&self, s: &State) -> bool {
        let in_flight = (0..2).any(|n| matches!(s.leases[n], Lease::Held { waiting: Some(_), .. })) && !s.locked;
        s.now < self.max_tick && !in_flight && (s.ran || !(0..2).any(|n| Self::due(s, n)))
    }
}

impl Representative for State {
    /// Nothing is interchangeable here (the holder, the other client and the names each play
    /// their own part).
    fn representative(&self) -> State {
        self.clone()
    }
}

impl Model for Rounds {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let lease =
            Lease::Held { token: 1, valid_until: TTL, due: due_tick(self.schedule, 0, TTL, TTL, EVERY), waiting: None };
        vec![State {
            now: 0,
            rows: [Some((0, 1, TTL)); 2],
            fence: [1; 2],
            leases: [lease; 2],
            other: [None; 2],
            locked: false,
            lock_budget: 1,
            ran: false,
            untroubled_lost: false,
            renewed_beside_lock: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if self.tick_allowed(s) {
            actions.push(Action::Tick);
        }
        if !s.ran && (0..2).any(|n| Self::due(s, n)) {
            actions.push(Action::Round);
        }
        let waiting = (0..2).any(|n| matches!(s.leases[n], Lease::Held { waiting: Some(_), .. }));
        if waiting && !s.locked {
            actions.push(Action::Finish);
        }
        if s.locked {
            actions.push(Action::Unlock);
        } else if s.lock_budget > 0 {
            actions.push(Action::Lock);
        }
        for n in 0..2 {
            if matches!(s.leases[n], Lease::Held { valid_until, .. } if s.now >= valid_until) {
                actions.push(Action::Lapse(n));
            }
            let free = s.rows[n].is_none_or(|(_, _, expires)| expires <= s.now);
            if free && s.other[n].is_none() && !(s.locked && n == LOCKED_NAME) {
                actions.push(Action::Acquire(n));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                s.ran = false;
            }
            Action::Round => self.round(&mut s),
            Action::Finish => {
                for n in 0..2 {
                    if let Lease::Held { waiting: Some(t0), .. } = s.leases[n] {
                        self.renew(&mut s, n, t0);
                    }
                }
            }
            Action::Lock => {
                s.lock_budget -= 1;
                s.locked = true;
            }
            Action::Unlock => s.locked = false,
            Action::Lapse(n) => {
                s.leases[n] = Lease::Lost;
                if n != LOCKED_NAME || last.lock_budget > 0 {
                    s.untroubled_lost = true;
                }
            }
            Action::Acquire(n) => {
                s.fence[n] += 1;
                s.rows[n] = Some((1, s.fence[n], s.now + TTL));
                s.other[n] = Some(s.now + TTL);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no two believers", |_, s: &State| {
                (0..2).all(|n| {
                    let holder = matches!(s.leases[n], Lease::Held { valid_until, .. } if s.now < valid_until);
                    let other = s.other[n].is_some_and(|until| s.now < until);
                    !(holder && other)
                })
            }),
            Property::always("a lost lease is signalled before it is gone", |_, s: &State| {
                (0..2).all(|n| match s.leases[n] {
                    Lease::Held { token, valid_until, .. } if s.now < valid_until => {
                        s.rows[n].is_some_and(|(owner, t, expires)| owner == 0 && t == token && expires > s.now)
                    }
                    _ => true,
                })
            }),
            Property::always("an untroubled lease is renewed in time", |_, s: &State| !s.untroubled_lost),
            Property::sometimes("a round renews beside a locked row", |_, s: &State| s.renewed_beside_lock),
        ]
    }
}
