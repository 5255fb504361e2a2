//! Usage preferences: what a site says its content may be used for, in the
//! two vocabularies found in the field, judged against what the crawl
//! declares.
//!
//! - Cloudflare's Content Signals (`Content-Signal: search=yes, ai-train=no,
//!   use=reference`), in robots.txt and as a response header;
//! - the IETF AI Preferences (draft-ietf-aipref-vocab, -attach):
//!   `Content-Usage: train-ai=n` in robots.txt groups (with an optional path)
//!   and as a response header, an RFC 9651 dictionary of `y`/`n` tokens;
//! - TDMRep's `tdm-reservation: 1` response header and the rules of
//!   `/.well-known/tdmrep.json` ([`TdmFile`]), which refuse the
//!   text-and-data-mining purposes.
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
pub mod page;
mod signal;
mod tdmrep;
mod usage;
mod vocab;

pub use header::{judge_response, ResponsePrefs};
pub use signal::SignalUse;
pub use tdmrep::{judge_tdm, TdmFile, TdmRule, TDMREP_PATH, TDM_PURPOSES};
pub use usage::UsageStatement;
pub use vocab::{DeclaredUse, LegacyLabel, Purpose, Vocabulary, LEGACY_LABELS, VOCABULARY};

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
    /// A rule of `/.well-known/tdmrep.json` (1-based place in its array).
    TdmRepRule(usize),
    /// A page-level directive field (`x-robots-tag`, `robots-tag`).
    Field(&'static str),
    /// A `<meta>` tag at this byte offset of the body.
    Meta(usize),
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
            Place::TdmRepRule(n) => write!(f, "tdmrep.json rule {n}: {}", self.text),
            Place::Field(name) => write!(f, "header {name}: {}", self.text),
            Place::Meta(at) => write!(f, "<meta> at byte {at}: {}", self.text),
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
    /// Refusals written in an earlier AI Preferences draft's labels, and the
    /// purpose each was read as, e.g. `train-genai=n read as ai-train=n
    /// (label of draft-ietf-aipref-vocab-04)`. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub legacy: Vec<String>,
    /// The `tdm-policy` URL a TDMRep site names beside its reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tdm_policy: Option<String>,
    /// Page-level directives that bind the request (`noindex`, `nofollow`,
    /// `noai`, `noimageai`), from `X-Robots-Tag` / `Robots-Tag` / `<meta>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub directives: Vec<String>,
    /// Page-level directives that could not be read, and why (ignored).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
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

    /// Notes a statement that counted (once), and any refusal in it written
    /// in an earlier draft's label.
    pub fn add_source(&mut self, said: &Said<'_>) {
        push_once(&mut self.sources, said.to_string());
        if said.vocabulary != Vocabulary::ContentUsage {
            return;
        }
        let value = match said.place {
            Place::RobotsLine(_) => said.text.split_once(':').map_or("", |(_, v)| v),
            _ => said.text,
        };
        for l in UsageStatement::parse(split_path(value).1).legacy() {
            let note = format!(
                "{}=n read as {}=n (label of {})",
                l.label, l.purpose, l.draft
            );
            push_once(&mut self.legacy, note);
        }
    }

    /// Whether the page may be kept: not where the site allows only
    /// `use=immediate` (use without storing).
    pub fn forbids_storing(&self) -> bool {
        self.usage.as_deref() == Some("immediate")
    }

    /// Combines another record into this one (robots.txt, then headers):
    /// any no wins; the more restrictive `use` (`reference`) wins.
    pub fn merge(&mut self, other: &PrefsRecord) {
        for purpose in Purpose::ALL {
            self.add(purpose, other.get(purpose));
        }
        match (&self.usage, &other.usage) {
            (_, None) => {}
            (Some(mine), Some(theirs))
                if !SignalUse::parse(theirs.clone())
                    .stricter_than(&SignalUse::parse(mine.clone())) => {}
            (_, Some(theirs)) => self.usage = Some(theirs.clone()),
        }
        for source in &other.sources {
            push_once(&mut self.sources, source.clone());
        }
        for note in &other.legacy {
            push_once(&mut self.legacy, note.clone());
        }
        if self.tdm_policy.is_none() {
            self.tdm_policy.clone_from(&other.tdm_policy);
        }
        for d in &other.directives {
            push_once(&mut self.directives, d.clone());
        }
        for why in &other.ignored {
            push_once(&mut self.ignored, why.clone());
        }
    }

    /// Whether the site stated anything at all (or wrote what could not be read).
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.ignored.is_empty()
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

fn push_once(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
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
    /// The site allows less use than the crawl declares (`use=reference`
    /// against `crawler.use = "full"`, `use=immediate` against `reference`
    /// or `full`).
    Use {
        /// What the crawl declares.
        declared: DeclaredUse,
        /// The `Content-Signal` statement with the site's `use`.
        said: Said<'a>,
    },
}

impl PrefsRefusal<'_> {
    /// The statement that refused.
    pub fn said(&self) -> &Said<'_> {
        match self {
            PrefsRefusal::Purpose { said, .. } | PrefsRefusal::Use { said, .. } => said,
        }
    }

    /// What was refused: a purpose (`ai-train`) or the declared use
    /// (`use=full`).
    pub fn what(&self) -> &'static str {
        match self {
            PrefsRefusal::Purpose { purpose, .. } => purpose.as_str(),
            PrefsRefusal::Use { declared, .. } => match declared {
                DeclaredUse::Immediate => "use=immediate",
                DeclaredUse::Reference => "use=reference",
                DeclaredUse::Full => "use=full",
                DeclaredUse::Undeclared => "use",
            },
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
