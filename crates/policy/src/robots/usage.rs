//! `Content-Usage` lines (draft-ietf-aipref-attach): AI Preferences in a
//! robots.txt group, `Content-Usage: [path] train-ai=n, search=y`.
//!
//! Scoped like `Content-Signal` (see `signal`): a line belongs to the group it
//! stands in, lines before the first group apply to everyone, and the optional
//! path is a robots.txt pattern whose longest match wins.

use std::fmt;

use crate::pattern::Pattern;
use crate::prefs::{split_path, Purpose, UsageStatement};

/// One parsed `Content-Usage` line.
#[derive(Debug, Clone)]
pub struct ContentUsage {
    /// 1-based line number in the robots.txt.
    pub line: usize,
    /// The line as written, without comment or surrounding whitespace.
    pub text: String,
    /// The path pattern the line is limited to, if it names one.
    pub path: Option<String>,
    /// What the dictionary says.
    pub statement: UsageStatement,
    pattern: Option<Pattern>,
}

impl ContentUsage {
    pub(crate) fn parse(line: usize, text: &str, value: &str) -> ContentUsage {
        let (path, rest) = split_path(value);
        ContentUsage {
            line,
            text: text.to_string(),
            path: path.map(str::to_string),
            statement: UsageStatement::parse(rest),
            pattern: path.map(Pattern::new),
        }
    }

    /// What the line says about `purpose`, if anything.
    pub fn get(&self, purpose: Purpose) -> Option<bool> {
        self.statement.get(purpose)
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

impl fmt::Display for ContentUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
