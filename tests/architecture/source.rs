//! What the checks read from a crate's source: its module tree (one file per module), each
//! module's item definitions and the paths it names (`use` lines and inline `crate::`/`super::`
//! paths), without compiling it. A text reader, not a Rust parser: it knows the shapes this
//! workspace writes (rustfmt'd code), which is all the checks need.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One module backed by a file (inline `mod x { … }` blocks other than tests are read as part of
/// their file).
#[derive(Debug, Default)]
pub(crate) struct Module {
    pub(crate) file: PathBuf,
    /// Lines of the file with comments, strings and `#[cfg(test)]` blocks blanked out.
    pub(crate) code: Vec<String>,
    /// Names defined here (items and child modules).
    pub(crate) defines: BTreeSet<String>,
    /// Child modules declared here, and whether they are `pub`.
    pub(crate) children: BTreeMap<String, bool>,
    /// `use` declarations: local name -> full path (segments), and whether re-exported (`pub`).
    pub(crate) uses: Vec<Use>,
    /// Inline paths that start with `crate::`, `super::` or `self::`.
    pub(crate) paths: Vec<Vec<String>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Use {
    pub(crate) name: String,
    pub(crate) path: Vec<String>,
    pub(crate) public: bool,
    /// Any `pub…` visibility: the module hands the name on (a folder's face).
    pub(crate) reexport: bool,
    pub(crate) glob: bool,
}

/// A crate: its modules by path (`[]` is the root, `["lease", "driver"]` a nested one).
pub(crate) struct Crate {
    pub(crate) name: String,
    pub(crate) modules: BTreeMap<Vec<String>, Module>,
}

impl Crate {
    /// Reads the crate whose root file is `root` (src/lib.rs or src/main.rs).
    pub(crate) fn read(name: &str, root: &Path) -> Crate {
        let mut modules = BTreeMap::new();
        read_module(Vec::new(), root, true, &mut modules);
        Crate { name: name.to_string(), modules }
    }
}

fn read_module(at: Vec<String>, file: &Path, owns_dir: bool, out: &mut BTreeMap<Vec<String>, Module>) {
    let Ok(text) = std::fs::read_to_string(file) else { return };
    let code = blank(&text);
    let mut module = Module { file: file.to_path_buf(), ..Default::default() };
    scan(&code, &mut module);
    module.code = code;
    let dir = if owns_dir { file.parent().unwrap().to_path_buf() } else { file.with_extension("") };
    for (inline, child, path_attr) in child_decls(&module.code, &text) {
        let mut sub = at.clone();
        sub.extend(inline.iter().cloned());
        let here = inline.iter().fold(dir.clone(), |d, m| d.join(m));
        let path = match path_attr {
            Some(p) => file.parent().unwrap().join(p),
            None => {
                let flat = here.join(format!("{child}.rs"));
                if flat.exists() {
                    flat
                } else {
                    here.join(&child).join("mod.rs")
                }
            }
        };
        // an inline `mod cli { mod run; }` is a module of its own, in its parent's file
        for k in 1..=inline.len() {
            let mut p = at.clone();
            p.extend(inline[..k].iter().cloned());
            let entry = out.entry(p).or_insert_with(|| Module { file: file.to_path_buf(), ..Default::default() });
            if let Some(next) = inline.get(k) {
                entry.defines.insert(next.clone());
            }
            if k == inline.len() {
                entry.defines.insert(child.clone());
            }
        }
        sub.push(child);
        let owns = path.file_name().is_some_and(|n| n == "mod.rs");
        read_module(sub, &path, owns, out);
    }
    out.insert(at, module);
}

/// `mod x;` declarations outside tests: (the inline modules they sit in, x, a `#[path]` if any).
fn child_decls(code: &[String], text: &str) -> Vec<(Vec<String>, String, Option<String>)> {
    let raw: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut path_attr = None;
    let mut inline: Vec<(String, i32)> = Vec::new();
    let mut depth = 0i32;
    for (i, line) in code.iter().enumerate() {
        let t = line.trim();
        if let Some(rest) = raw.get(i).and_then(|r| r.trim().strip_prefix("#[path = \"")) {
            path_attr = rest.split('"').next().map(str::to_string);
        }
        let (_, decl) = strip_qualifiers(t);
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            let inside: Vec<String> = inline.iter().map(|(m, _)| m.clone()).collect();
            found.push((inside, name.trim().to_string(), path_attr.take()));
        } else if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix('{')) {
            inline.push((name.trim().to_string(), depth + 1));
        } else if !t.starts_with("#[") && !t.is_empty() {
            path_attr = None;
        }
        for ch in t.chars() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    while inline.last().is_some_and(|(_, d)| *d > depth) {
                        inline.pop();
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// The code with comments and string/char literals blanked (same line count), and the bodies
/// of `#[cfg(test)]` items removed: tests may import what they like.
pub(crate) fn blank(text: &str) -> Vec<String> {
    let mut out = String::with_capacity(text.len());
    let b: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && b.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                    continue;
                }
                if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                    continue;
                }
                if b[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            continue;
        }
        if c == 'r'
            && (b.get(i + 1) == Some(&'"') || b.get(i + 1) == Some(&'#'))
            && !ident_char(b.get(i.wrapping_sub(1)))
        {
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) == Some(&'"') {
                out.push_str("\"\"");
                j += 1;
                loop {
                    if j >= b.len() {
                        break;
                    }
                    if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    if b[j] == '\n' {
                        out.push('\n');
                    }
                    j += 1;
                }
                i = j;
                continue;
            }
        }
        if c == '"' {
            out.push_str("\"\"");
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if b.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            continue;
        }
        if c == '\'' {
            // a char literal ('x', '\n', '\u{..}'), not a lifetime ('a)
            let close = if b.get(i + 1) == Some(&'\\') {
                (i + 2..b.len().min(i + 12)).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            if let Some(j) = close {
                out.push_str("' '");
                i = j + 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    drop_test_blocks(out.lines().map(str::to_string).collect())
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

fn drop_test_blocks(mut lines: Vec<String>) -> Vec<String> {
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == "#[cfg(test)]" {
            let end = item_end(&lines, i);
            for l in &mut lines[i..=end] {
                l.clear();
            }
            i = end;
        }
        i += 1;
    }
    lines
}

/// The index of the line that ends the item starting at line `start`: where its braces close,
/// or, for an item without a body, the first line ending in `;`.
pub(crate) fn item_end(lines: &[String], start: usize) -> usize {
    let (mut depth, mut started) = (0i32, false);
    for (j, l) in lines.iter().enumerate().skip(start) {
        for ch in l.chars() {
            match ch {
                '{' => {
                    depth += 1;
                    started = true
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        if (started && depth <= 0) || (!started && l.trim_end().ends_with(';')) {
            return j;
        }
    }
    lines.len().saturating_sub(1)
}

const ITEM_KINDS: [&str; 10] =
    ["fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod", "macro_rules!"];

/// Strips leading visibility and qualifiers; answers (is `pub` without restriction, the rest).
pub(crate) fn strip_qualifiers(line: &str) -> (bool, &str) {
    let mut t = line.trim_start();
    let mut public = false;
    loop {
        if let Some(r) = t.strip_prefix("pub(") {
            match r.split_once(") ") {
                Some((_, rest)) => t = rest,
                None => return (public, t),
            }
        } else if let Some(r) = t.strip_prefix("pub ") {
            public = true;
            t = r;
        } else if let Some(r) = ["async ", "unsafe ", "default ", "extern \"\" "].iter().find_map(|q| t.strip_prefix(q))
        {
            t = r;
        } else if t.starts_with("const fn ") {
            t = &t[6..];
        } else {
            return (public, t);
        }
    }
}

/// The item a line defines at the top of a module: (kind, name).
pub(crate) fn item_def(line: &str) -> Option<(&'static str, String)> {
    let (_, rest) = strip_qualifiers(line);
    for kind in ITEM_KINDS {
        if let Some(r) = rest.strip_prefix(kind) {
            if kind != "macro_rules!" && !r.starts_with(' ') {
                continue;
            }
            let name: String = r.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                return Some((kind, name));
            }
        }
    }
    None
}

fn scan(code: &[String], m: &mut Module) {
    let mut depth = 0i32;
    let mut pending_use: Option<(bool, bool, String)> = None;
    for line in code {
        if let Some((public, reexport, text)) = pending_use.as_mut() {
            text.push_str(line.trim());
            if line.contains(';') {
                let (p, r, t) = (*public, *reexport, std::mem::take(text));
                pending_use = None;
                expand_use(&t, p, r, &mut m.uses);
            }
        } else if depth == 0 {
            let (public, rest) = strip_qualifiers(line);
            if let Some(u) = rest.strip_prefix("use ") {
                let reexport = line.trim_start().starts_with("pub");
                if u.contains(';') {
                    expand_use(u, public, reexport, &mut m.uses);
                } else {
                    pending_use = Some((public, reexport, u.to_string()));
                }
            } else if let Some((kind, name)) = item_def(line) {
                if kind == "mod" && rest.trim_end().ends_with(';') {
                    m.children.insert(name.clone(), public);
                }
                m.defines.insert(name);
            }
        }
        collect_paths(line, &mut m.paths);
        for ch in line.chars() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
        }
    }
}

/// `a::b::{c, d::e as f, g::*}` into one `Use` per leaf.
fn expand_use(text: &str, public: bool, reexport: bool, out: &mut Vec<Use>) {
    let text: String =
        text.split(';').next().unwrap_or("").chars().filter(|c| !c.is_whitespace() || *c == ' ').collect();
    let at = out.len();
    expand(&[], text.trim(), public, out);
    for u in &mut out[at..] {
        u.reexport = reexport;
    }
}

fn expand(prefix: &[String], tree: &str, public: bool, out: &mut Vec<Use>) {
    let tree = tree.trim().trim_start_matches("::");
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> =
            tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
        let mut p = prefix.to_vec();
        p.extend(head);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        for part in split_top(inner) {
            expand(&p, part, public, out);
        }
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim())),
        None => (tree, None),
    };
    let mut p = prefix.to_vec();
    p.extend(path.split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()));
    let glob = p.last().is_some_and(|l| l == "*");
    if glob {
        p.pop();
    }
    let last = p.last().cloned().unwrap_or_default();
    let name = match (alias, last.as_str()) {
        (Some(a), _) => a.to_string(),
        (None, "self") => {
            p.pop();
            p.last().cloned().unwrap_or_default()
        }
        _ => last,
    };
    if p.last().is_some_and(|l| l == "self") {
        p.pop();
    }
    out.push(Use { name, path: p, public, reexport: false, glob });
}

fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn collect_paths(line: &str, out: &mut Vec<Vec<String>>) {
    let t = line.trim_start();
    if t.starts_with("use ") || t.starts_with("pub use ") || t.starts_with("pub(crate) use ") {
        return;
    }
    // Every `a::b::c` token; the resolver drops those that do not start inside the crate
    // (`crate::`, `super::`, `self::` or a child module's name).
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts = (chars[i].is_alphabetic() || chars[i] == '_')
            && (i == 0 || !(ident_char(Some(&chars[i - 1])) || chars[i - 1] == ':' || chars[i - 1] == '$'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && (ident_char(Some(&chars[j])) || chars[j] == ':') {
            j += 1;
        }
        let token: String = chars[i..j].iter().collect();
        if token.contains("::") {
            out.push(token.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect());
        }
        i = j;
    }
}
