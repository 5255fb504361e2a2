//! The import graph of a crate at file level: one node per source file
//! (its module path), an edge for every `use` and every path in code
//! (`crate::`, `super::`, `self::`, a child module's name) to the file that
//! defines what it names. A name a module re-exports (`pub use x::Y`) is
//! followed to the file it comes from; the re-export itself is an edge only
//! when the re-exporting file's own code uses the name.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use super::lexer::{blank, without_tests};

/// A module path from the crate root (`["conditional", "entry"]`).
pub type ModPath = Vec<String>;

/// One source file of a crate, read.
pub struct File {
    /// Blanked code without its test modules.
    pub code: String,
    /// Every `use` of the file (outside its test modules), expanded.
    uses: Vec<Use>,
    /// Child modules it declares (`mod x;` or inline `mod x { … }`).
    children: BTreeSet<String>,
}

/// One leaf of a use tree: `use a::b::{c as d}` is `["a", "b", "c"]` as `d`.
struct Use {
    path: Vec<String>,
    alias: String,
    public: bool,
}

/// A crate's files by module path, test files left out.
pub struct Crate {
    pub files: BTreeMap<ModPath, File>,
}

impl Crate {
    /// Reads the crate whose root file (`lib.rs` or `main.rs`) is in `src`.
    pub fn read(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut test_files = BTreeSet::new();
        for path in super::rust_files(src) {
            let Some(module) = module_path(src, &path) else {
                continue;
            };
            let (code, tests) = without_tests(&blank(&fs::read_to_string(&path).expect("read")));
            for t in tests {
                let mut m = module.clone();
                m.push(t);
                test_files.insert(m);
            }
            let uses = use_statements(&code);
            let children = declared_modules(&code);
            files.insert(
                module,
                File {
                    code,
                    uses,
                    children,
                },
            );
        }
        // A test module's own children are tests too.
        files.retain(|m, _| !test_files.iter().any(|t| m.starts_with(t)));
        Crate { files }
    }

    /// Edges from each file to the files it imports.
    pub fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut edges = BTreeMap::new();
        for (module, file) in &self.files {
            let mut to = BTreeSet::new();
            let code_only = code_outside_uses(&file.code);
            for u in &file.uses {
                if u.public && !mentions(&code_only, &u.alias) {
                    continue;
                }
                if let Some(target) = self.resolve(module, &u.path) {
                    to.insert(target);
                }
            }
            for path in code_paths(&code_only, &file.children) {
                if let Some(target) = self.resolve(module, &path) {
                    to.insert(target);
                }
            }
            to.remove(module);
            edges.insert(module.clone(), to);
        }
        edges
    }

    /// The file `path`, written in `module`, names; `None` outside the crate.
    fn resolve(&self, module: &ModPath, path: &[String]) -> Option<ModPath> {
        let absolute = self.absolute(module, path)?;
        self.follow(absolute, 0)
    }

    /// `path` from the crate root.
    fn absolute(&self, module: &ModPath, path: &[String]) -> Option<Vec<String>> {
        let first = path.first()?;
        let mut out = match first.as_str() {
            "crate" => Vec::new(),
            "self" => module.clone(),
            "super" => {
                let mut m = module.clone();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    m.pop()?;
                    rest = &rest[1..];
                }
                m.extend(rest.iter().cloned());
                return Some(m);
            }
            child if self.files.get(module)?.children.contains(child) => {
                let mut m = module.clone();
                m.push(child.to_string());
                m.extend(path[1..].iter().cloned());
                return Some(m);
            }
            _ => return None,
        };
        out.extend(path[1..].iter().cloned());
        Some(out)
    }

    /// The file that defines what `absolute` names: its longest prefix that
    /// is a file, through that file's re-export of the next name.
    fn follow(&self, absolute: Vec<String>, depth: usize) -> Option<ModPath> {
        let at = (0..=absolute.len())
            .rev()
            .find(|&n| self.files.contains_key(&absolute[..n]))?;
        let module = absolute[..at].to_vec();
        let Some(name) = absolute.get(at).filter(|_| depth < 16) else {
            return Some(module);
        };
        let file = &self.files[&module];
        let reexport = file.uses.iter().find(|u| u.public && &u.alias == name);
        match reexport.and_then(|u| self.absolute(&module, &u.path)) {
            Some(mut target) => {
                target.extend(absolute[at + 1..].iter().cloned());
                self.follow(target, depth + 1).or(Some(module))
            }
            None => Some(module),
        }
    }
}

/// The module path of a file of `src` (`a/b.rs` is `a::b`, the root is
/// empty); `None` for a file of tests.
fn module_path(src: &Path, file: &Path) -> Option<ModPath> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.iter().any(|p| p == "tests" || p == "tests.rs") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    let root = parts.is_empty() && (stem == "lib" || stem == "main");
    if !root && stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// Every `use …;` of `code`, its tree expanded into leaves.
fn use_statements(code: &str) -> Vec<Use> {
    let mut out = Vec::new();
    for (start, end) in use_spans(code) {
        let before = code[..start].trim_end();
        let tail = &before[before.len().saturating_sub(16)..];
        let public = before.ends_with("pub") || tail.ends_with(')') && tail.contains("pub(");
        let tree = tidy(&code[start + 4..end]);
        expand(&tree, &mut Vec::new(), public, &mut out);
    }
    out
}

/// A use tree with whitespace only where it separates words (`a as b`).
fn tidy(tree: &str) -> String {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut out = words.join(" ");
    for sep in ["::", "{", "}", ","] {
        out = out
            .replace(&format!(" {sep}"), sep)
            .replace(&format!("{sep} "), sep);
    }
    out
}

/// The byte ranges `use …;` of `code` (from `use` to before the `;`).
fn use_spans(code: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("use ").map(|i| from + i) {
        from = i + 4;
        let word_start = i == 0 || !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        if !word_start {
            continue;
        }
        let end = code[i..].find(';').map_or(code.len(), |n| i + n);
        out.push((i, end));
        from = end;
    }
    out
}

/// Leaves of the use tree `tree` (whitespace removed) under `prefix`.
fn expand(tree: &str, prefix: &mut Vec<String>, public: bool, out: &mut Vec<Use>) {
    if let Some(open) = tree.find('{') {
        let head = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let n = prefix.len();
        prefix.extend(
            head.split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
        for part in split_top(inner) {
            expand(part, prefix, public, out);
        }
        prefix.truncate(n);
        return;
    }
    let (path, alias) = tree.split_once(" as ").unwrap_or((tree, ""));
    let mut full = prefix.clone();
    full.extend(
        path.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    );
    if full.last().is_some_and(|s| s == "self") {
        full.pop();
    }
    let alias = if alias.is_empty() {
        full.last().cloned().unwrap_or_default()
    } else {
        alias.to_string()
    };
    if !full.is_empty() && alias != "*" {
        out.push(Use {
            path: full,
            alias,
            public,
        });
    }
}

/// `inner` split at its top-level commas.
fn split_top(inner: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&inner[start..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// `code` with its `use` statements blanked.
fn code_outside_uses(code: &str) -> String {
    let mut out = code.to_string();
    for (start, end) in use_spans(code) {
        let blanked: String = code[start..end]
            .chars()
            .map(|c| if c == '\n' { c } else { ' ' })
            .collect();
        out.replace_range(start..end, &blanked);
    }
    out
}

/// Whether `name` appears in `code` as a whole word.
fn mentions(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + name.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

/// Paths in code that start with `crate`, `self`, `super` or a child
/// module's name: `super::x::f()` gives `["super", "x", "f"]`.
fn code_paths(code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i] as char;
        if !(c.is_ascii_alphabetic() || c == '_') || (i > 0 && is_path_char(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < bytes.len() && (is_ident(bytes[end]) || code[end..].starts_with("::")) {
            end += if code[end..].starts_with("::") { 2 } else { 1 };
        }
        let path: Vec<String> = code[i..end]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let starts = path.first().is_some_and(|f| {
            ["crate", "self", "super"].contains(&f.as_str()) || children.contains(f)
        });
        if path.len() > 1 && starts {
            out.push(path);
        }
        i = end.max(i + 1);
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// A byte that continues a path: an identifier's, or the `:` of `::`.
fn is_path_char(b: u8) -> bool {
    is_ident(b) || b == b':'
}

/// Child modules `code` declares: `mod x;` or `mod x {`.
fn declared_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("mod ") {
        if i > 0 && is_ident(code.as_bytes()[i - 1]) {
            continue;
        }
        let name: String = code[i + 4..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}
