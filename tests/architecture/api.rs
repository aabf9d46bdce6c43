//! A crate's public surface as text, one line per item: the items of every module reachable by
//! `pub mod` from the root, the `pub use` re-exports as written, and the methods of public types
//! and traits. Compared with a checked-in list so the surface changes only on purpose.

use std::collections::{BTreeMap, BTreeSet};

use crate::source::{item_def, strip_qualifiers, Crate};

/// The public items a module defines: name -> kind, and type or trait -> its public methods.
#[derive(Default)]
struct Items {
    kinds: BTreeMap<String, &'static str>,
    methods: BTreeMap<String, BTreeSet<String>>,
}

impl Crate {
    pub(crate) fn public_api(&self, crate_name: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        // Inherent impls may sit in any module of the crate (a type's loading methods beside the
        // code they need): a type's methods are its own module's plus those of impls in modules
        // that define no type of that name.
        let all: Vec<Items> = self.modules.values().map(|m| items(&m.code)).collect();
        let mut reachable = vec![Vec::<String>::new()];
        while let Some(at) = reachable.pop() {
            let Some(m) = self.modules.get(&at) else { continue };
            let prefix: String =
                std::iter::once(crate_name.to_string()).chain(at.iter().cloned()).collect::<Vec<_>>().join("::");
            for (child, public) in &m.children {
                if *public {
                    let mut c = at.clone();
                    c.push(child.clone());
                    out.insert(format!("{prefix}::{child} mod"));
                    reachable.push(c);
                }
            }
            let here = items(&m.code);
            list(&prefix, None, &here, &all, &mut out);
            for u in m.uses.iter().filter(|u| u.public) {
                let original = u.path.last().cloned().unwrap_or_default();
                let defined = self.resolve_use(&at, &u.path).and_then(|d| self.modules.get(&d));
                match defined {
                    Some(d) if !u.glob && items(&d.code).kinds.contains_key(&original) => {
                        let there = items(&d.code);
                        list(&prefix, Some((&original, &u.name)), &there, &all, &mut out);
                    }
                    _ if u.glob => {
                        out.insert(format!("{prefix}::* = use {}::*", u.path.join("::")));
                    }
                    _ => {
                        out.insert(format!("{prefix}::{} = use {}", u.name, u.path.join("::")));
                    }
                }
            }
        }
        out
    }
}

/// Lines for every item of `items` (or only `original`, listed as `name`), with its methods
/// (from `items` and from the modules of `all` that define no item of that name).
fn list(prefix: &str, only: Option<(&String, &String)>, items: &Items, all: &[Items], out: &mut BTreeSet<String>) {
    for (name, kind) in &items.kinds {
        let shown = match only {
            Some((original, _)) if original != name => continue,
            Some((_, alias)) => alias,
            None => name,
        };
        out.insert(format!("{prefix}::{shown} {kind}"));
        let elsewhere = all.iter().filter(|m| !m.kinds.contains_key(name)).flat_map(|m| m.methods.get(name));
        for method in items.methods.get(name).into_iter().chain(elsewhere).flatten() {
            out.insert(format!("{prefix}::{shown}::{method} fn"));
        }
    }
}

/// What a depth-1 `fn` belongs to: a public trait (every method is public) or an inherent impl
/// (only its `pub fn`s are).
enum Block {
    Trait(String),
    Impl(String),
}

/// Public items at depth 0, and the methods of public traits and inherent impls at depth 1.
fn items(code: &[String]) -> Items {
    let mut found = Items::default();
    let mut depth = 0i32;
    let mut block: Option<Block> = None;
    let mut header = String::new();
    for line in code {
        if depth == 0 {
            let (public, rest) = strip_qualifiers(line);
            if !header.is_empty() || rest.starts_with("impl ") || rest.starts_with("impl<") {
                header.push_str(rest.trim());
                header.push(' ');
                if line.contains('{') || line.trim_end().ends_with(';') {
                    block = impl_type(&header).map(Block::Impl);
                    header.clear();
                }
            } else if let Some((kind, name)) = item_def(line) {
                if public && kind != "mod" && kind != "macro_rules!" {
                    found.kinds.insert(name.clone(), kind);
                }
                block = (public && kind == "trait").then_some(Block::Trait(name));
            }
        } else if depth == 1 {
            let (public, _) = strip_qualifiers(line);
            if let (Some(("fn", name)), Some(b)) = (item_def(line), &block) {
                let owner = match b {
                    Block::Trait(owner) => Some(owner),
                    Block::Impl(owner) if public => Some(owner),
                    Block::Impl(_) => None,
                };
                if let Some(owner) = owner {
                    found.methods.entry(owner.clone()).or_default().insert(name);
                }
            }
        }
        for ch in line.chars() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
        }
    }
    found
}

/// The type an inherent impl is for (`impl<T> Foo<T> where … {` -> `Foo`); `None` for trait impls.
fn impl_type(header: &str) -> Option<String> {
    if header.contains(" for ") {
        return None;
    }
    let mut t = header.trim_start_matches("impl");
    if t.starts_with('<') {
        let mut depth = 0;
        let mut end = 0;
        for (i, c) in t.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = i + 1;
                break;
            }
        }
        t = &t[end..];
    }
    let name: String = t.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
    let name = name.rsplit("::").next().unwrap_or("").to_string();
    (!name.is_empty()).then_some(name)
}
