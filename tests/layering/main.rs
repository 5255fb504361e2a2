//! The crates' folders stay a one-way graph a newcomer can draw: no import
//! circle between the top-level modules of policy, state or proxy, none
//! between any two files of a crate or of the binary (re-exports followed
//! to the file that defines the name), no source file (tests aside) past
//! 700 lines and no function (tests aside) past 80. Read from the source,
//! so a change that breaks one fails here with the files named.

mod files;
mod lexer;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;
const MAX_FN_LINES: usize = 80;

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).expect("read source dir").flatten() {
            let p = entry.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A file's text without its inline `#[cfg(test)] mod tests { … }`, or
/// `None` for a file of tests. A `mod tests;` that only names a file cuts
/// nothing: the code after it is the module's too.
fn non_test_text(path: &Path) -> Option<String> {
    if path.file_name().is_some_and(|n| n == "tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
    {
        return None;
    }
    let mut text = fs::read_to_string(path).expect("read source");
    while let Some(at) = text.find("#[cfg(test)]\nmod tests {") {
        let open = at + text[at..].find('{').unwrap_or(0);
        let end = lexer::matching_brace(&text, open);
        text.replace_range(at..end, "");
    }
    Some(text)
}

/// Names the crate root re-exports (`pub use m::{A, B}` in lib.rs), by
/// the top-level module they come from: `crate::A` is an import of `m`.
fn root_exports(src: &Path, mods: &BTreeSet<String>) -> BTreeMap<String, String> {
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let mut out = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(at) = stmt.find("use ") else {
            continue;
        };
        let (before, path) = (&stmt[..at], stmt[at + 4..].trim());
        if !before.trim_end().ends_with("pub") && !before.contains("pub(crate)") {
            continue;
        }
        let path = path.strip_prefix("crate::").unwrap_or(path);
        let module: String = path
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !mods.contains(&module) {
            continue;
        }
        let names = match (path.find('{'), path.rfind('}')) {
            (Some(o), Some(c)) => path[o + 1..c].to_string(),
            _ => path.rsplit("::").next().unwrap_or("").to_string(),
        };
        for n in names.split(',') {
            let n = n.rsplit("::").next().unwrap_or("").trim();
            let n = n.rsplit(" as ").next().unwrap_or(n).trim();
            if !n.is_empty() && n != "self" {
                out.insert(n.to_string(), module.clone());
            }
        }
    }
    out
}

/// The top-level module a file of `src` belongs to (`None` for lib.rs).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// Top-level modules `text` imports: `crate::m…` for a module `m` of
/// `mods`, or `crate::Name` for a name the root re-exports from one.
fn uses(
    text: &str,
    mods: &BTreeSet<String>,
    exports: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let mut names = Vec::new();
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            names.extend(group[..end].split(',').map(|s| s.trim().to_string()));
        } else {
            names.push(rest.to_string());
        }
        for n in names {
            let ident: String = n
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if mods.contains(&ident) {
                found.insert(ident);
            } else if let Some(m) = exports.get(&ident) {
                found.insert(m.clone());
            }
        }
    }
    found
}

/// Import edges between the top-level modules of the crate at `src`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let mods: BTreeSet<String> = files.iter().filter_map(|f| top_module(src, f)).collect();
    let exports = root_exports(src, &mods);
    let mut edges: BTreeMap<String, BTreeSet<String>> =
        mods.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for f in &files {
        let (Some(m), Some(text)) = (top_module(src, f), non_test_text(f)) else {
            continue;
        };
        let mut found = uses(&text, &mods, &exports);
        found.remove(&m);
        edges.entry(m).or_default().extend(found);
    }
    edges
}

/// A circle through `start`, if there is one.
fn circle_from(edges: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == start {
                let mut c = path.clone();
                c.push(start.to_string());
                return Some(c);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push((next.clone(), p));
            }
        }
    }
    None
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates")
        .join(name)
        .join("src")
}

#[test]
fn no_import_circle_between_top_level_modules() {
    let mut circles = Vec::new();
    for name in ["policy", "state", "proxy"] {
        let edges = graph(&crate_src(name));
        assert!(edges.len() >= 3, "{name}: read no modules");
        for m in edges.keys() {
            if let Some(c) = circle_from(&edges, m) {
                circles.push(format!("crates/{name}: {}", c.join(" -> ")));
                break;
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_checker_finds_a_circle_it_is_shown() {
    let mods: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let mut edges = BTreeMap::new();
    let none = BTreeMap::new();
    edges.insert(
        "a".to_string(),
        uses("use crate::{b::X, other};", &mods, &none),
    );
    edges.insert(
        "b".to_string(),
        uses("fn f() { crate::c::g() }", &mods, &none),
    );
    edges.insert("c".to_string(), uses("use crate::a;", &mods, &none));
    assert_eq!(
        circle_from(&edges, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    edges.insert("c".to_string(), BTreeSet::new());
    assert_eq!(circle_from(&edges, "a"), None);
}

#[test]
fn no_source_file_past_the_line_limit() {
    let mut long = Vec::new();
    let roots = ["policy", "state", "proxy"].map(crate_src);
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for root in roots.iter().chain([&bin]) {
        for f in rust_files(root) {
            if let Some(text) = non_test_text(&f) {
                let n = text.lines().count();
                if n > MAX_LINES {
                    long.push(format!("{}: {n} lines", f.display()));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The graph is the real one: code after a `mod tests;` that names a file
/// counts (an inline test module does not), and a name the crate root
/// re-exports counts as an import of the module it comes from.
#[test]
fn the_checker_reads_past_a_tests_file_and_follows_root_re_exports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\npub use a::{Thing, other::Other as O};\npub(crate) use b::Helper;\n",
    )
    .unwrap();
    fs::write(
        src.join("a.rs"),
        "#[cfg(test)]\nmod tests;\n\nuse crate::Helper;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n",
    )
    .unwrap();
    fs::write(
        src.join("b.rs"),
        "pub(crate) fn f() -> crate::Thing { todo!() }\n",
    )
    .unwrap();
    fs::write(src.join("c.rs"), "").unwrap();
    let edges = graph(src);
    assert_eq!(edges["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(edges["b"], BTreeSet::from(["a".to_string()]));
    assert!(circle_from(&edges, "a").is_some());
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where the crates' and the binary's sources are.
fn source_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["policy", "state", "proxy", "test-support"]
        .map(crate_src)
        .into();
    roots.push(workspace().join("src"));
    roots
}

/// Every strongly connected group of more than one file, by Tarjan's
/// algorithm (iterative: no recursion depth to mind).
fn file_circles(edges: &BTreeMap<files::ModPath, BTreeSet<files::ModPath>>) -> Vec<Vec<String>> {
    let names: Vec<&files::ModPath> = edges.keys().collect();
    let index_of: BTreeMap<&files::ModPath, usize> =
        names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let next: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            edges[*n]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let n = names.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let (mut on_stack, mut stack, mut counter) = (vec![false; n], Vec::new(), 0);
    let mut groups = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if *child == 0 && index[v] == usize::MAX {
                index[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = next[v].get(*child) {
                *child += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut group = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    group.push(names[w].join("::"));
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    groups.push(group);
                }
            }
        }
    }
    groups
}

/// Circles the file-level check found when it was written (issue 48) and
/// that are not untied yet: each is a parent module and the children it
/// reaches into, or a folder in files another change was moving. The list
/// only shrinks: a circle not in it fails, and so does one in it that is
/// gone (take it out).
const KNOWN_CIRCLES: &[&str] = &[];

/// Functions over the limit when the check was written, kept to the same
/// rule as [`KNOWN_CIRCLES`].
const KNOWN_LONG: &[&str] = &[];

/// What was `found` beyond `known`, and what of `known` is no longer found.
fn against_known(found: &[String], known: &[&str]) -> (Vec<String>, Vec<String>) {
    let new = found
        .iter()
        .filter(|f| !known.contains(&f.as_str()))
        .cloned()
        .collect();
    let gone = known
        .iter()
        .filter(|k| !found.iter().any(|f| f == *k))
        .map(|k| k.to_string())
        .collect();
    (new, gone)
}

/// `path` from the workspace, as the lists above write it.
fn relative(path: &Path) -> String {
    path.strip_prefix(workspace())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_import_circle_between_files() {
    let mut found = Vec::new();
    for root in source_roots() {
        let krate = files::Crate::read(&root);
        assert!(krate.files.len() >= 3, "{}: read no files", root.display());
        for group in file_circles(&krate.edges()) {
            found.push(format!("{}: {}", relative(&root), group.join(", ")));
        }
    }
    let (new, gone) = against_known(&found, KNOWN_CIRCLES);
    assert!(
        new.is_empty(),
        "files importing each other (each line one circle):\n{}",
        new.join("\n")
    );
    assert!(
        gone.is_empty(),
        "untied, take them out of KNOWN_CIRCLES:\n{}",
        gone.join("\n")
    );
}

/// Functions of `code` (blanked, tests out) longer than `max` lines, from
/// the line of `fn` to the line of its closing brace.
fn long_functions(code: &str, max: usize) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if at > 0 && !code[..at].ends_with(|c: char| c.is_whitespace() || c == '(') {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // A test function outside a test module is known by its attribute.
        let head = &code[..at];
        let attrs = head.lines().rev().take(4).collect::<Vec<_>>().join(" ");
        if name.is_empty() || attrs.contains("test]") || attrs.contains("test(") {
            continue;
        }
        let Some(body) = code[at..].find(['{', ';']).map(|i| at + i) else {
            continue;
        };
        if code.as_bytes()[body] == b';' {
            continue;
        }
        let end = lexer::matching_brace(code, body);
        let lines = code[at..end].lines().count();
        if lines > max {
            out.push((name, lines));
        }
    }
    out
}

#[test]
fn no_function_past_the_length_limit() {
    let mut roots = source_roots();
    roots.push(workspace().join("examples"));
    for name in ["policy", "state", "proxy"] {
        roots.push(workspace().join("crates").join(name).join("examples"));
    }
    let mut long = Vec::new();
    for root in roots.iter().filter(|r| r.is_dir()) {
        for f in rust_files(root) {
            if non_test_text(&f).is_none() {
                continue;
            }
            let text = fs::read_to_string(&f).expect("read");
            let (code, _) = lexer::without_tests(&lexer::blank(&text));
            for (name, n) in long_functions(&code, MAX_FN_LINES) {
                long.push((format!("{}: fn {name}", relative(&f)), n));
            }
        }
    }
    let names: Vec<String> = long.iter().map(|(name, _)| name.clone()).collect();
    let (new, gone) = against_known(&names, KNOWN_LONG);
    let new: Vec<String> = long
        .iter()
        .filter(|(name, _)| new.contains(name))
        .map(|(name, n)| format!("{name}, {n} lines"))
        .collect();
    assert!(
        new.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        new.join("\n")
    );
    assert!(
        gone.is_empty(),
        "now short, take them out of KNOWN_LONG:\n{}",
        gone.join("\n")
    );
}

/// The file-level reading sees what the compiler sees: a `pub use` is
/// followed to the file that defines the name, a grouped and aliased use
/// and a path in code count, code after a `mod tests;` counts, a test
/// module, a comment and a string do not.
#[test]
fn the_file_checker_follows_re_exports_and_reads_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::create_dir(src.join("a")).unwrap();
    let write = |p: &str, text: &str| fs::write(src.join(p), text).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::Thing;\n");
    write(
        "a.rs",
        "mod inner;\npub use inner::Thing;\npub(crate) use inner::{Other as O};\n",
    );
    write("a/inner.rs", "#[cfg(test)]\nmod tests;\n\nuse crate::b::{self, f as g};\npub struct Thing;\npub struct Other;\n");
    write("b.rs", "// crate::c::h\nconst S: &str = \"crate::c::h\";\npub fn f() -> crate::Thing { todo!() }\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n");
    write("c.rs", "pub fn h() { let _ = super::a::O; }\n");
    let krate = files::Crate::read(src);
    let edges = krate.edges();
    let m = |s: &str| {
        s.split("::")
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(edges[&m("a::inner")], BTreeSet::from([m("b")]));
    assert_eq!(
        edges[&m("b")],
        BTreeSet::from([m("a::inner")]),
        "through two re-exports"
    );
    assert_eq!(
        edges[&m("c")],
        BTreeSet::from([m("a::inner")]),
        "an aliased re-export"
    );
    assert_eq!(
        edges[&m("a")],
        BTreeSet::new(),
        "a re-export alone is no import"
    );
    assert_eq!(
        file_circles(&edges),
        vec![vec!["a::inner".to_string(), "b".to_string()]]
    );
}

#[test]
fn the_length_checker_counts_from_fn_to_its_closing_brace() {
    let body = "    let x = \"}\";\n".repeat(79);
    let code = format!("fn long() {{\n{body}}}\nfn short() {{}}\n#[test]\nfn t() {{\n{body}\n}}\n");
    let code = lexer::blank(&code);
    assert_eq!(long_functions(&code, 80), vec![("long".to_string(), 81)]);
    assert!(long_functions(&code, 81).is_empty());
}
