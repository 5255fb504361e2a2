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
    /// W3C TDMRep (`tdm-reservation`).
    TdmRep,
    /// Page-level directives: `X-Robots-Tag`, `Robots-Tag`, `<meta name="robots">`.
    RobotsTag,
}

impl Vocabulary {
    /// The field name: `Content-Signal`, `Content-Usage` or `tdm-reservation`;
    /// `robots directive` for the page-level ones, whose place names the field.
    pub fn as_str(self) -> &'static str {
        match self {
            Vocabulary::ContentSignal => "Content-Signal",
            Vocabulary::ContentUsage => "Content-Usage",
            Vocabulary::TdmRep => "tdm-reservation",
            Vocabulary::RobotsTag => "robots directive",
        }
    }
}

impl fmt::Display for Vocabulary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The mapping between the vocabularies: our purpose, its Content Signals
/// key, its category in the current AI Preferences vocabulary
/// (draft-ietf-aipref-vocab-05 and later: `train-ai` and `search` only).
///
/// `ai-input` has no current AI Preferences category; a site's refusal of
/// it in an earlier draft's label is still heard ([`LEGACY_LABELS`]).
pub const VOCABULARY: [(Purpose, &str, Option<&str>); 3] = [
    (Purpose::Search, "search", Some("search")),
    (Purpose::AiInput, "ai-input", None),
    (Purpose::AiTrain, "ai-train", Some("train-ai")),
];

/// An AI Preferences label of an earlier draft, no longer in the
/// vocabulary: a site that wrote `n` under it meant no, and is heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyLabel {
    /// The label as the site wrote it.
    pub label: &'static str,
    /// The purpose of ours closest to what it named, which it refuses.
    pub purpose: Purpose,
    /// The last draft that defined it.
    pub draft: &'static str,
    /// Whether it named exactly that purpose, so that its `y` grants it too.
    pub exact: bool,
}

/// Earlier drafts' labels and the purpose each refuses. An `n` always
/// counts; a `y` only where the label named exactly our purpose (`ai-use`).
///
/// - `ai-use` ("AI use": the asset as input to a trained model while it
///   runs, as opposed to training) → `ai-input`, the same use (`y` too).
/// - `train-genai` (training generative models, a kind of AI training) →
///   `ai-train`: a crawl cannot tell which models its data will train, so
///   the narrower refusal refuses the whole purpose; its `y` grants nothing.
/// - `ai-output` (the asset in what an AI system outputs) → `ai-input`:
///   the use at answer time is where content reaches an output; its `y`
///   grants nothing.
pub const LEGACY_LABELS: [LegacyLabel; 3] = [
    LegacyLabel {
        label: "ai-use",
        purpose: Purpose::AiInput,
        draft: "draft-ietf-aipref-vocab-02",
        exact: true,
    },
    LegacyLabel {
        label: "train-genai",
        purpose: Purpose::AiTrain,
        draft: "draft-ietf-aipref-vocab-04",
        exact: false,
    },
    LegacyLabel {
        label: "ai-output",
        purpose: Purpose::AiInput,
        draft: "draft-ietf-aipref-vocab-04",
        exact: false,
    },
];

impl Purpose {
    /// Every purpose, in the order of [`VOCABULARY`].
    pub const ALL: [Purpose; 3] = [Purpose::Search, Purpose::AiInput, Purpose::AiTrain];

    fn entry(self) -> &'static (Purpose, &'static str, Option<&'static str>) {
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

    /// The current AI Preferences category of this purpose, if it has one.
    pub fn aipref_key(self) -> Option<&'static str> {
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
            .find(|(_, _, k)| *k == Some(key))
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
/// with a site's Content-Signal `use=immediate|reference|full`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeclaredUse {
    /// Not declared (`""`): the site's `use` is recorded, never enforced.
    #[default]
    #[serde(rename = "")]
    Undeclared,
    /// Used at once, never stored.
    Immediate,
    /// Excerpts with a link back to the source.
    Reference,
    /// The content in full.
    Full,
}

impl DeclaredUse {
    /// Reads `immediate`, `reference`, `full` or `""` (not declared).
    pub fn parse(s: &str) -> Option<DeclaredUse> {
        match s {
            "" => Some(DeclaredUse::Undeclared),
            "immediate" => Some(DeclaredUse::Immediate),
            "reference" => Some(DeclaredUse::Reference),
            "full" => Some(DeclaredUse::Full),
            _ => None,
        }
    }
}

impl DeclaredUse {
    /// `immediate` 0 < `reference` 1 < `full` 2; `None` when not declared.
    pub fn rank(self) -> Option<u8> {
        match self {
            DeclaredUse::Undeclared => None,
            DeclaredUse::Immediate => Some(0),
            DeclaredUse::Reference => Some(1),
            DeclaredUse::Full => Some(2),
        }
    }

    /// `immediate`, `reference`, `full` or `""`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeclaredUse::Undeclared => "",
            DeclaredUse::Immediate => "immediate",
            DeclaredUse::Reference => "reference",
            DeclaredUse::Full => "full",
        }
    }
}

impl<'de> Deserialize<'de> for DeclaredUse {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DeclaredUse::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown use {s:?}: expected \"immediate\", \"reference\", \"full\" or \"\" (not declared)"
            ))
        })
    }
}
