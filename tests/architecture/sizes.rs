//! Functions longer than the alarm (100 lines, signature to closing brace, tests excluded).

use crate::source::{item_def, item_end, Crate};

pub(crate) const FUNCTION_ALARM: usize = 100;

impl Crate {
    /// `file:line name (n lines)` for every function over `limit` lines.
    pub(crate) fn long_functions(&self, limit: usize) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for m in self.modules.values() {
            let code = &m.code;
            for (i, line) in code.iter().enumerate() {
                let Some(("fn", name)) = item_def(line) else { continue };
                let end = item_end(code, i);
                let lines = end - i + 1;
                if lines > limit {
                    found.push((
                        format!("{} {name}", short(&m.file)),
                        format!("{}:{} {name} ({lines} lines)", m.file.display(), i + 1),
                    ));
                }
            }
        }
        found
    }
}

/// A file's path from the workspace root (stable across checkouts).
pub(crate) fn short(file: &std::path::Path) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    file.strip_prefix(root).unwrap_or(file).display().to_string()
}
