//! `/.well-known/tdmrep.json`, TDMRep's "TDM File on the Origin Server": a
//! JSON array of rules `{"location": pattern, "tdm-reservation": 1|0,
//! "tdm-policy": URL}` for the site's paths.
//!
//! Reading, as the report writes it:
//! - `location` is matched against the URL's path and query with the
//!   robots.txt syntax (`*` any run of characters, a final `$` the end;
//!   percent-encoding normalised as RFC 9309 does, case-sensitive): the
//!   rule applies when the pattern's end is reached before a difference.
//! - "The most specific match is the first in sequence": the first rule
//!   whose location matches decides, whatever follows.
//! - A matching rule whose `tdm-reservation` is not 1 or 0 (or a URL no
//!   rule matches) leaves the reservation unset, as the report says of
//!   protocol errors. `1` and `0` are read as JSON numbers or as the
//!   strings `"1"`/`"0"` (the header form), nothing else.
//! - `tdm-policy` counts only beside a reservation (the report: not to be
//!   processed when `tdm-reservation` is 0).
//! - A rule without a string `location` can match nothing and is dropped;
//!   a body that is not a JSON array reserves nothing (the origin "does not
//!   implement this protocol") and says why in [`TdmFile::problem`].

use std::fmt;

use serde_json::Value;

use super::super::{
    Place, PrefsRecord, PrefsRefusal, Purpose, ResponsePrefs, Said, Stance, Vocabulary,
};
use super::TDM_PURPOSES;
use crate::pattern::{normalise_path, Pattern};

/// Where the file lives on an origin.
pub const TDMREP_PATH: &str = "/.well-known/tdmrep.json";

/// One rule of the file, as the site wrote it.
#[derive(Debug, Clone)]
pub struct TdmRule {
    /// Its place in the array, from 1.
    pub index: usize,
    /// The `location` pattern as written.
    pub location: String,
    /// `Some(true)` for 1, `Some(false)` for 0, `None` for anything else.
    pub reservation: Option<bool>,
    /// The `tdm-policy` URL, when a string.
    pub policy: Option<String>,
    /// `location /a/, tdm-reservation 1`: what the audit line quotes.
    text: String,
    pattern: Pattern,
}

impl fmt::Display for TdmRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A parsed `tdmrep.json`: its rules in the order written.
#[derive(Debug, Clone, Default)]
pub struct TdmFile {
    rules: Vec<TdmRule>,
    problem: Option<String>,
}

impl TdmFile {
    /// Reads a 2xx body. Never fails: what cannot be read reserves nothing.
    pub fn parse(body: &[u8]) -> TdmFile {
        let value: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return TdmFile::unreadable(format!("not JSON ({e})")),
        };
        let Value::Array(items) = value else {
            return TdmFile::unreadable("not a JSON array of rules".into());
        };
        let mut rules = Vec::new();
        let mut dropped = 0;
        for (i, item) in items.iter().enumerate() {
            match TdmRule::read(i + 1, item) {
                Some(rule) => rules.push(rule),
                None => dropped += 1,
            }
        }
        let problem =
            (dropped > 0).then(|| format!("{dropped} rule(s) without a string location dropped"));
        TdmFile { rules, problem }
    }

    fn unreadable(why: String) -> TdmFile {
        TdmFile {
            rules: Vec::new(),
            problem: Some(format!("{why}: no reservation read")),
        }
    }

    /// The rules kept, in the order written.
    pub fn rules(&self) -> &[TdmRule] {
        &self.rules
    }

    /// What could not be read, if anything.
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// The rule that decides for `url` (a path or an absolute URL): the
    /// first whose location matches.
    pub fn rule_for(&self, url: &str) -> Option<&TdmRule> {
        let path = normalise_path(url);
        self.rules.iter().find(|r| r.pattern.matches(&path))
    }

    /// What the file says about `url`, judged against the crawl's declared
    /// purposes: a reservation refuses the first declared TDM purpose.
    pub fn judge(&self, url: &str, purposes: &[Purpose]) -> ResponsePrefs<'_> {
        let mut record = PrefsRecord::default();
        let Some(rule) = self.rule_for(url) else {
            return ResponsePrefs {
                record,
                refusal: None,
            };
        };
        let said = Said {
            vocabulary: Vocabulary::TdmRep,
            place: Place::TdmRepRule(rule.index),
            text: &rule.text,
        };
        let Some(reserved) = rule.reservation else {
            return ResponsePrefs {
                record,
                refusal: None,
            };
        };
        record.add_source(&said);
        let stance = if reserved {
            Stance::Disallowed
        } else {
            Stance::Allowed
        };
        for purpose in TDM_PURPOSES {
            record.add(purpose, stance);
        }
        if reserved {
            record.tdm_policy.clone_from(&rule.policy);
        }
        let refusal = purposes
            .iter()
            .find(|p| reserved && TDM_PURPOSES.contains(p))
            .map(|&purpose| PrefsRefusal::Purpose { purpose, said });
        ResponsePrefs { record, refusal }
    }
}

impl TdmRule {
    fn read(index: usize, item: &Value) -> Option<TdmRule> {
        let location = item.get("location")?.as_str()?.to_string();
        if location.is_empty() {
            return None;
        }
        let reservation = match item.get("tdm-reservation") {
            // 1.0 is 1 too: JSON does not tell integers apart.
            Some(Value::Number(n)) => match n.as_f64() {
                Some(1.0) => Some(true),
                Some(0.0) => Some(false),
                _ => None,
            },
            Some(Value::String(s)) => match s.trim_matches([' ', '\t']) {
                "1" => Some(true),
                "0" => Some(false),
                _ => None,
            },
            _ => None,
        };
        let policy = item
            .get("tdm-policy")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        let written = match item.get("tdm-reservation") {
            Some(v) => v.to_string(),
            None => "(none)".into(),
        };
        Some(TdmRule {
            index,
            text: format!("location {location}, tdm-reservation {written}"),
            pattern: Pattern::new(&location),
            location,
            reservation,
            policy,
        })
    }
}

#[cfg(test)]
mod tests;
