//! Loading configuration: the embedded `config/mannerly.toml` (or the file
//! given), then `MANNERLY_*` variables on top, then validation. A key that
//! does not exist is an error naming it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use mannerly_proxy::Config;

/// The documented defaults, compiled in so `mannerly run` needs no file.
pub const EMBEDDED: &str = include_str!("../config/mannerly.toml");

/// Variables that are options of the command, not config keys.
const NOT_KEYS: &[&str] = &["MANNERLY_CONFIG", "MANNERLY_LOG"];

pub fn load(path: Option<&Path>) -> Result<Config> {
    let (text, origin) = match path {
        Some(p) => (
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (EMBEDDED.to_string(), "embedded defaults".to_string()),
    };
    let env: Vec<(String, String)> = std::env::vars().collect();
    let mut cfg = parse(&text, &env).with_context(|| format!("configuration ({origin})"))?;
    if cfg.data_dir.as_os_str().is_empty() {
        cfg.data_dir = default_data_dir();
    }
    Ok(cfg.validate()?)
}

/// Parses `text` and applies the `MANNERLY_*` pairs of `env`:
/// `MANNERLY_DATA_DIR` sets `data_dir`, `MANNERLY_PROXY__LISTEN` sets
/// `proxy.listen` (a double underscore separates table and key). Values are
/// read as TOML (`[443, 8443]`, `true`, `2.5`) and otherwise as strings.
pub fn parse(text: &str, env: &[(String, String)]) -> Result<Config> {
    let mut table: toml::Table = text.parse().context("not valid TOML")?;
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("MANNERLY_") else {
            continue;
        };
        if NOT_KEYS.contains(&name.as_str()) || rest.is_empty() {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
        let parsed = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.clone()));
        set(&mut table, &path, parsed).with_context(|| format!("environment variable {name}"))?;
    }
    let cfg: Config = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| anyhow::anyhow!("{}", e.message()))?;
    Ok(cfg)
}

fn set(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<()> {
    match path {
        [] => bail!("empty key"),
        [key] => {
            table.insert(key.clone(), value);
            Ok(())
        }
        [head, tail @ ..] => {
            let entry = table
                .entry(head.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match entry {
                toml::Value::Table(t) => set(t, tail, value),
                _ => bail!("{head} is not a table"),
            }
        }
    }
}

fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("mannerly");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/share/mannerly");
    }
    PathBuf::from("mannerly-data")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn embedded_file_is_the_compiled_in_defaults() {
        let from_file = parse(EMBEDDED, &[]).unwrap();
        let from_serde: Config = toml::from_str("").unwrap();
        assert_eq!(format!("{from_file:?}"), format!("{from_serde:?}"));
    }

    #[test]
    fn environment_overrides_keys() {
        let cfg = parse(
            EMBEDDED,
            &env(&[
                ("MANNERLY_PROXY__LISTEN", "127.0.0.1:9999"),
                ("MANNERLY_PROXY__CONNECT_PORTS", "[443, 8443]"),
                ("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true"),
                ("MANNERLY_DATA_DIR", "/tmp/x"),
                ("MANNERLY_LOG", "debug"),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.proxy.listen.port(), 9999);
        assert_eq!(cfg.proxy.connect_ports, vec![443, 8443]);
        assert!(cfg.upstream.allow_private);
        assert_eq!(cfg.data_dir, PathBuf::from("/tmp/x"));
    }

    #[test]
    fn crawler_use_is_reference_full_or_undeclared() {
        use mannerly_policy::prefs::DeclaredUse;
        assert_eq!(
            parse(EMBEDDED, &[]).unwrap().crawler.usage,
            DeclaredUse::Undeclared
        );
        let cfg = parse("[crawler]\nuse = \"full\"\n", &[]).unwrap();
        assert_eq!(cfg.crawler.usage, DeclaredUse::Full);
        let cfg = parse("", &env(&[("MANNERLY_CRAWLER__USE", "reference")])).unwrap();
        assert_eq!(cfg.crawler.usage, DeclaredUse::Reference);
        let err = parse("[crawler]\nuse = \"everything\"\n", &[]).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("use") && msg.contains("\"reference\", \"full\""),
            "{msg}"
        );
    }

    #[test]
    fn unknown_keys_are_errors_that_name_the_key() {
        let err = parse("[proxy]\nlisten_addr = \"x\"\n", &[]).unwrap_err();
        assert!(format!("{err:#}").contains("listen_addr"), "{err:#}");
        let err = parse("", &env(&[("MANNERLY_PROXY__LISTNE", "1")])).unwrap_err();
        assert!(format!("{err:#}").contains("listne"), "{err:#}");
    }
}
