//! `mannerly config show`: the effective configuration as TOML, each value
//! commented with where it came from. The output is itself a valid config file.

use std::collections::BTreeMap;
use std::fmt::Write;

use toml::Value;

use super::layers::dotted;
use super::Source;

/// Renders `values` (leaf path → value, source) as TOML with a comment per line.
pub fn render(values: &BTreeMap<Vec<String>, (Value, Source)>, header: &str) -> String {
    let mut out = String::new();
    for line in header.lines() {
        let _ = writeln!(out, "# {line}");
    }
    // Group leaves by their table; top-level keys first (TOML needs them
    // before any [table] header).
    let mut tables: BTreeMap<Vec<String>, Vec<(&String, &Value, &Source)>> = BTreeMap::new();
    for (path, (value, source)) in values {
        if let Some((key, table)) = path.split_last() {
            tables
                .entry(table.to_vec())
                .or_default()
                .push((key, value, source));
        }
    }
    for (table, keys) in &tables {
        if !table.is_empty() {
            let _ = writeln!(out, "\n[{}]", dotted(table));
        }
        for (key, value, source) in keys {
            let _ = writeln!(
                out,
                "{} = {value}  # {source}",
                dotted(std::slice::from_ref(*key))
            );
        }
    }
    out
}
