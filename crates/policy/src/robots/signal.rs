//! `Content-Signal` lines (Cloudflare's Content Signals Policy, IETF
//! draft-romm-aipref-contentsignals): what a site says its content may be used
//! for once fetched.
//!
//! Syntax accepted: `Content-Signal: [path] key=value, key=value, ...`; the
//! pairs are read by `prefs` (a response header carries them too).
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

use crate::pattern::Pattern;
use crate::prefs::{split_path, Purpose, SignalStatement, SignalUse, Vocabulary};

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
        let (path, pairs) = split_path(value);
        let path = path.map(str::to_string);
        let statement = SignalStatement::parse(pairs);
        ContentSignal {
            line,
            text: text.to_string(),
            pattern: path.as_deref().map(Pattern::new),
            path,
            search: statement.get(Purpose::Search),
            ai_input: statement.get(Purpose::AiInput),
            ai_train: statement.get(Purpose::AiTrain),
            usage: statement.usage,
            other: statement.other,
        }
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
