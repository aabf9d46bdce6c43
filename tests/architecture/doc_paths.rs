//! The docs name files by their path from the repository root (`lock-core/src/lease/mod.rs`);
//! a file that moves must take its mentions along, or a reader follows a path to nothing.

use std::path::Path;

/// Directories at the repository root whose paths the docs spell out in full. Bare `src/…` and
/// `tests/…` are left out: crate docs use them relative to their own crate.
const ROOTS: [&str; 11] = [
    "lock-core/",
    "lock-redis/",
    "lock-sql/",
    "lock-zk/",
    "lock-etcd/",
    "lock-conformance/",
    "lock-model/",
    "testkit/",
    "dlock-cli/",
    "scripts/",
    "docs/",
];

/// The documents that state the current design (the benchmark log is history, kept as written).
pub(crate) fn documents(root: &Path) -> Vec<std::path::PathBuf> {
    let mut docs = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    for dir in ROOTS {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name.ends_with(".md") && name != "benchmarks-log.md" {
                docs.push(p);
            }
        }
    }
    docs.sort();
    docs
}

/// The `code spans` of `text` that read as a path from the repository root, with their line.
pub(crate) fn root_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (i, span) in line.split('`').enumerate() {
            // Odd pieces lie between backticks.
            if i % 2 == 0 || span.contains(char::is_whitespace) || !ROOTS.iter().any(|r| span.starts_with(r)) {
                continue;
            }
            // `file.rs:120` names a line of the file.
            let path = span.split(':').next().unwrap_or(span);
            let ext = Path::new(path).extension().and_then(|e| e.to_str()).unwrap_or_default();
            if ["rs", "md", "toml", "sh", "lua", "sql"].contains(&ext) || path.ends_with('/') {
                out.extend(expand_braces(path).into_iter().map(|p| (n + 1, p)));
            }
        }
    }
    out
}

/// `a/{b,c}.rs` as `a/b.rs` and `a/c.rs` (one brace group, as the docs write them).
fn expand_braces(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else { return vec![path.to_owned()] };
    if close < open {
        return vec![path.to_owned()];
    }
    path[open + 1..close].split(',').map(|alt| format!("{}{alt}{}", &path[..open], &path[close + 1..])).collect()
}

/// Whether `path`, named in `doc`, exists: from the repository root, or, in a crate's own docs,
/// from the crate or its `src/` (a crate's docs name its files as the crate sees them).
pub(crate) fn exists(root: &Path, doc: &Path, path: &str) -> bool {
    if root.join(path).exists() {
        return true;
    }
    let Some(dir) = doc.parent().filter(|d| *d != root && d.join("Cargo.toml").exists()) else { return false };
    dir.join(path).exists() || dir.join("src").join(path).exists()
}
