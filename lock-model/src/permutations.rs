//! Every renaming of the clients, for the models' symmetry reduction.

use std::sync::LazyLock;

/// Every order of `0..n` (n is at most a handful).
pub(crate) fn all(n: usize) -> Vec<Vec<u8>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for p in all(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, (n - 1) as u8);
            out.push(q);
        }
    }
    out
}

/// Clients up to which the renamings are computed once ([`renamings`]).
const CACHED: usize = 4;

/// Every order of `0..n` but the identity, for `n` up to [`CACHED`], computed once: the checker
/// asks for a representative of every state it generates.
static RENAMINGS: LazyLock<Vec<Vec<Vec<u8>>>> =
    LazyLock::new(|| (0..=CACHED).map(|n| all(n).into_iter().filter(|p| !is_identity(p)).collect()).collect());

fn is_identity(perm: &[u8]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| usize::from(p) == i)
}

/// Every order of `0..n` but the identity.
fn renamings(n: usize) -> std::borrow::Cow<'static, [Vec<u8>]> {
    match RENAMINGS.get(n) {
        Some(cached) => std::borrow::Cow::Borrowed(cached.as_slice()),
        None => std::borrow::Cow::Owned(all(n).into_iter().filter(|p| !is_identity(p)).collect()),
    }
}

/// The least of `state` and its renamings by every order of its `clients` clients: the one state
/// a symmetry-reduced checker explores for all of them. `renamed(state, perm)` calls client `c`
/// `perm[c]`.
pub(crate) fn least_renaming<S: Clone + Ord>(state: &S, clients: usize, renamed: impl Fn(&S, &[u8]) -> S) -> S {
    let mut best: Option<S> = None;
    for perm in renamings(clients).iter() {
        let candidate = renamed(state, perm);
        if candidate < *best.as_ref().unwrap_or(state) {
            best = Some(candidate);
        }
    }
    best.unwrap_or_else(|| state.clone())
}

/// `stateright::Representative` for a model state whose clients are interchangeable: the least of
/// the state and its renamings by its own `renamed(&self, perm)` (client `c` called `perm[c]`).
macro_rules! clients_are_interchangeable {
    ($state:ty) => {
        impl stateright::Representative for $state {
            fn representative(&self) -> $state {
                crate::permutations::least_renaming(self, self.clients.len(), <$state>::renamed)
            }
        }
    };
}
pub(crate) use clients_are_interchangeable;
