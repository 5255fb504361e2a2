//! The layered table: defaults, file, environment, flags; each leaf keeps
//! the source of its value.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{anyhow, bail, Result};
use mannerly_proxy::Config;
use toml::{Table, Value};

use super::schema::{dotted, leaves};
use super::suggest;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The documented default (`config/mannerly.toml`).
    Default,
    /// A configuration file, with the line of the key when known.
    File {
        /// The file as given on the command line.
        name: String,
        /// 1-based line of the key.
        line: Option<usize>,
    },
    /// A `MANNERLY_*` environment variable.
    Env(String),
    /// A command-line flag.
    Flag(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File {
                name,
                line: Some(l),
            } => write!(f, "{name} line {l}"),
            Source::File { name, line: None } => f.write_str(name),
            Source::Env(v) => write!(f, "environment variable {v}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// What the defaults say about a key path.
pub(super) enum Lookup<'a> {
    /// A known key with its default value.
    Leaf(&'a Value),
    /// A known table.
    Table,
    /// An entry of a map such as `budget.hosts` or `upstream.resolve`.
    Open,
    /// Not a key; `at` is the first segment that is unknown.
    Unknown { at: usize, siblings: Vec<String> },
}

/// Walks `path` in the defaults. An empty table in the defaults is a map
/// (`[budget.hosts]`, `[upstream.resolve]`): any entry name is accepted, and
/// an entry's keys are those of the table the map sits in (a host override
/// takes the keys of `[budget]`).
pub(super) fn lookup<'a>(schema: &'a Table, path: &[String]) -> Lookup<'a> {
    let mut table = schema;
    let mut i = 0;
    while i < path.len() {
        let last = i + 1 == path.len();
        match table.get(&path[i]) {
            Some(Value::Table(t)) if t.is_empty() && !last => {
                if i + 2 == path.len() {
                    return Lookup::Open;
                }
                // The entry's keys are checked against the enclosing table.
                i += 2;
            }
            Some(Value::Table(t)) => {
                if last {
                    return Lookup::Table;
                }
                table = t;
                i += 1;
            }
            Some(v) if last => return Lookup::Leaf(v),
            Some(_) => {
                return Lookup::Unknown {
                    at: i + 1,
                    siblings: Vec::new(),
                }
            }
            None => {
                return Lookup::Unknown {
                    at: i,
                    siblings: table.keys().cloned().collect(),
                }
            }
        }
    }
    Lookup::Table
}

pub(super) struct Layers {
    schema: Table,
    merged: Table,
    sources: BTreeMap<Vec<String>, Source>,
}

impl Layers {
    pub fn new() -> Result<Layers> {
        let schema: Table = super::schema::EMBEDDED
            .parse()
            .map_err(|e| anyhow!("embedded defaults: {e}"))?;
        let mut sources = BTreeMap::new();
        for (path, _) in leaves(&schema) {
            sources.insert(path, Source::Default);
        }
        Ok(Layers {
            merged: schema.clone(),
            schema,
            sources,
        })
    }

    /// Lays a TOML file over what is there.
    pub fn file(&mut self, text: &str, name: &str) -> Result<()> {
        let table: Table = toml::from_str(text).map_err(|e| {
            // toml's message already names the line and column.
            anyhow!("{name}: not valid TOML: {}", e.to_string().trim_end())
        })?;
        let lines = key_lines(text);
        for (path, value) in leaves(&table) {
            let line = lines.get(&path).copied();
            let source = Source::File {
                name: name.to_string(),
                line,
            };
            self.set(&path, value.clone(), source)?;
        }
        Ok(())
    }

    /// Lays the `MANNERLY_*` variables over what is there.
    pub fn env(&mut self, env: &[(String, String)], not_keys: &[&str]) -> Result<()> {
        let mut env: Vec<&(String, String)> = env.iter().collect();
        // Deterministic order, so two variables for one key always resolve the same way.
        env.sort();
        for (name, raw) in env {
            let Some(rest) = name.strip_prefix("MANNERLY_") else {
                continue;
            };
            if not_keys.contains(&name.as_str()) || rest.is_empty() {
                continue;
            }
            let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
            if path.iter().any(String::is_empty) {
                bail!("environment variable {name}: empty key between double underscores");
            }
            let value = self.coerce(&path, raw);
            self.set(&path, value, Source::Env(name.clone()))?;
        }
        Ok(())
    }

    /// Lays one flag's value over what is there.
    pub fn flag(&mut self, path: &[&str], flag: &'static str, raw: &str) -> Result<()> {
        let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        let value = self.coerce(&path, raw);
        self.set(&path, value, Source::Flag(flag))
    }

    /// Reads a raw string (variable, flag) the way the key expects it: a
    /// string key takes it as is; a list takes a TOML array or a single
    /// element; anything else is read as TOML, else as a string.
    fn coerce(&self, path: &[String], raw: &str) -> Value {
        let expected = match lookup(&self.schema, path) {
            Lookup::Leaf(v) => Some(v),
            _ => None,
        };
        coerce(raw, expected)
    }

    fn set(&mut self, path: &[String], value: Value, source: Source) -> Result<()> {
        let mut table = &mut self.merged;
        for (i, seg) in path.iter().enumerate() {
            if i + 1 == path.len() {
                // A whole table replaced by a value (or the reverse) drops the
                // sources of what was below it.
                self.sources
                    .retain(|p, _| !p.starts_with(path) || p == path);
                table.insert(seg.clone(), value);
                self.sources.insert(path.to_vec(), source);
                return Ok(());
            }
            let entry = table
                .entry(seg.clone())
                .or_insert_with(|| Value::Table(Table::new()));
            match entry {
                Value::Table(t) => table = t,
                other => {
                    let key = dotted(&path[..=i]);
                    bail!(
                        "{} ({source}): {key} is a value ({}), not a table",
                        dotted(path),
                        other.type_str()
                    );
                }
            }
        }
        bail!("empty key ({source})")
    }

    /// Replaces a default that means "work it out" with what was worked out.
    pub fn set_default(&mut self, path: &[&str], value: Value) {
        let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        let source = self.sources.get(&path).cloned().unwrap_or(Source::Default);
        let _ = self.set(&path, value, source);
    }

    pub fn is_empty_string(&self, path: &[&str]) -> bool {
        let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        matches!(get(&self.merged, &path), Some(Value::String(s)) if s.is_empty())
    }

    /// `listen = "localhost:3128"`: the name is resolved here, once, so the
    /// proxy's config keeps a plain socket address and an error names the key.
    pub fn resolve_listen_names(&mut self) -> Result<()> {
        let listens: Vec<(Vec<String>, String)> = leaves(&self.merged)
            .into_iter()
            .filter(|(p, _)| p.last().is_some_and(|k| k == "listen"))
            .filter_map(|(p, v)| v.as_str().map(|s| (p, s.to_string())))
            .collect();
        for (path, text) in listens {
            if text.is_empty() || text.parse::<std::net::SocketAddr>().is_ok() {
                continue;
            }
            let source = self.sources.get(&path).cloned().unwrap_or(Source::Default);
            let addr = resolve_listen(&text).map_err(|why| {
                anyhow!(
                    "{} = {} ({source}): {why}",
                    dotted(&path),
                    Value::String(text.clone())
                )
            })?;
            // The source stays that of the name; the value is what it resolved to.
            let _ = insert(&mut self.merged, &path, Value::String(addr.to_string()));
        }
        Ok(())
    }

    /// The merged table as the proxy's `Config`; an error names the key,
    /// the value and where it came from.
    pub fn config(&self) -> Result<Config> {
        let whole = Value::Table(self.merged.clone()).try_into::<Config>();
        let err = match whole {
            Ok(cfg) => return Ok(cfg),
            Err(e) => e,
        };
        // Find the values that break it: lay each given value alone over
        // the defaults. Every one is said, in the order of the file (then
        // variables, then flags), so one run shows all there is to fix.
        let mut found: Vec<(&Source, String)> = Vec::new();
        for (path, source) in &self.sources {
            if *source == Source::Default {
                continue;
            }
            let Some(value) = get(&self.merged, path) else {
                continue;
            };
            let mut alone = self.schema.clone();
            if insert(&mut alone, path, value.clone()).is_err() {
                continue;
            }
            let Err(e) = Value::Table(alone).try_into::<Config>() else {
                continue;
            };
            let why = plain_types(e.message());
            found.push((source, self.explain(path, value, source, &why)));
        }
        if found.is_empty() {
            return Err(anyhow!("configuration: {}", plain_types(err.message())));
        }
        found.sort_by_key(|(source, _)| source_order(source));
        let all: Vec<String> = found.into_iter().map(|(_, msg)| msg).collect();
        Err(anyhow!(all.join("\n")))
    }

    fn explain(&self, path: &[String], value: &Value, source: &Source, why: &str) -> String {
        let key = dotted(path);
        let unknown = match lookup(&self.schema, path) {
            Lookup::Unknown { at, siblings } => Some((at, siblings)),
            _ if why.starts_with("unknown field") => Some((path.len() - 1, Vec::new())),
            _ => None,
        };
        let Some((at, mut siblings)) = unknown else {
            return format!("{key} = {value} ({source}): {why}");
        };
        if siblings.is_empty() {
            siblings = expected_fields(why);
        }
        let hint = match source {
            Source::Env(name) => env_spelling(&self.schema, path, source)
                .or_else(|| env_only_variable(name))
                .or_else(|| {
                    suggest::hint(&self.schema, path, at, &siblings).map(|k| variable_for(&k))
                }),
            _ => suggest::hint(&self.schema, path, at, &siblings),
        }
        .map(|s| format!("; did you mean {s}?"))
        .unwrap_or_default();
        let what = if at + 1 < path.len() {
            format!("unknown table {}", dotted(&path[..=at]))
        } else {
            format!("unknown key {key}")
        };
        format!("{what} ({source}){hint}")
    }

    /// The value and source of a key named as the proxy names it
    /// (`budget.max_rate`, `upstream.resolve."a:1"`).
    pub fn find_dotted(&self, key: &str) -> Option<(Value, Source)> {
        self.sources.iter().find_map(|(path, source)| {
            if dotted(path) == key || path.join(".") == key {
                get(&self.merged, path).map(|v| (v.clone(), source.clone()))
            } else {
                None
            }
        })
    }

    pub fn into_values(self) -> BTreeMap<Vec<String>, (Value, Source)> {
        leaves(&self.merged)
            .into_iter()
            .map(|(path, value)| {
                let source = self.sources.get(&path).cloned().unwrap_or(Source::Default);
                (path, (value.clone(), source))
            })
            .collect()
    }
}

pub(super) fn coerce(raw: &str, expected: Option<&Value>) -> Value {
    match expected {
        Some(Value::String(_)) => {
            // A quoted TOML string is taken unquoted; anything else verbatim.
            if raw.starts_with('"') {
                if let Some(Value::String(s)) = parse_value(raw) {
                    return Value::String(s);
                }
            }
            Value::String(raw.to_string())
        }
        Some(Value::Array(items)) => {
            if raw.trim_start().starts_with('[') {
                if let Some(v @ Value::Array(_)) = parse_value(raw) {
                    return v;
                }
            }
            if raw.trim().is_empty() {
                return Value::Array(Vec::new());
            }
            Value::Array(vec![coerce(raw, items.first())])
        }
        _ => parse_value(raw).unwrap_or_else(|| Value::String(raw.to_string())),
    }
}

fn parse_value(raw: &str) -> Option<Value> {
    format!("v = {raw}")
        .parse::<Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
}

fn resolve_listen(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err("expected host:port, e.g. 127.0.0.1:3128 or localhost:3128".into());
    };
    if host.is_empty() || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected host:port, e.g. 127.0.0.1:3128 or localhost:3128".into());
    }
    if port.parse::<u16>().is_err() {
        return Err(format!("port {port} is out of range (0 to 65535)"));
    }
    let addrs: Vec<std::net::SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    // IPv4 first: `localhost` often lists ::1 first, and clients told
    // `localhost:3128` try 127.0.0.1 as well.
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

fn get<'a>(table: &'a Table, path: &[String]) -> Option<&'a Value> {
    let (last, init) = path.split_last()?;
    let mut t = table;
    for seg in init {
        t = t.get(seg)?.as_table()?;
    }
    t.get(last)
}

fn insert(table: &mut Table, path: &[String], value: Value) -> Result<(), ()> {
    let (last, init) = path.split_last().ok_or(())?;
    let mut t = table;
    for seg in init {
        t = t
            .entry(seg.clone())
            .or_insert_with(|| Value::Table(Table::new()))
            .as_table_mut()
            .ok_or(())?;
    }
    t.insert(last.clone(), value);
    Ok(())
}

/// serde's "unknown field `x`, expected one of `a`, `b`" lists the keys.
fn expected_fields(why: &str) -> Vec<String> {
    why.split_once("expected")
        .map(|(_, rest)| {
            rest.split('`')
                .enumerate()
                .filter(|(i, _)| i % 2 == 1)
                .map(|(_, s)| s.to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The 1-based line of every key in a TOML text.
fn key_lines(text: &str) -> BTreeMap<Vec<String>, usize> {
    use toml_edit::{Item, TableLike};
    fn walk(
        t: &dyn TableLike,
        text: &str,
        prefix: &mut Vec<String>,
        out: &mut BTreeMap<Vec<String>, usize>,
    ) {
        for (k, item) in t.iter() {
            prefix.push(k.to_string());
            if let Some(span) = t.get_key_value(k).and_then(|(key, _)| key.span()) {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                out.insert(prefix.clone(), line);
            }
            match item {
                Item::Table(inner) => walk(inner, text, prefix, out),
                Item::Value(toml_edit::Value::InlineTable(inner)) => walk(inner, text, prefix, out),
                _ => {}
            }
            prefix.pop();
        }
    }
    let mut out = BTreeMap::new();
    if let Ok(doc) = toml_edit::ImDocument::parse(text) {
        walk(doc.as_table(), text, &mut Vec::new(), &mut out);
    }
    out
}

/// A variable that names a key with one underscore where tables need two
/// (`MANNERLY_PROXY_LISTEN`): the variable it meant, when that is a key.
fn env_spelling(schema: &Table, path: &[String], source: &Source) -> Option<String> {
    let Source::Env(_) = source else {
        return None;
    };
    let [flat] = path else {
        return None;
    };
    flat.match_indices('_').find_map(|(i, _)| {
        let (table, key) = (&flat[..i], &flat[i + 1..]);
        let candidate = [table.to_string(), key.to_string()];
        matches!(lookup(schema, &candidate), Lookup::Leaf(_)).then(|| {
            format!(
                "MANNERLY_{}__{} ({table}.{key})",
                table.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            )
        })
    })
}

/// serde's type names (`f64`, `u64`) in the words a config file's reader
/// uses.
fn plain_types(why: &str) -> String {
    let mut out = why.replace("expected f64", "expected a number");
    out = out.replace(
        "expected socket address",
        "expected host:port, e.g. 127.0.0.1:3128",
    );
    out = out.replace("expected f32", "expected a number");
    for t in ["u8", "u16", "u32", "u64", "usize"] {
        out = out.replace(&format!("expected {t}"), "expected a whole number");
    }
    for t in ["i8", "i16", "i32", "i64", "isize"] {
        out = out.replace(&format!("expected {t}"), "expected a whole number");
    }
    out
}

/// File lines first, in their order; then variables by name; then flags.
fn source_order(source: &Source) -> (u8, usize, String) {
    match source {
        Source::Default => (0, 0, String::new()),
        Source::File { line, .. } => (1, line.unwrap_or(usize::MAX), String::new()),
        Source::Env(name) => (2, 0, name.clone()),
        Source::Flag(flag) => (3, 0, flag.to_string()),
    }
}

/// A misspelt variable that is not a key (`MANNERLY_CONFG` for
/// `MANNERLY_CONFIG`).
fn env_only_variable(name: &str) -> Option<String> {
    let word = name.strip_prefix("MANNERLY_")?.to_ascii_lowercase();
    let names: Vec<String> = super::schema::NOT_KEYS
        .iter()
        .filter_map(|n| n.strip_prefix("MANNERLY_"))
        .map(str::to_ascii_lowercase)
        .collect();
    suggest::nearest(&word, names.iter().map(String::as_str))
        .map(|n| format!("MANNERLY_{}", n.to_ascii_uppercase()))
}

/// The variable that sets the dotted key `key`, and the key.
fn variable_for(key: &str) -> String {
    let var: Vec<String> = key
        .split('.')
        .map(|s| s.trim_matches('"').to_ascii_uppercase())
        .collect();
    format!("MANNERLY_{} ({key})", var.join("__"))
}
