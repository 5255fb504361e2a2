//! What the report reads of an audit line, and where a figure comes from:
//! a leaf the report and each host's figures read.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::super::time::parse_ts;

/// Where a figure comes from: a line of one of the report's files.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineRef {
    /// Index into the report's files.
    pub file: u16,
    /// 1-based line number in that file.
    pub line: u64,
    /// The line's `id`.
    pub id: String,
}

/// The fields of an audit line the report reads.
#[derive(Deserialize)]
pub struct Line<'a> {
    #[serde(borrow)]
    pub(super) ts: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) sent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) host: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) group: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub url: Cow<'a, str>,
    #[serde(borrow, default)]
    pub outcome: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub would: Option<Cow<'a, str>>,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(borrow, default)]
    pub rule: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub agent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub keyid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub retried_by: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) cache: Option<Cow<'a, str>>,
    #[serde(default)]
    pub rate: Option<f64>,
    #[serde(borrow, default)]
    pub(super) charged: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) saved_charge: Option<Cow<'a, str>>,
    #[serde(default)]
    pub pause_s: Option<f64>,
    #[serde(default)]
    pub saved_bytes: Option<u64>,
    #[serde(default)]
    pub bytes: Option<u64>,
    #[serde(borrow, default)]
    pub prefs: Option<LinePrefs<'a>>,
    #[serde(borrow, default)]
    pub distress: Option<Cow<'a, str>>,
}

/// What the report reads of a line's `prefs`: the page-level directives
/// that bound the request, and whether any could not be read.
#[derive(Deserialize)]
pub struct LinePrefs<'a> {
    #[serde(borrow, default)]
    pub directives: Vec<Cow<'a, str>>,
    #[serde(default)]
    pub ignored: Vec<serde::de::IgnoredAny>,
}

impl Line<'_> {
    /// When the line's request reached the origin: its `sent`, or, in a
    /// log written before lines had one, the arrival of a request whose
    /// outcome says it was sent.
    pub(super) fn sent_at(&self, ts: f64, outcome: &str) -> Option<f64> {
        if let Some(s) = &self.sent {
            return parse_ts(s);
        }
        let sent = match outcome {
            "fetched" | "revalidated" | "unchanged" | "throttled" => {
                self.cache.as_deref() != Some("hit")
            }
            "robots_fetched" | "tdmrep_fetched" => self.status.is_some(),
            _ => false,
        };
        sent.then_some(ts)
    }
}
