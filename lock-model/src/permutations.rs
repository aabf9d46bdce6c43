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
