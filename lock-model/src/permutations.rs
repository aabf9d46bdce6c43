//! Every renaming of the clients, for the models' symmetry reduction.

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

/// The least of `state` and its renamings by every order of its `clients` clients: the one state
/// a symmetry-reduced checker explores for all of them. `renamed(state, perm)` calls client `c`
/// `perm[c]`.
pub(crate) fn least_renaming<S: Clone + Ord>(state: &S, clients: usize, renamed: impl Fn(&S, &[u8]) -> S) -> S {
    let mut best = state.clone();
    for perm in all(clients) {
        let candidate = renamed(state, &perm);
        if candidate < best {
            best = candidate;
        }
    }
    best
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
