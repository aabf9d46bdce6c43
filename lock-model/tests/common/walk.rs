//! What the differential tests share: the seeded choice of a walk's next action and the
//! translation of a real server's tokens into the model's.

use std::collections::BTreeMap;
use std::fmt::Debug;

use stateright::Model;

/// A deterministic choice: a small linear congruential generator.
pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// The next action of a walk: time passes (`time`) one step in four, a `fault` one in eight
/// (when either is all there is, that), so that the lock changes hands between faults.
pub(crate) fn choose<A: Copy + PartialEq>(rng: &mut Lcg, actions: &[A], time: A, fault: fn(A) -> bool) -> Option<A> {
    let pick = |rng: &mut Lcg, pred: &dyn Fn(A) -> bool| {
        let some: Vec<A> = actions.iter().copied().filter(|&a| pred(a)).collect();
        (!some.is_empty()).then(|| some[rng.below(some.len())])
    };
    let tick = || actions.contains(&time).then_some(time);
    let normal = |a: A| a != time && !fault(a);
    let first = match rng.below(8) {
        0 => pick(rng, &fault),
        1 | 2 => tick(),
        _ => pick(rng, &normal),
    };
    first.or_else(|| pick(rng, &normal)).or_else(tick).or_else(|| pick(rng, &fault))
}

/// One seeded walk through a model: where it is and how it got there.
pub(crate) struct Walk<M: Model> {
    pub(crate) model: M,
    pub(crate) seed: u64,
    /// The state reached.
    pub(crate) s: M::State,
    /// The actions taken.
    pub(crate) trace: Vec<M::Action>,
    rng: Lcg,
    /// Steps left.
    steps: usize,
    /// The action that lets time pass, and which ones are faults ([`choose`]).
    time: M::Action,
    fault: fn(M::Action) -> bool,
}

impl<M> Walk<M>
where
    M: Model,
    M::Action: Copy + PartialEq + Debug,
{
    /// A walk of at most `steps` steps from the model's first initial state.
    pub(crate) fn new(model: M, seed: u64, steps: usize, time: M::Action, fault: fn(M::Action) -> bool) -> Self {
        let s = model.init_states().remove(0);
        Walk { model, seed, s, trace: Vec::new(), rng: Lcg(seed), steps, time, fault }
    }

    /// The next step, chosen by [`choose`] among the model's actions: the action, recorded in
    /// the trace, and the state after it (the walk moves there with [`Walk::agree`]).
    pub(crate) fn next(&mut self) -> Option<(M::Action, M::State)> {
        self.steps = self.steps.checked_sub(1)?;
        let mut actions = Vec::new();
        self.model.actions(&self.s, &mut actions);
        let action = choose(&mut self.rng, &actions, self.time, self.fault)?;
        self.trace.push(action);
        self.model.next_state(&self.s, action).map(|next| (action, next))
    }

    /// Asserts that the real server agrees with the model after the step to `next`: each
    /// operation's answer (`(op, got, want)`), then what the comparison reads; moves there.
    pub(crate) fn agree<O: Debug, R: PartialEq + Debug, V: PartialEq + Debug>(
        &mut self,
        next: M::State,
        replies: Vec<(O, R, R)>,
        got: V,
        want: V,
    ) {
        let (seed, trace) = (self.seed, &self.trace);
        for (op, got, want) in replies {
            assert_eq!(got, want, "walk {seed}: the answer to {op:?} after {trace:?}");
        }
        assert_eq!(got, want, "walk {seed}: the server after {trace:?}");
        self.s = next;
    }
}

/// The real server's tokens seen so far, each with the model's token it stands for.
#[derive(Default)]
pub(crate) struct Tokens(BTreeMap<i64, u8>);

impl Tokens {
    /// The model's token for a real one, where the model expects `model`: `model` when the real
    /// one keeps the order of every token seen (a new one for a new one), else `u8::MAX`.
    pub(crate) fn translate(&mut self, real: i64, model: u8) -> u8 {
        if let Some(&seen) = self.0.get(&real) {
            return seen;
        }
        let consistent = self.0.iter().all(|(&r, &m)| (r < real) == (m < model) && m != model);
        self.0.insert(real, model);
        if consistent {
            model
        } else {
            u8::MAX
        }
    }
}
