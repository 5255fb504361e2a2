//! The one way tests read the shared conformance cases.
//!
//! The case files live beside the project, not in it
//! (`shared/conformance/` next to the checkout), so a checkout on its own does
//! not have them. [`cases`] looks in `$MANNERLY_CONFORMANCE_DIR`, then in
//! `shared/conformance/` beside each ancestor of this crate, and when the file
//! is nowhere it says which file, where it looked and how to point at it:
//! outside CI the test is skipped with that message, under `CI` it fails.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Where to point when the cases are elsewhere.
const ENV: &str = "MANNERLY_CONFORMANCE_DIR";

/// The parsed cases of `name` (e.g. `robots-google.json`), or `None` when the
/// file is absent and the test should be skipped (never under `CI`).
pub fn cases<T: DeserializeOwned>(name: &str) -> Option<Vec<T>> {
    let tried = candidates(name);
    let Some(path) = tried.iter().find(|p| p.is_file()) else {
        let looked: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
        let msg = format!(
            "conformance file {name} is missing: looked in\n  {}\n\
             set {ENV} to the directory that holds it (the project's shared/conformance/)",
            looked.join("\n  ")
        );
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("SKIP: {msg}");
        return None;
    };
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("conformance file {}: cannot read: {e}", path.display()));
    let cases = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "conformance file {}: not the expected JSON: {e}",
            path.display()
        )
    });
    Some(cases)
}

fn candidates(name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os(ENV) {
        out.push(PathBuf::from(dir).join(name));
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in crate_dir.ancestors() {
        out.push(dir.join("shared").join("conformance").join(name));
    }
    out
}
