//! The import graph of a crate between its module files, and its circles (strongly connected
//! components of more than one file). A name is followed through re-exports to the file that
//! defines it, so `use crate::Lease` ties a file to `lease.rs`, not to `lib.rs`.

use std::collections::{BTreeMap, BTreeSet};

use crate::source::Crate;

pub(crate) type ModPath = Vec<String>;

/// An edge between two siblings (the children of one folder that hold its ends), with the file
/// edge under it and its names.
type SiblingEdge<'a> = (ModPath, ModPath, &'a ModPath, &'a ModPath, &'a BTreeSet<String>);

/// Edges `from -> to` with the names that tie them.
pub(crate) type Edges = BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>;

impl Crate {
    pub(crate) fn edges(&self) -> Edges {
        let mut edges: Edges = BTreeMap::new();
        for (at, m) in &self.modules {
            // A folder's face (`pub use child::Item` in its mod.rs) hands names on; it is not a
            // dependency of the folder on its child, so it does not close a circle.
            let mut named: Vec<(&[String], bool)> = m.uses.iter().map(|u| (u.path.as_slice(), u.reexport)).collect();
            named.extend(m.paths.iter().map(|p| (p.as_slice(), false)));
            for (path, reexport) in named {
                if let Some(to) = self.resolve_from(at, path, 0) {
                    let hands_down = reexport && to.len() > at.len() && to.starts_with(at);
                    if &to != at && !hands_down {
                        let name = path.last().cloned().unwrap_or_default();
                        edges.entry(at.clone()).or_default().entry(to).or_default().insert(name);
                    }
                }
            }
        }
        edges
    }

    /// The module that defines what a `use` of `path` in module `at` names.
    pub(crate) fn resolve_use(&self, at: &ModPath, path: &[String]) -> Option<ModPath> {
        self.resolve_from(at, path, 0)
    }

    /// The module that defines what `path` names, seen from module `at`; `None` for another crate.
    fn resolve_from(&self, at: &ModPath, path: &[String], depth: usize) -> Option<ModPath> {
        let first = path.first()?;
        let (base, rest) = match first.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (at.clone(), &path[1..]),
            "super" => (at.clone(), path),
            _ => {
                let mut child = at.clone();
                child.push(first.clone());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                (at.clone(), path)
            }
        };
        self.resolve(base, rest, depth)
    }

    fn resolve(&self, mut module: ModPath, rest: &[String], depth: usize) -> Option<ModPath> {
        for (i, seg) in rest.iter().enumerate() {
            if seg == "super" {
                module.pop();
                continue;
            }
            if seg == "self" {
                continue;
            }
            let mut child = module.clone();
            child.push(seg.clone());
            if self.modules.contains_key(&child) {
                module = child;
                continue;
            }
            let m = self.modules.get(&module)?;
            if m.defines.contains(seg) || depth > 8 {
                return Some(module);
            }
            if let Some(u) = m.uses.iter().find(|u| !u.glob && &u.name == seg) {
                let mut through = u.path.clone();
                through.extend(rest[i + 1..].iter().cloned());
                return self.resolve_from(&module, &through, depth + 1);
            }
            for u in m.uses.iter().filter(|u| u.glob) {
                let mut through = u.path.clone();
                through.extend(rest[i..].iter().cloned());
                if let Some(found) = self.resolve_from(&module, &through, depth + 1) {
                    let defines = self.modules.get(&found).is_some_and(|f| f.defines.contains(seg));
                    if defines {
                        return Some(found);
                    }
                }
            }
            // Not defined here nor found inside the crate: behind a glob of another crate
            // (`pub use lock_core::*`), or a macro; a module without globs keeps the name.
            return (!m.uses.iter().any(|u| u.glob)).then_some(module);
        }
        Some(module)
    }

    /// Every circle between sibling modules (the children of one folder, each with everything
    /// under it): the siblings in it, and the file edges that tie them with their names. A folder's
    /// own file (`mod.rs`) and its children are not siblings: a parent that dispatches to the
    /// children that implement its trait is the shape of a folder, not a circle.
    pub(crate) fn circles(&self) -> Vec<(String, String)> {
        let edges = self.edges();
        let mut sibling_edges: BTreeMap<ModPath, Vec<SiblingEdge<'_>>> = BTreeMap::new();
        for (from, tos) in &edges {
            for (to, names) in tos {
                let common = from.iter().zip(to.iter()).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue;
                }
                let parent = from[..common].to_vec();
                let a = from[..=common].to_vec();
                let b = to[..=common].to_vec();
                sibling_edges.entry(parent).or_default().push((a, b, from, to, names));
            }
        }
        let mut found = Vec::new();
        for (parent, list) in &sibling_edges {
            let nodes: BTreeSet<&ModPath> = list.iter().flat_map(|(a, b, ..)| [a, b]).collect();
            let nodes: Vec<&ModPath> = nodes.into_iter().collect();
            let index: BTreeMap<&ModPath, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
            let mut adj = vec![Vec::new(); nodes.len()];
            for (a, b, ..) in list {
                adj[index[a]].push(index[b]);
            }
            for scc in tarjan(&adj) {
                if scc.len() < 2 {
                    continue;
                }
                let members: BTreeSet<&ModPath> = scc.iter().map(|&i| nodes[i]).collect();
                let names: Vec<String> = members.iter().map(|m| m.join("::")).collect();
                let key = format!("{}::{}: {}", self.name, parent.join("::"), names.join(", "));
                let mut text = format!("circle of {} sibling modules {key}", members.len());
                for (a, b, from, to, what) in list {
                    if members.contains(a) && members.contains(b) {
                        let what: Vec<&str> = what.iter().map(String::as_str).collect();
                        text.push_str(&format!(
                            "\n  {} -> {}: {}",
                            self.modules[*from].file.display(),
                            self.modules[*to].file.display(),
                            what.join(", ")
                        ));
                    }
                }
                found.push((key, text));
            }
        }
        found
    }
}

/// Tarjan's strongly connected components (iterative enough for a few hundred modules).
fn tarjan(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adj[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(scc);
        }
    }
    let n = adj.len();
    let mut s = State {
        adj,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}
