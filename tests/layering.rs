//! The crates' folders stay a one-way graph a newcomer can draw: no import
//! circle between the top-level modules of policy, state or proxy, and no
//! source file (tests aside) past 700 lines. Read from the source, so a
//! change that breaks either fails here with the modules named.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;

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
        let mut depth = 0usize;
        let mut end = text.len();
        for (i, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
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
