//! What the two waiter-queue models share, written once: [`crate::handoff`] (the Redis
//! scripts) and [`crate::pg`] (the PostgreSQL statements) differ in their server steps, not in
//! the queue's entries, the grant's hint messages and their faults, or the record of the tokens
//! clients took.

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
