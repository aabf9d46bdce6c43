//! What the build takes from outside, checked offline on every run from `cargo metadata`: every
//! package comes from crates.io, this workspace or its patched copies under vendor/ (no git, no
//! other registry), every license is one the project accepts (the same policy as `deny.toml`, for
//! those who run `cargo deny`), and the library's own dependency graph has no OpenSSL and one
//! version of `rand`.
//!
//! Written here rather than by installing `cargo-deny` in CI: building that tool takes minutes
//! on two cores, and its advisory check needs the network anyway.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Licenses the project accepts in its dependencies (SPDX ids; `deny.toml` lists the same).
pub(crate) const ALLOWED: &[&str] = &[
    "MIT",
    "Apache-2.0",
    "Apache-2.0 WITH LLVM-exception",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "ISC",
    "Zlib",
    "Unicode-3.0",
    "Unlicense",
    "BSL-1.0",
    "CDLA-Permissive-2.0",
    "CC0-1.0",
    "0BSD",
];

/// Crates the library must never link (a C TLS stack beside rustls).
const BANNED: &[&str] = &["openssl-sys", "openssl", "native-tls"];

const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

/// `cargo metadata` for this machine's platform, offline (the build fetched everything); read
/// once per test binary.
pub(crate) fn metadata() -> &'static Value {
    static METADATA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    METADATA.get_or_init(read_metadata)
}

fn read_metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let host = Command::new("rustc").arg("-vV").output().expect("rustc -vV runs");
    let host = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc names its host");
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", &host])
        .current_dir(super::workspace())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// Whether an SPDX expression is satisfied by [`ALLOWED`] (`AND`, `OR`, `WITH`, parentheses;
/// the old `/` separator read as `OR`).
pub(crate) fn license_ok(expr: &str) -> bool {
    let spaced = expr.replace('(', " ( ").replace(')', " ) ").replace('/', " OR ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut at = 0;
    let ok = or_expr(&tokens, &mut at);
    ok == Some(true) && at == tokens.len()
}

fn or_expr(t: &[&str], at: &mut usize) -> Option<bool> {
    let mut ok = and_expr(t, at)?;
    while t.get(*at) == Some(&"OR") {
        *at += 1;
        ok |= and_expr(t, at)?;
    }
    Some(ok)
}

fn and_expr(t: &[&str], at: &mut usize) -> Option<bool> {
    let mut ok = term(t, at)?;
    while t.get(*at) == Some(&"AND") {
        *at += 1;
        ok &= term(t, at)?;
    }
    Some(ok)
}

fn term(t: &[&str], at: &mut usize) -> Option<bool> {
    if t.get(*at) == Some(&"(") {
        *at += 1;
        let ok = or_expr(t, at)?;
        (t.get(*at) == Some(&")")).then_some(())?;
        *at += 1;
        return Some(ok);
    }
    let mut id = (*t.get(*at)?).to_owned();
    *at += 1;
    if t.get(*at) == Some(&"WITH") {
        id = format!("{id} WITH {}", t.get(*at + 1)?);
        *at += 2;
    }
    Some(ALLOWED.contains(&id.as_str()))
}

/// The packages (name → versions) reachable from `root` through normal dependencies.
fn normal_closure(meta: &Value, root: &str) -> BTreeMap<String, BTreeSet<String>> {
    let packages: BTreeMap<&str, (&str, &str)> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), (p["name"].as_str().unwrap(), p["version"].as_str().unwrap())))
        .collect();
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .expect("resolve nodes")
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let start = packages.iter().find(|(_, (name, _))| *name == root).map(|(id, _)| *id).expect("root package");
    let (mut seen, mut todo) = (BTreeSet::new(), vec![start]);
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"].as_array().into_iter().flatten().any(|k| k["kind"].is_null());
            if normal {
                todo.push(dep["pkg"].as_str().unwrap());
            }
        }
    }
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for id in seen {
        let (name, version) = packages[id];
        out.entry(name.to_owned()).or_default().insert(version.to_owned());
    }
    out
}

#[test]
fn licenses_are_parsed_as_spdx() {
    for ok in ["MIT", "MIT OR Apache-2.0", "(MIT OR Apache-2.0) AND Unicode-3.0", "MIT/Apache-2.0", "GPL-3.0 OR MIT"] {
        assert!(license_ok(ok), "{ok}");
    }
    for bad in ["GPL-3.0", "MIT AND GPL-3.0", "(MIT", "", "Apache-2.0 WITH Something-else", "SSPL-1.0 OR AGPL-3.0"] {
        assert!(!license_ok(bad), "{bad}");
    }
}

#[test]
fn dependencies_come_from_crates_io_under_accepted_licenses() {
    let meta = metadata();
    let mut wrong = Vec::new();
    for p in meta["packages"].as_array().expect("packages") {
        let (name, version) = (p["name"].as_str().unwrap_or("?"), p["version"].as_str().unwrap_or("?"));
        match p["source"].as_str() {
            // This workspace's packages, and the patched copies under vendor/ (vendor/README.md).
            None => {}
            Some(CRATES_IO) => {}
            Some(other) => wrong.push(format!("{name} {version}: from {other}, not crates.io")),
        }
        match p["license"].as_str() {
            Some(l) if license_ok(l) => {}
            Some(l) => wrong.push(format!(
                "{name} {version}: license {l:?} is not accepted (tests/architecture/supply_chain.rs, deny.toml)"
            )),
            None => wrong.push(format!("{name} {version}: no SPDX license (a license file only): review it")),
        }
    }
    let count = meta["packages"].as_array().map_or(0, Vec::len);
    assert!(count > 100, "cargo metadata listed only {count} packages");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_library_links_no_openssl_and_one_rand() {
    let closure = normal_closure(metadata(), "dlock-rs");
    assert!(closure.contains_key("lock-core") && closure.contains_key("sqlx-core"), "{:?}", closure.keys());
    let banned: Vec<&&str> = BANNED.iter().filter(|b| closure.contains_key(**b)).collect();
    assert!(banned.is_empty(), "the library links {banned:?} (rustls only)");
    let rand = closure.get("rand").cloned().unwrap_or_default();
    assert!(rand.len() <= 1, "the library links rand {rand:?}: keep one version");
}

/// What only the `dlock` tool needs lives in its own package (`dlock-cli`): an application that
/// depends on the library compiles no argument parser, progress bars, signal forwarding or
/// conformance suite.
#[test]
fn the_library_links_nothing_only_the_tool_needs() {
    let closure = normal_closure(metadata(), "dlock-rs");
    let tool_only = ["clap", "indicatif", "nix", "lock-conformance", "tracing-subscriber", "dlock-cli"];
    let linked: Vec<&&str> = tool_only.iter().filter(|c| closure.contains_key(**c)).collect();
    assert!(linked.is_empty(), "the library links {linked:?}, which only the dlock tool needs");
    let tool = normal_closure(metadata(), "dlock-cli");
    assert!(tool.contains_key("clap") && tool.contains_key("dlock-rs"), "{:?}", tool.keys());
}
