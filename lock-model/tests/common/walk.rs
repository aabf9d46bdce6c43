//! What the differential tests share: the seeded choice of a walk's next action and the
//! translation of a real server's tokens into the model's.

use std::collections::BTreeMap;

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
