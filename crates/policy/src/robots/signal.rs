//! `Content-Signal` lines (Cloudflare's Content Signals Policy, IETF
//! draft-romm-aipref-contentsignals): what a site says its content may be used
//! for once fetched.
//!
//! Syntax accepted: `Content-Signal: [path] key=value, key=value, ...`.
//! The three purposes are `search`, `ai-input` and `ai-train` with `yes`/`no`
//! (`y`/`n` too); `use` takes `reference` / `full` (anything else is kept as
//! written). Unknown keys and values are kept, never an error.
//!
//! The optional path comes first and starts with `/` or `*`; it is a robots.txt
//! pattern (same `*`, `$` and percent-encoding rules as `Allow`/`Disallow`), as
//! the AI-preferences attachment draft (draft-ietf-aipref-attach) does for its
//! `Content-Usage` rule. A line without a path covers the whole site.
//!
//! A line belongs to the group it stands in. Lines before the first
//! `User-agent` line apply to every crawler: the site said it, and a crawler
//! that cannot tell whom it was meant for does not read it in its own favour.
//!
//! Precedence, per purpose: among the lines of the crawler's group (plus those
//! global lines) whose path matches the URL and which state that purpose, the
//! one with the longest path wins (no path counts as the shortest); on a tie
//! `no` wins, for the same reason.

use std::fmt;

use super::pattern::Pattern;
use super::{trim_ws, WS};
use crate::prefs::{Purpose, Vocabulary};

/// The `use` key: how much of the content an AI system may reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalUse {
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
            SignalUse::Reference => "reference",
            SignalUse::Full => "full",
            SignalUse::Other(s) => s,
        }
    }
}

/// One parsed `Content-Signal` line.
#[derive(Debug, Clone)]
pub struct ContentSignal {
    /// 1-based line number in the robots.txt.
    pub line: usize,
    /// The line as written, without comment or surrounding whitespace.
    pub text: String,
    /// The path pattern the line is limited to, if it names one.
    pub path: Option<String>,
    /// `search=yes|no`.
    pub search: Option<bool>,
    /// `ai-input=yes|no`.
    pub ai_input: Option<bool>,
    /// `ai-train=yes|no`.
    pub ai_train: Option<bool>,
    /// `use=...`.
    pub usage: Option<SignalUse>,
    /// Every other `key=value` pair (keys lower-cased), and known keys whose
    /// value was neither yes nor no.
    pub other: Vec<(String, String)>,
    pattern: Option<Pattern>,
}

impl ContentSignal {
    pub(crate) fn parse(line: usize, text: &str, value: &str) -> ContentSignal {
        let (path, rest) = split_path(value);
        let path = path.map(str::to_string);
        let mut signal = ContentSignal {
            line,
            text: text.to_string(),
            pattern: path.as_deref().map(Pattern::new),
            path,
            search: None,
            ai_input: None,
            ai_train: None,
            usage: None,
            other: Vec::new(),
        };
        // Commas separate pairs; whitespace does too when a part holds several
        // pairs, while `search = yes` stays one pair.
        let items = rest.split(',').flat_map(|part| {
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
            let slot = match Purpose::from_signal_key(&key) {
                Some(Purpose::Search) => Some(&mut signal.search),
                Some(Purpose::AiInput) => Some(&mut signal.ai_input),
                Some(Purpose::AiTrain) => Some(&mut signal.ai_train),
                None => None,
            };
            match (slot, yes_no) {
                (Some(slot), Some(v)) => *slot = Some(v),
                _ if key == "use" => {
                    signal.usage = Some(match val.as_str() {
                        "reference" => SignalUse::Reference,
                        "full" => SignalUse::Full,
                        _ => SignalUse::Other(val),
                    })
                }
                _ => signal.other.push((key, val)),
            }
        }
        signal
    }

    /// What the line says about `purpose`, if anything.
    pub fn get(&self, purpose: Purpose) -> Option<bool> {
        match purpose {
            Purpose::Search => self.search,
            Purpose::AiInput => self.ai_input,
            Purpose::AiTrain => self.ai_train,
        }
    }

    /// How specific the line is for `path`, or `None` if it does not cover it.
    pub(crate) fn coverage(&self, path: &[u8]) -> Option<usize> {
        match &self.pattern {
            None => Some(0),
            Some(p) if p.matches(path) => Some(p.specificity()),
            Some(_) => None,
        }
    }
}

impl fmt::Display for ContentSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The optional path that starts a `Content-Signal` or `Content-Usage` value
/// (it starts with `/` or `*` and ends at a space or tab), and the rest.
pub(crate) fn split_path(value: &str) -> (Option<&str>, &str) {
    let rest = trim_ws(value);
    if rest.starts_with(['/', '*']) {
        let end = rest.find(WS).unwrap_or(rest.len());
        (Some(&rest[..end]), trim_ws(&rest[end..]))
    } else {
        (None, rest)
    }
}

/// A declared purpose the site refuses in robots.txt, and the line that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalRefusal<'a> {
    /// The refused purpose.
    pub purpose: Purpose,
    /// 1-based line number of the deciding line.
    pub line: usize,
    /// That line as written, e.g. `Content-Signal: search=yes, ai-train=no`.
    pub text: &'a str,
    /// The vocabulary of that line (`Content-Signal` or `Content-Usage`).
    pub vocabulary: Vocabulary,
}

impl fmt::Display for SignalRefusal<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} refused by line {}: {}",
            self.purpose, self.line, self.text
        )
    }
}
