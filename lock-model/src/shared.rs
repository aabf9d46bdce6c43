//! What the two waiter-queue models share, written once: [`crate::handoff`] (the Redis
//! scripts) and [`crate::pg`] (the PostgreSQL statements) differ in their server steps, not in
//! the queue's entries, the grant's hint messages and their faults, or the client's lease rule,
//! which is lock-core's own ([`belief_end`]). The record of the tokens clients took ([`Taken`])
//! is every model's.

use std::sync::LazyLock;
use std::time::Duration;

use lock_core::clock_drift;
use tokio::time::Instant;

/// lock-core's rule for the end of a lease answered to a request sent at an instant, given the
/// ttl and the drift allowance (`lock_core::decisions::valid_until`).
pub type ValidUntil = fn(Instant, Duration, Duration) -> Option<Instant>;

/// The length of a tick when the models call lock-core's rules.
pub const TICK: Duration = Duration::from_secs(1);

static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The instant of tick `tick` on the clock the models give lock-core's rules.
pub(crate) fn instant(tick: u8) -> Instant {
    *BASE + TICK * u32::from(tick)
}

/// The first tick at or after `at`: when a client woken by ticks acts on it (never earlier).
pub(crate) fn tick_at_or_after(at: Instant) -> u8 {
    let since = at.saturating_duration_since(*BASE);
    u8::try_from(since.as_nanos().div_ceil(TICK.as_nanos())).unwrap_or(u8::MAX)
}

/// The end, in the server's ticks, of a client's belief in a lease of `ttl` ticks answered to a
/// request sent at tick `t0`, by `rule` (lock-core's `valid_until` unless a bug switch passes
/// another) with lock-core's drift allowance ([`clock_drift`]). The client counts on its own
/// clock, which the allowance lets run slow by up to that drift over one lease; the models take
/// the slowest such clock (a faster one only ends the belief sooner), so the belief ends the
/// drift after the rule's instant, rounded up to a tick: `t0 + ttl` with lock-core's rule.
pub fn belief_end(rule: ValidUntil, t0: u8, ttl: u8) -> u8 {
    let ttl = TICK * u32::from(ttl);
    let drift = clock_drift(ttl);
    let end = rule(instant(t0), ttl, drift).and_then(|end| end.checked_add(drift));
    end.map_or(u8::MAX, tick_at_or_after)
}

/// The token a forged message names: above anything a server issues within the bounds.
pub const FORGED: u8 = 200;

/// Waiter queue entries in arrival order: client and the tick its entry stops being live.
pub type Queue = Vec<(u8, u8)>;

/// Drops the entries that are no longer live at `now` (the scripts and statements skip them).
pub(crate) fn prune(queue: &mut Queue, now: u8) {
    queue.retain(|&(_, live)| live > now);
}

/// Queues `c` until `live`, or pushes its entry's end to `live` keeping its place.
pub(crate) fn enqueue(queue: &mut Queue, c: u8, live: u8) {
    match queue.iter_mut().find(|(q, _)| *q == c) {
        Some(e) => e.1 = live,
        None => queue.push((c, live)),
    }
}

/// Drops the entry of `c`.
pub(crate) fn dequeue(queue: &mut Queue, c: u8) {
    queue.retain(|&(q, _)| q != c);
}

/// The messages in flight that wake a waiter (recipient and the token they name; kept sorted:
/// their order is not information), and what the network and an attacker may still do.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hints {
    /// Messages in flight.
    pub msgs: Vec<(u8, u8)>,
    /// Forged messages left.
    pub forge: u8,
    /// Duplications left.
    pub dup: u8,
    /// Losses left (messages, or a statement's or script's reply).
    pub lose: u8,
}

/// What the network or an attacker does to the hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetAction {
    /// Message `i` arrives.
    Deliver(usize),
    /// Message `i` is lost.
    Drop(usize),
    /// Message `i` is duplicated.
    Dup(usize),
    /// Anyone who can read the queue sends a message naming the waiter, with a token of its
    /// choosing.
    Forge(u8),
}

/// One step of either queue model: the steps of a client, the clock and the network that both
/// take alike, and `Own(step)` for what only one of them has (the Redis server's restart,
/// PostgreSQL's renewals and database crash). A request is the model's script or statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueAction<Own> {
    /// Time passes.
    Tick,
    /// The client sends its acquire request.
    Send(u8),
    /// The server runs the client's request and the reply arrives.
    Apply(u8),
    /// The server runs it, the reply is lost: the client sends it again.
    ApplyReplyLost(u8),
    /// A waiter's fallback timer: it sends its acquire request without a hint.
    Poll(u8),
    /// The waiter's wait ends (time-out or dropped future).
    Leave(u8),
    /// The server runs the leaving waiter's next abandon step.
    Abandon(u8),
    /// (bug) The clean-up is cut short and nothing is left to finish it.
    Cut(u8),
    /// A request of a client that is gone runs on the server.
    Stray(u8),
    /// The holder releases.
    Release(u8),
    /// The client's process dies.
    Crash(u8),
    /// A hint is delivered, lost, duplicated or forged.
    Net(NetAction),
    /// A step only this model has.
    Own(Own),
}

impl<Own> QueueAction<Own> {
    /// The steps of client `c` while its request is in flight: the reply; unless it is leaving
    /// (its wait ended meanwhile), a lost reply while `net` may still lose one and an early leave
    /// while `leaves` are left.
    pub(crate) fn of_attempt(c: u8, leaving: bool, leaves: u8, net: &Hints, actions: &mut Vec<Self>) {
        actions.push(QueueAction::Apply(c));
        if !leaving && net.lose > 0 {
            actions.push(QueueAction::ApplyReplyLost(c));
        }
        if !leaving && leaves > 0 {
            actions.push(QueueAction::Leave(c));
        }
    }

    /// The steps of client `c` while it waits in the queue: a fallback re-try while it has
    /// `polls` left, an early leave while `leaves` are left, a forged hint while `net` may still
    /// forge one.
    pub(crate) fn of_waiter(c: u8, polls: u8, leaves: u8, net: &Hints, actions: &mut Vec<Self>) {
        if polls > 0 {
            actions.push(QueueAction::Poll(c));
        }
        if leaves > 0 {
            actions.push(QueueAction::Leave(c));
        }
        if net.forge > 0 {
            actions.push(QueueAction::Net(NetAction::Forge(c)));
        }
    }
}

impl Hints {
    /// No message in flight, with these fault budgets.
    pub(crate) fn new(forge: u8, dup: u8, lose: u8) -> Hints {
        Hints { msgs: Vec::new(), forge, dup, lose }
    }

    /// Sends `to` a message naming `token`.
    pub(crate) fn send(&mut self, to: u8, token: u8) {
        self.msgs.push((to, token));
        self.msgs.sort_unstable();
    }

    /// What can happen next to the messages; forging is offered per waiting client by the model.
    pub(crate) fn actions(&self, mut push: impl FnMut(NetAction)) {
        for i in 0..self.msgs.len() {
            push(NetAction::Deliver(i));
            if self.lose > 0 {
                push(NetAction::Drop(i));
            }
            if self.dup > 0 {
                push(NetAction::Dup(i));
            }
        }
    }

    /// Carries out `action`; the message delivered, if any.
    pub(crate) fn step(&mut self, action: NetAction) -> Option<(u8, u8)> {
        match action {
            NetAction::Deliver(i) => return Some(self.msgs.remove(i)),
            NetAction::Drop(i) => {
                self.lose -= 1;
                self.msgs.remove(i);
            }
            NetAction::Dup(i) => {
                self.dup -= 1;
                self.send(self.msgs[i].0, self.msgs[i].1);
            }
            NetAction::Forge(c) => {
                self.forge -= 1;
                self.send(c, FORGED);
            }
        }
        None
    }

    /// Forgets the messages to `c`, which no longer reads any.
    pub(crate) fn forget(&mut self, c: u8) {
        self.msgs.retain(|&(to, _)| to != c);
    }

    /// The messages with client `c` called `perm[c]`.
    pub(crate) fn rename(&mut self, perm: &[u8]) {
        for m in &mut self.msgs {
            m.0 = perm[m.0 as usize];
        }
        self.msgs.sort_unstable();
    }
}

/// The tokens clients took, for `tokens increase`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taken {
    /// The highest token any client took.
    pub max: u8,
    /// A client took a token not above an earlier taker's.
    pub regressed: bool,
}

impl Taken {
    /// A client takes `token`.
    pub(crate) fn take(&mut self, token: u8) {
        self.regressed |= token <= self.max;
        self.max = self.max.max(token);
    }
}

/// A client gone or done no longer acts: forgets its fallback re-tries, its acquisitions left
/// and the hints to it, so that equal futures are one state.
pub(crate) fn forget_client(polls: &mut [u8], rounds: &mut [u8], net: &mut Hints, c: usize) {
    polls[c] = 0;
    rounds[c] = 0;
    net.forget(c as u8);
}

/// What no longer changes the outcome of state `$s` of either queue model, forgotten so that
/// equal futures are one state: a waiter's send instant unless `$reads_send` (only a waiter that
/// trusts messages reads it), and what a client that is gone (`Client::gone`) no longer uses
/// ([`forget_client`]).
macro_rules! forget_settled_clients {
    ($s:expr, $reads_send:expr) => {{
        let s = $s;
        for c in 0..s.clients.len() {
            match s.clients[c] {
                Client::Waiting { .. } if !$reads_send => s.clients[c] = Client::Waiting { t0: 0 },
                client if client.gone() => crate::shared::forget_client(&mut s.polls, &mut s.rounds, &mut s.net, c),
                _ => {}
            }
        }
    }};
}
pub(crate) use forget_settled_clients;

/// The fields both queue models keep (`clients`, `polls`, `rounds`, `strays`, `queue`, `net`)
/// of state `$from` renamed into `$to`: client `c` called `$perm[c]`.
macro_rules! rename_queue_clients {
    ($to:ident, $from:expr, $perm:expr) => {{
        use crate::shared::{permute, rename_queue};
        permute(&mut $to.clients, &$from.clients, $perm);
        permute(&mut $to.polls, &$from.polls, $perm);
        permute(&mut $to.rounds, &$from.rounds, $perm);
        permute(&mut $to.strays, &$from.strays, $perm);
        rename_queue(&mut $to.queue, $perm);
        $to.net.rename($perm);
    }};
}
pub(crate) use rename_queue_clients;

/// The per-client fields of a state renamed: the value of client `c` goes to `perm[c]`.
pub(crate) fn permute<T: Copy>(to: &mut [T], from: &[T], perm: &[u8]) {
    for (c, &new) in perm.iter().enumerate() {
        to[new as usize] = from[c];
    }
}

/// The queue with client `c` called `perm[c]`.
pub(crate) fn rename_queue(queue: &mut Queue, perm: &[u8]) {
    for e in queue {
        e.0 = perm[e.0 as usize];
    }
}
