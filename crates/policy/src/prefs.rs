//! Usage preferences: what a site says its content may be used for, in the
//! two vocabularies found in the field, judged against what the crawl
//! declares.
//!
//! - Cloudflare's Content Signals (`Content-Signal: search=yes, ai-train=no,
//!   use=reference`), in robots.txt and as a response header;
//! - the IETF AI Preferences (draft-ietf-aipref-vocab, -attach):
//!   `Content-Usage: train-ai=n` in robots.txt groups (with an optional path)
//!   and as a response header, an RFC 9651 dictionary of `y`/`n` tokens.
//!
//! The crawl declares purposes (`crawler.purposes`: [`Purpose`]) and how much
//! of a page it reproduces (`crawler.use`: [`DeclaredUse`]). The mapping
//! between the vocabularies is [`VOCABULARY`], and nowhere else.
//!
//! Combining (draft-ietf-aipref-vocab, "most restrictive wins"): per purpose,
//! any statement of `n` makes it [`Stance::Disallowed`]; else any `y` makes it
//! [`Stance::Allowed`]; else it is [`Stance::Unknown`], which refuses nothing.
//! Within one vocabulary in one robots.txt group, the line with the longest
//! matching path speaks for it (see `robots`); the two vocabularies, and the
//! response headers, are then combined by that rule, so a site that says no
//! anywhere is heard.

mod header;
mod signal;
mod usage;
mod vocab;

pub use header::{judge_response, ResponsePrefs};
pub use signal::SignalUse;
pub use usage::UsageStatement;
pub use vocab::{DeclaredUse, Purpose, Vocabulary, VOCABULARY};

pub(crate) use signal::SignalStatement;

use std::fmt;

use serde::Serialize;

use crate::whitespace::{trim_ws, WS};

/// What to do with a response whose `Content-Usage` / `Content-Signal`
/// header refuses a declared purpose (`policy.response_preferences`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponsePreferences {
    /// Answer 403 `signal_refused` with the header's text; the body is
    /// neither delivered nor stored.
    #[default]
    Withhold,
    /// Pass the answer on with a `Mannerly-Preferences` header saying what
    /// the site refuses.
    Annotate,
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

/// What the site's statements, combined, say about one purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stance {
    /// Some statement said `y`/`yes` and none said no.
    Allowed,
    /// Some statement said `n`/`no`.
    Disallowed,
    /// Nothing was said.
    #[default]
    Unknown,
}

impl Stance {
    /// The draft's rule: any no wins, then any yes, else unknown.
    pub fn combine(self, other: Stance) -> Stance {
        match (self, other) {
            (Stance::Disallowed, _) | (_, Stance::Disallowed) => Stance::Disallowed,
            (Stance::Allowed, _) | (_, Stance::Allowed) => Stance::Allowed,
            _ => Stance::Unknown,
        }
    }

    /// The stance of one statement's value.
    pub fn from_value(value: Option<bool>) -> Stance {
        match value {
            Some(true) => Stance::Allowed,
            Some(false) => Stance::Disallowed,
            None => Stance::Unknown,
        }
    }

    /// `allowed`, `disallowed` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stance::Allowed => "allowed",
            Stance::Disallowed => "disallowed",
            Stance::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Stance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a statement was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A robots.txt line (1-based).
    RobotsLine(usize),
    /// A response header field.
    Header,
}

/// One statement that counted, as the site wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Said<'a> {
    /// Which vocabulary it was written in.
    pub vocabulary: Vocabulary,
    /// Where it was read.
    pub place: Place,
    /// The robots.txt line as written (`Content-Usage: /a/ train-ai=n`), or
    /// the header's value (`train-ai=n`).
    pub text: &'a str,
}

impl fmt::Display for Said<'_> {
    /// `robots.txt line 4: Content-Signal: ai-train=no` or
    /// `header Content-Usage: train-ai=n`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.place {
            Place::RobotsLine(line) => write!(f, "robots.txt line {line}: {}", self.text),
            Place::Header => write!(f, "header {}: {}", self.vocabulary, self.text),
        }
    }
}

/// The combined preferences for one URL, with the statements behind them:
/// what an audit line records (`prefs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PrefsRecord {
    /// `search` (Content-Signal `search`, AI Preferences `search`).
    pub search: Stance,
    /// `ai-input` (Content-Signal `ai-input`, AI Preferences `ai-use`).
    #[serde(rename = "ai-input")]
    pub ai_input: Stance,
    /// `ai-train` (Content-Signal `ai-train`, AI Preferences `train-ai`).
    #[serde(rename = "ai-train")]
    pub ai_train: Stance,
    /// The site's Content-Signal `use` (`reference`, `full`, or as written).
    #[serde(rename = "use")]
    pub usage: Option<String>,
    /// Every statement that counted, e.g. `robots.txt line 4: Content-Signal: ai-train=no`.
    pub sources: Vec<String>,
}

impl PrefsRecord {
    /// The stance on `purpose`.
    pub fn get(&self, purpose: Purpose) -> Stance {
        match purpose {
            Purpose::Search => self.search,
            Purpose::AiInput => self.ai_input,
            Purpose::AiTrain => self.ai_train,
        }
    }

    fn slot(&mut self, purpose: Purpose) -> &mut Stance {
        match purpose {
            Purpose::Search => &mut self.search,
            Purpose::AiInput => &mut self.ai_input,
            Purpose::AiTrain => &mut self.ai_train,
        }
    }

    /// Adds what `stance` says about `purpose` by the combination rule.
    pub fn add(&mut self, purpose: Purpose, stance: Stance) {
        let slot = self.slot(purpose);
        *slot = slot.combine(stance);
    }

    /// Notes a statement that counted (once).
    pub fn add_source(&mut self, said: &Said<'_>) {
        let text = said.to_string();
        if !self.sources.contains(&text) {
            self.sources.push(text);
        }
    }

    /// Combines another record into this one (robots.txt, then headers):
    /// any no wins; the more restrictive `use` (`reference`) wins.
    pub fn merge(&mut self, other: &PrefsRecord) {
        for purpose in Purpose::ALL {
            self.add(purpose, other.get(purpose));
        }
        match (&self.usage, &other.usage) {
            (_, None) => {}
            (Some(mine), Some(_)) if mine == "reference" => {}
            (_, Some(theirs)) => self.usage = Some(theirs.clone()),
        }
        for source in &other.sources {
            if !self.sources.contains(source) {
                self.sources.push(source.clone());
            }
        }
    }

    /// Whether the site stated anything at all.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
}

impl fmt::Display for PrefsRecord {
    /// `search=allowed ai-input=unknown ai-train=disallowed use=reference`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "search={} ai-input={} ai-train={}",
            self.search, self.ai_input, self.ai_train
        )?;
        if let Some(usage) = &self.usage {
            write!(f, " use={usage}")?;
        }
        Ok(())
    }
}

/// Why a request or response is refused on the site's preferences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefsRefusal<'a> {
    /// A declared purpose the site said no to.
    Purpose {
        /// The refused purpose.
        purpose: Purpose,
        /// The statement that said no.
        said: Said<'a>,
    },
    /// The site allows reference use only (`use=reference`) and the crawl
    /// declares `crawler.use = "full"`.
    Use {
        /// The `Content-Signal` statement with `use=reference`.
        said: Said<'a>,
    },
}

impl PrefsRefusal<'_> {
    /// The statement that refused.
    pub fn said(&self) -> &Said<'_> {
        match self {
            PrefsRefusal::Purpose { said, .. } | PrefsRefusal::Use { said } => said,
        }
    }

    /// What was refused: a purpose (`ai-train`) or `use=full`.
    pub fn what(&self) -> &'static str {
        match self {
            PrefsRefusal::Purpose { purpose, .. } => purpose.as_str(),
            PrefsRefusal::Use { .. } => "use=full",
        }
    }
}

impl fmt::Display for PrefsRefusal<'_> {
    /// `ai-train refused by Content-Usage (robots.txt line 3: Content-Usage: train-ai=n)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let said = self.said();
        write!(f, "{} refused by {} ({said})", self.what(), said.vocabulary)
    }
}

#[cfg(test)]
mod tests;
