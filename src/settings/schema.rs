//! The schema every layer is read against: the embedded defaults (which
//! are also the list of keys), the variables that are no keys, and how a
//! key's path is written and walked. A leaf: the layers, the suggestions
//! and the rendering all read it.

use toml::{Table, Value};

/// The documented defaults, compiled in so `mannerly run` needs no file.
pub const EMBEDDED: &str = include_str!("../../config/mannerly.toml");

/// Variables that are options of the command, not config keys.
pub const NOT_KEYS: &[&str] = &["MANNERLY_CONFIG", "MANNERLY_LOG", "MANNERLY_LOG_FORMAT"];

/// `["upstream", "resolve", "a.test:443"]` is `upstream.resolve."a.test:443"`.
pub fn dotted(path: &[String]) -> String {
    path.iter()
        .map(|p| {
            if !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                p.clone()
            } else {
                Value::String(p.clone()).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Every non-table value with its path.
pub fn leaves(table: &Table) -> Vec<(Vec<String>, &Value)> {
    fn walk<'a>(t: &'a Table, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, &'a Value)>) {
        for (k, v) in t {
            prefix.push(k.clone());
            match v {
                Value::Table(inner) => walk(inner, prefix, out),
                v => out.push((prefix.clone(), v)),
            }
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    walk(table, &mut Vec::new(), &mut out);
    out
}
