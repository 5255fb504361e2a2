//! Loading configuration in layers: the documented defaults (the embedded
//! `config/mannerly.toml`), then the file given with `--config`, then
//! `MANNERLY_*` variables, then command-line flags. Every value remembers
//! where it came from, so an error can name the key, the value and its
//! source (file line or variable), and `mannerly config show` can print it.

mod layers;
mod schema;
mod show;
mod suggest;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use mannerly_proxy::{Config, ConfigError};

pub use layers::Source;
#[cfg(test)]
use schema::EMBEDDED;
pub use schema::NOT_KEYS;
pub use show::render;

/// Settings given as command-line flags; they win over everything else.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--listen`: `proxy.listen`.
    pub listen: Option<String>,
    /// `--data-dir`: `data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `--local [ORIGIN_CA]`: `upstream.allow_private`, and the origin CA
    /// (when given) as `upstream.extra_roots`.
    pub local: Option<PathBuf>,
}

/// The effective configuration and where each value came from.
pub struct Loaded {
    /// The validated configuration.
    pub config: Config,
    /// Every key with its effective value (as TOML) and its source.
    pub values: BTreeMap<Vec<String>, (toml::Value, Source)>,
    /// The source files layered over the defaults, for the header of `config show`.
    pub file: Option<PathBuf>,
}

/// Loads the configuration for a command that needs no flags.
pub fn load(path: Option<&Path>) -> Result<Config> {
    Ok(load_with(path, &Flags::default())?.config)
}

/// Loads defaults + file + environment + flags, and validates the result.
pub fn load_with(path: Option<&Path>, flags: &Flags) -> Result<Loaded> {
    let file = match path {
        Some(p) => Some((
            std::fs::read_to_string(p)
                .with_context(|| format!("reading configuration file {}", p.display()))?,
            p.display().to_string(),
        )),
        None => None,
    };
    let env: Vec<(String, String)> = std::env::vars().collect();
    let mut loaded = build(
        file.as_ref().map(|(t, n)| (t.as_str(), n.as_str())),
        &env,
        flags,
    )?;
    loaded.file = path.map(Path::to_path_buf);
    Ok(loaded)
}

/// Parses `text` as the only layer over the defaults and applies `env`
/// (`MANNERLY_DATA_DIR` sets `data_dir`, `MANNERLY_PROXY__LISTEN` sets
/// `proxy.listen`: a double underscore separates table and key). The data
/// dir is left as given (possibly empty).
#[cfg(test)]
pub fn parse(text: &str, env: &[(String, String)]) -> Result<Config> {
    let mut layers = layers::Layers::new()?;
    layers.file(text, "config.toml")?;
    layers.env(env, NOT_KEYS)?;
    layers.config()
}

fn build(file: Option<(&str, &str)>, env: &[(String, String)], flags: &Flags) -> Result<Loaded> {
    let mut layers = layers::Layers::new()?;
    if let Some((text, name)) = file {
        layers.file(text, name)?;
    }
    layers.env(env, NOT_KEYS)?;
    if let Some(listen) = &flags.listen {
        layers.flag(&["proxy", "listen"], "--listen", listen)?;
    }
    if let Some(dir) = &flags.data_dir {
        layers.flag(&["data_dir"], "--data-dir", &dir.display().to_string())?;
    }
    if let Some(ca) = &flags.local {
        layers.flag(&["upstream", "allow_private"], "--local", "true")?;
        if !ca.as_os_str().is_empty() {
            let ca = std::fs::canonicalize(ca)
                .with_context(|| format!("--local {}: the origin CA file", ca.display()))?;
            layers.flag(
                &["upstream", "extra_roots"],
                "--local",
                &ca.display().to_string(),
            )?;
        }
    }
    layers.resolve_listen_names()?;
    if layers.is_empty_string(&["data_dir"]) {
        let dir = default_data_dir();
        layers.set_default(
            &["data_dir"],
            toml::Value::String(dir.display().to_string()),
        );
    }
    let cfg = layers.config()?;
    let cfg = cfg
        .validate()
        .map_err(|e| anyhow::anyhow!(explain_invalid(&layers, e)))?;
    if flags.local.is_some() && !cfg.proxy.listen.ip().is_loopback() {
        anyhow::bail!(
            "--local lets clients reach this machine's own and private services, so it \
             listens on loopback only; proxy.listen is {} (drop --listen, or --local)",
            cfg.proxy.listen
        );
    }
    Ok(Loaded {
        config: cfg,
        values: layers.into_values(),
        file: None,
    })
}

/// `config key budget.max_rate: must be ...` becomes
/// `budget.max_rate = 0.0 (from MANNERLY_BUDGET__MAX_RATE): must be ...`.
fn explain_invalid(layers: &layers::Layers, e: ConfigError) -> String {
    let ConfigError::Invalid { key, why } = e;
    match layers.find_dotted(&key) {
        Some((value, source)) => {
            let path: Vec<String> = key.split('.').map(str::to_string).collect();
            let value = show::redacted(&path, &value);
            format!("{key} = {value} ({source}): {why}")
        }
        None => format!("{key}: {why}"),
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
mod tests;
