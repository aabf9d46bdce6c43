//! The workspace's shape, checked on every test run so it does not drift back: no circle of
//! imports between the files of a crate, no library function over 100 lines, and each
//! published crate's public surface as checked in under `tests/api/` (run with
//! `DLOCK_BLESS_API=1` to rewrite the lists after an intended change, and review the diff).

mod api;
mod doc_paths;
mod graph;
mod sizes;
mod source;
mod supply_chain;

use std::path::{Path, PathBuf};

use source::Crate;

/// (crate name as used in paths, root file) of every crate of the workspace.
const CRATES: [(&str, &str); 10] = [
    ("lock_core", "lock-core/src/lib.rs"),
    ("lock_redis", "lock-redis/src/lib.rs"),
    ("lock_sql", "lock-sql/src/lib.rs"),
    ("lock_zk", "lock-zk/src/lib.rs"),
    ("lock_etcd", "lock-etcd/src/lib.rs"),
    ("lock_conformance", "lock-conformance/src/lib.rs"),
    ("lock_model", "lock-model/src/lib.rs"),
    ("dlock_testkit", "testkit/src/lib.rs"),
    ("dlock", "src/lib.rs"),
    ("dlock_cli", "dlock-cli/src/lib.rs"),
];

/// The crates users build on: their functions stay under the alarm and their surface is listed.
const LIBRARIES: [&str; 8] =
    ["lock_core", "lock_redis", "lock_sql", "lock_zk", "lock_etcd", "lock_conformance", "dlock", "dlock_cli"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn crates() -> Vec<Crate> {
    let root = workspace();
    CRATES.iter().filter(|(_, f)| root.join(f).exists()).map(|(n, f)| Crate::read(n, &root.join(f))).collect()
}

/// Circles that exist today and are being taken apart (issue: modules follow concepts). The
/// list only shrinks: a circle not listed fails the test, and so does a listed one that is gone.
const KNOWN_CIRCLES: &[&str] = &[];

/// Functions over the alarm today, being split into named steps; the list only shrinks.
const KNOWN_LONG: &[&str] = &[];

/// Fails on what is found but not known, and on what is known but no longer found.
fn only_known(what: &str, found: Vec<(String, String)>, known: &[&str]) {
    let new: Vec<&str> = found.iter().filter(|(k, _)| !known.contains(&k.as_str())).map(|(_, d)| d.as_str()).collect();
    let gone: Vec<&&str> = known.iter().filter(|k| !found.iter().any(|(f, _)| f == *k)).collect();
    assert!(new.is_empty(), "{} new {what}:\n{}", new.len(), new.join("\n"));
    assert!(gone.is_empty(), "{what} fixed (remove them from the known list): {gone:?}");
}

#[test]
fn no_circle_of_imports_between_sibling_modules() {
    let crates = crates();
    let modules: usize = crates.iter().map(|c| c.modules.len()).sum();
    assert!(modules > 120, "the reader found only {modules} modules");
    only_known("import circles", crates.iter().flat_map(Crate::circles).collect(), KNOWN_CIRCLES);
}

#[test]
fn no_library_function_over_the_alarm() {
    let long = crates()
        .iter()
        .filter(|c| LIBRARIES.contains(&c.name.as_str()))
        .flat_map(|c| c.long_functions(sizes::FUNCTION_ALARM))
        .collect();
    only_known(
        &format!("functions over {} lines (split them into named steps)", sizes::FUNCTION_ALARM),
        long,
        KNOWN_LONG,
    );
}

#[test]
fn public_surfaces_match_the_checked_in_lists() {
    let bless = std::env::var_os("DLOCK_BLESS_API").is_some();
    let mut changed = Vec::new();
    for c in crates().iter().filter(|c| LIBRARIES.contains(&c.name.as_str())) {
        let now: Vec<String> = c.public_api(&c.name).into_iter().collect();
        let file = workspace().join("tests/api").join(format!("{}.txt", c.name));
        let text = now.join("\n") + "\n";
        if bless {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &text).unwrap();
            continue;
        }
        let before = std::fs::read_to_string(&file).unwrap_or_default();
        let before: std::collections::BTreeSet<&str> = before.lines().collect();
        let now_set: std::collections::BTreeSet<&str> = now.iter().map(String::as_str).collect();
        let added: Vec<_> = now_set.difference(&before).map(|l| format!("  + {l}")).collect();
        let removed: Vec<_> = before.difference(&now_set).map(|l| format!("  - {l}")).collect();
        if !added.is_empty() || !removed.is_empty() {
            changed.push(format!("{}:\n{}\n{}", file.display(), added.join("\n"), removed.join("\n")));
        }
    }
    assert!(
        changed.is_empty(),
        "the public surface changed; if on purpose, rerun with DLOCK_BLESS_API=1 and commit the lists:\n{}",
        changed.join("\n")
    );
}

#[test]
fn docs_name_files_that_exist() {
    let root = workspace();
    let docs = doc_paths::documents(&root);
    assert!(docs.len() > 10, "the reader found only {} documents", docs.len());
    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for (line, path) in doc_paths::root_paths(&text) {
            checked += 1;
            if !doc_paths::exists(&root, doc, &path) {
                missing.push(format!("{}:{line}: `{path}`", doc.strip_prefix(&root).unwrap_or(doc).display()));
            }
        }
    }
    assert!(checked > 30, "only {checked} paths found in the docs: the reader is broken");
    assert!(missing.is_empty(), "the docs name files that do not exist (moved?):\n{}", missing.join("\n"));
}
