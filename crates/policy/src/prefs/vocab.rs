//! The two vocabularies and the one mapping between them.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// A use a crawl declares for what it fetches (configuration: `search`,
/// `ai-input`, `ai-train`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Purpose {
    /// Building a search index and showing links and short excerpts.
    Search,
    /// Feeding content to an AI model at answer time (RAG, grounding).
    AiInput,
    /// Training or fine-tuning AI models.
    AiTrain,
}

/// Which vocabulary a statement was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vocabulary {
    /// Cloudflare's Content Signals (`Content-Signal`).
    ContentSignal,
    /// IETF AI Preferences (`Content-Usage`).
    ContentUsage,
}

impl Vocabulary {
    /// The field name: `Content-Signal` or `Content-Usage`.
    pub fn as_str(self) -> &'static str {
        match self {
            Vocabulary::ContentSignal => "Content-Signal",
            Vocabulary::ContentUsage => "Content-Usage",
        }
    }
}

impl fmt::Display for Vocabulary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The mapping between the vocabularies: our purpose, its Content Signals
/// key, its AI Preferences (draft-ietf-aipref-vocab) category.
///
/// `ai-input` ↔ `ai-use`: both name use of the content by an AI system at
/// the time it answers, as opposed to training (`ai-train` ↔ `train-ai`).
pub const VOCABULARY: [(Purpose, &str, &str); 3] = [
    (Purpose::Search, "search", "search"),
    (Purpose::AiInput, "ai-input", "ai-use"),
    (Purpose::AiTrain, "ai-train", "train-ai"),
];

impl Purpose {
    /// Every purpose, in the order of [`VOCABULARY`].
    pub const ALL: [Purpose; 3] = [Purpose::Search, Purpose::AiInput, Purpose::AiTrain];

    fn entry(self) -> &'static (Purpose, &'static str, &'static str) {
        match self {
            Purpose::Search => &VOCABULARY[0],
            Purpose::AiInput => &VOCABULARY[1],
            Purpose::AiTrain => &VOCABULARY[2],
        }
    }

    /// The Content-Signal key of this purpose (also its name in config).
    pub fn as_str(self) -> &'static str {
        self.entry().1
    }

    /// The AI Preferences category of this purpose.
    pub fn aipref_key(self) -> &'static str {
        self.entry().2
    }

    /// The purpose a Content-Signal key names (keys are case-insensitive).
    pub fn from_signal_key(key: &str) -> Option<Purpose> {
        VOCABULARY
            .iter()
            .find(|(_, k, _)| k.eq_ignore_ascii_case(key))
            .map(|(p, _, _)| *p)
    }

    /// The purpose an AI Preferences category names (RFC 9651 keys are
    /// lower case; anything else is no key of ours).
    pub fn from_aipref_key(key: &str) -> Option<Purpose> {
        VOCABULARY
            .iter()
            .find(|(_, _, k)| *k == key)
            .map(|(p, _, _)| *p)
    }

    /// The index of this purpose in [`Purpose::ALL`].
    pub(crate) fn index(self) -> usize {
        match self {
            Purpose::Search => 0,
            Purpose::AiInput => 1,
            Purpose::AiTrain => 2,
        }
    }
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much of the content the crawl reproduces (`crawler.use`), to compare
/// with a site's Content-Signal `use=reference|full`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeclaredUse {
    /// Not declared (`""`): the site's `use` is recorded, never enforced.
    #[default]
    #[serde(rename = "")]
    Undeclared,
    /// Excerpts with a link back to the source.
    Reference,
    /// The content in full.
    Full,
}

impl DeclaredUse {
    /// Reads `reference`, `full` or `""` (not declared).
    pub fn parse(s: &str) -> Option<DeclaredUse> {
        match s {
            "" => Some(DeclaredUse::Undeclared),
            "reference" => Some(DeclaredUse::Reference),
            "full" => Some(DeclaredUse::Full),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for DeclaredUse {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DeclaredUse::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown use {s:?}: expected \"reference\", \"full\" or \"\" (not declared)"
            ))
        })
    }
}
