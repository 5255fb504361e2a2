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

/// A file's text before its `#[cfg(test)] mod tests`, or `None` for a
/// file of tests.
fn non_test_text(path: &Path) -> Option<String> {
    if path.file_name().is_some_and(|n| n == "tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
    {
        return None;
    }
    let text = fs::read_to_string(path).expect("read source");
    let cut = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    Some(text[..cut].to_string())
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

/// `crate::X` names in `text` that are modules of `mods`.
fn uses(text: &str, mods: &BTreeSet<String>) -> BTreeSet<String> {
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
            }
        }
    }
    found
}

/// Import edges between the top-level modules of the crate at `src`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let mods: BTreeSet<String> = files.iter().filter_map(|f| top_module(src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> =
        mods.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for f in &files {
        let (Some(m), Some(text)) = (top_module(src, f), non_test_text(f)) else {
            continue;
        };
        let mut found = uses(&text, &mods);
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
    edges.insert("a".to_string(), uses("use crate::{b::X, other};", &mods));
    edges.insert("b".to_string(), uses("fn f() { crate::c::g() }", &mods));
    edges.insert("c".to_string(), uses("use crate::a;", &mods));
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
