//! The README and the docs pages link to files that exist, so a page
//! moved or renamed is not left dangling.

use std::path::Path;

/// Relative link targets of a Markdown text: `](target)` outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with('#') {
                out.push(target.split('#').next().unwrap_or("").to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "md") {
            pages.push(entry.path());
        }
    }
    let mut dangling = Vec::new();
    let mut seen = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let dir = page.parent().unwrap();
        for target in links(&text) {
            seen += 1;
            if !dir.join(&target).exists() {
                dangling.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(seen > 10, "read only {seen} links");
    assert!(
        dangling.is_empty(),
        "links to nothing:\n{}",
        dangling.join("\n")
    );
}

#[test]
fn links_in_code_blocks_and_absolute_urls_are_left_alone() {
    let text = "see [a](docs/a.md) and [b](https://x.org/)\n```\n[c](nope.md)\n```\n[d](e.md#part)";
    assert_eq!(
        links(text),
        vec!["docs/a.md".to_string(), "e.md".to_string()]
    );
}
