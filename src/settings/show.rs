//! `mannerly config show`: the effective configuration as TOML, each value
//! commented with where it came from. The output is itself a valid config file.

use std::collections::BTreeMap;
use std::fmt::Write;

use toml::Value;

use super::schema::dotted;
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
            let value = redacted(
                &[table.as_slice(), std::slice::from_ref(*key)].concat(),
                value,
            );
            let _ = writeln!(
                out,
                "{} = {value}  # {source}",
                dotted(std::slice::from_ref(*key))
            );
        }
    }
    out
}

/// `upstream.proxy` may carry the parent proxy's password: it is shown as
/// `user:***@host`, here and in configuration errors.
pub fn redacted(path: &[String], value: &Value) -> Value {
    match (path, value) {
        ([table, key], Value::String(url)) if table == "upstream" && key == "proxy" => {
            Value::String(redact_url(url))
        }
        _ => value.clone(),
    }
}

fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod redact_tests {
    use super::*;

    #[test]
    fn the_parent_proxy_password_is_never_shown() {
        let path = vec!["upstream".to_string(), "proxy".to_string()];
        let shown = redacted(
            &path,
            &Value::String("http://crawl:s3cret@egress:3128".into()),
        );
        assert_eq!(shown.as_str(), Some("http://crawl:***@egress:3128"));
        let plain = Value::String("http://egress:3128".into());
        assert_eq!(redacted(&path, &plain), plain);
    }
}
