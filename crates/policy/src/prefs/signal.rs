//! `Content-Signal` values (Cloudflare's Content Signals Policy, IETF
//! draft-romm-aipref-contentsignals), read the same way in a robots.txt line
//! and in a response header: `search=yes, ai-train=no, use=reference`.
//!
//! The three purposes are `search`, `ai-input` and `ai-train` with `yes`/`no`
//! (`y`/`n` too); `use` takes `immediate` / `reference` / `full` (anything
//! else is kept as written). Unknown keys and values are kept, never an error.

use super::{DeclaredUse, Purpose};
use crate::whitespace::{trim_ws, WS};

/// The `use` key: how much of the content an AI system may reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalUse {
    /// `use=immediate`: used at once, not stored.
    Immediate,
    /// `use=reference`.
    Reference,
    /// `use=full`.
    Full,
    /// Any other value, lower-cased.
    Other(String),
}

impl SignalUse {
    /// `reference`, `full`, or the value as written (lower-cased).
    pub fn as_str(&self) -> &str {
        match self {
            SignalUse::Immediate => "immediate",
            SignalUse::Reference => "reference",
            SignalUse::Full => "full",
            SignalUse::Other(s) => s,
        }
    }

    /// A `use` value, lower-cased.
    pub fn parse(value: String) -> SignalUse {
        match value.as_str() {
            "immediate" => SignalUse::Immediate,
            "reference" => SignalUse::Reference,
            "full" => SignalUse::Full,
            _ => SignalUse::Other(value),
        }
    }

    /// How much it allows: `immediate` 0 < `reference` 1 < `full` 2; a
    /// value we do not know allows nothing we can rank.
    pub fn rank(&self) -> Option<u8> {
        match self {
            SignalUse::Immediate => Some(0),
            SignalUse::Reference => Some(1),
            SignalUse::Full => Some(2),
            SignalUse::Other(_) => None,
        }
    }

    /// Whether `self` allows less than `other` (the more restrictive of two
    /// statements is the one heard).
    pub fn stricter_than(&self, other: &SignalUse) -> bool {
        match (self.rank(), other.rank()) {
            (Some(a), Some(b)) => a < b,
            (Some(_), None) => true,
            _ => false,
        }
    }

    /// Whether a crawl declaring `declared` reproduces more than this allows.
    pub fn refuses(&self, declared: DeclaredUse) -> bool {
        match (self.rank(), declared.rank()) {
            (Some(allowed), Some(wanted)) => wanted > allowed,
            _ => false,
        }
    }
}

/// What one `Content-Signal` value says, its optional path left out.
#[derive(Debug, Clone, Default)]
pub(crate) struct SignalStatement {
    /// `yes`/`no` per purpose, in [`Purpose::ALL`] order.
    values: [Option<bool>; 3],
    /// `use=...`.
    pub(crate) usage: Option<SignalUse>,
    /// Every other `key=value` pair (keys lower-cased), and known keys whose
    /// value was neither yes nor no.
    pub(crate) other: Vec<(String, String)>,
}

impl SignalStatement {
    /// Parses the `key=value` pairs of a value (after any path).
    pub(crate) fn parse(pairs: &str) -> SignalStatement {
        let mut statement = SignalStatement::default();
        // Commas separate pairs; whitespace does too when a part holds several
        // pairs, while `search = yes` stays one pair.
        let items = pairs.split(',').flat_map(|part| {
            let several = part.matches('=').count() > 1;
            part.split(move |c: char| several && WS.contains(&c))
        });
        for item in items {
            let item = trim_ws(item);
            if item.is_empty() {
                continue;
            }
            let (key, val) = match item.split_once('=') {
                Some((k, v)) => (
                    trim_ws(k).to_ascii_lowercase(),
                    trim_ws(v).to_ascii_lowercase(),
                ),
                None => (item.to_ascii_lowercase(), String::new()),
            };
            let yes_no = match val.as_str() {
                "yes" | "y" => Some(true),
                "no" | "n" => Some(false),
                _ => None,
            };
            match (Purpose::from_signal_key(&key), yes_no) {
                (Some(purpose), Some(v)) => statement.values[purpose.index()] = Some(v),
                _ if key == "use" => statement.usage = Some(SignalUse::parse(val)),
                _ => statement.other.push((key, val)),
            }
        }
        statement
    }

    /// `Some(true)` for `yes`, `Some(false)` for `no`, `None` when not stated.
    pub(crate) fn get(&self, purpose: Purpose) -> Option<bool> {
        self.values[purpose.index()]
    }
}
