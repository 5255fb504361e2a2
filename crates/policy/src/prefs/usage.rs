//! `Content-Usage` values: an RFC 9651 dictionary of AI Preferences
//! categories (draft-ietf-aipref-vocab), e.g. `train-ai=n, search=y`.
//!
//! Each member is parsed by RFC 9651's rules (sfv); what the draft asks of a
//! reader on top:
//! - unknown keys and all parameters are ignored;
//! - a known key counts only with the token `y` or `n`; any other value
//!   (`?1` from a bare key, `"n"`, `no`, `1`) says nothing;
//! - a member that does not parse is dropped alone: the members around it
//!   still count (RFC 9651 on its own would drop the whole field, and a site
//!   that wrote one typo next to `train-ai=n` did not mean yes);
//! - a key written twice: the last one counts, as in any RFC 9651 dictionary;
//! - an earlier draft's label ([`LEGACY_LABELS`]: `ai-use`, `train-genai`,
//!   `ai-output`) with `n` refuses the closest purpose, whatever the
//!   current labels say beside it (any no wins); with `y` it grants only
//!   the purpose it named exactly (`ai-use`: `ai-input`).

use sfv::{BareItem, Dictionary, ListEntry, Parser};

use super::vocab::{LegacyLabel, LEGACY_LABELS};
use super::Purpose;

/// What one `Content-Usage` value says, per purpose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageStatement {
    values: [Option<bool>; 3],
    /// Which of [`LEGACY_LABELS`] said `n`.
    legacy_no: [bool; LEGACY_LABELS.len()],
}

impl UsageStatement {
    /// Parses a dictionary value (without the field name).
    pub fn parse(value: &str) -> UsageStatement {
        let mut statement = UsageStatement::default();
        for member in members(value) {
            let member = member.trim_matches([' ', '\t']);
            if member.is_empty() {
                continue;
            }
            let Ok(dict) = Parser::new(member).parse::<Dictionary>() else {
                continue;
            };
            for (key, entry) in dict {
                let value = match entry {
                    ListEntry::Item(item) => match item.bare_item {
                        BareItem::Token(t) if t.as_str() == "y" => Some(true),
                        BareItem::Token(t) if t.as_str() == "n" => Some(false),
                        _ => None,
                    },
                    ListEntry::InnerList(_) => None,
                };
                let purpose = match LEGACY_LABELS.iter().position(|l| l.label == key.as_str()) {
                    Some(i) => {
                        statement.legacy_no[i] |= value == Some(false);
                        match LEGACY_LABELS[i] {
                            l if l.exact && value == Some(true) => l.purpose,
                            _ => continue,
                        }
                    }
                    None => match Purpose::from_aipref_key(key.as_str()) {
                        Some(p) => p,
                        None => continue,
                    },
                };
                // A later member with a value nobody understands replaces
                // the earlier one, as the dictionary would.
                statement.values[purpose.index()] = value;
            }
        }
        statement
    }

    /// `Some(true)` for `y`, `Some(false)` for `n` (in the current label or
    /// an earlier draft's), `None` when not stated.
    pub fn get(&self, purpose: Purpose) -> Option<bool> {
        if self.legacy().any(|l| l.purpose == purpose) {
            return Some(false);
        }
        self.values[purpose.index()]
    }

    /// The earlier drafts' labels that said `n`.
    pub fn legacy(&self) -> impl Iterator<Item = &'static LegacyLabel> + '_ {
        LEGACY_LABELS
            .iter()
            .zip(self.legacy_no)
            .filter_map(|(l, no)| no.then_some(l))
    }

    /// Whether the statement says anything about any purpose.
    pub fn is_empty(&self) -> bool {
        Purpose::ALL.iter().all(|&p| self.get(p).is_none())
    }
}

/// The top-level members of a dictionary: split on commas outside quoted
/// strings (the only place an RFC 9651 value can hold a comma).
fn members(value: &str) -> impl Iterator<Item = &str> {
    let bytes = value.as_bytes();
    let mut start = 0;
    let mut i = 0;
    let mut quoted = false;
    std::iter::from_fn(move || {
        if start > bytes.len() {
            return None;
        }
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if quoted => i += 1,
                b'"' => quoted = !quoted,
                b',' if !quoted => {
                    let member = &value[start..i];
                    i += 1;
                    start = i;
                    return Some(member);
                }
                _ => {}
            }
            i += 1;
        }
        let member = value.get(start..).unwrap_or("");
        start = bytes.len() + 1;
        Some(member)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn say(value: &str) -> [Option<bool>; 3] {
        let s = UsageStatement::parse(value);
        [
            s.get(Purpose::Search),
            s.get(Purpose::AiInput),
            s.get(Purpose::AiTrain),
        ]
    }

    #[test]
    fn plain_members() {
        assert_eq!(say("train-ai=n"), [None, None, Some(false)]);
        assert_eq!(
            say("search=y, ai-use=n, train-ai=y"),
            [Some(true), Some(false), Some(true)]
        );
        assert_eq!(say("search=n, train-ai=y"), [Some(false), None, Some(true)]);
        assert_eq!(say(""), [None, None, None]);
    }

    #[test]
    fn whitespace_is_optional_around_commas_but_not_around_equals() {
        assert_eq!(say("search=y,train-ai=n"), [Some(true), None, Some(false)]);
        assert_eq!(
            say("  search=y ,\ttrain-ai=n  "),
            [Some(true), None, Some(false)]
        );
        // RFC 9651 allows no space around `=`: that member is invalid and
        // dropped, the other one stands.
        assert_eq!(say("search = y, train-ai=n"), [None, None, Some(false)]);
    }

    #[test]
    fn parameters_are_ignored() {
        assert_eq!(
            say("train-ai=n;until=2030;why=\"x, y\", search=y;q=1"),
            [Some(true), None, Some(false)]
        );
    }

    #[test]
    fn only_the_tokens_y_and_n_count() {
        // Bare key = boolean true; strings, other tokens, numbers, inner lists: nothing said.
        assert_eq!(say("train-ai"), [None, None, None]);
        assert_eq!(say("train-ai=\"n\""), [None, None, None]);
        assert_eq!(say("train-ai=no, search=yes"), [None, None, None]);
        assert_eq!(say("train-ai=0, ai-use=?0"), [None, None, None]);
        assert_eq!(say("train-genai=no"), [None, None, None]);
        assert_eq!(say("train-ai=(n y)"), [None, None, None]);
        // Tokens are case-sensitive, and so are keys (upper case is no key).
        assert_eq!(say("train-ai=N"), [None, None, None]);
        assert_eq!(say("Train-AI=n, search=y"), [Some(true), None, None]);
    }

    #[test]
    fn invalid_members_are_dropped_without_losing_the_valid_ones() {
        assert_eq!(
            say("train-ai=n, bad key=y, search=y"),
            [Some(true), None, Some(false)]
        );
        assert_eq!(
            say("@@@, train-ai=n,, ,search=y,"),
            [Some(true), None, Some(false)]
        );
        assert_eq!(
            say("note=\"unterminated, train-ai=n"),
            [None, None, None],
            "an unterminated string swallows the rest of the field"
        );
        assert_eq!(
            say("note=\"a, \\\"b\\\", c\", train-ai=n"),
            [None, None, Some(false)]
        );
    }

    #[test]
    fn earlier_drafts_labels_refuse_the_closest_purpose_and_never_allow() {
        // -00..-02: `ai-use`; up to -04: `train-genai`, `ai-output`.
        assert_eq!(say("ai-use=n"), [None, Some(false), None]);
        assert_eq!(say("train-genai=n"), [None, None, Some(false)]);
        assert_eq!(say("ai-output=n"), [None, Some(false), None]);
        // A no in an old label is not undone by a yes in the current one.
        assert_eq!(say("train-genai=n, train-ai=y"), [None, None, Some(false)]);
        assert_eq!(say("train-ai=y, train-genai=n"), [None, None, Some(false)]);
        // A yes under a dropped label grants only the purpose it named exactly.
        assert_eq!(
            say("ai-use=y, train-genai=y, ai-output=y"),
            [None, Some(true), None]
        );
        assert_eq!(say("ai-use=n, ai-use=y"), [None, Some(false), None]);
        let s = UsageStatement::parse("ai-output=n, ai-use=n, train-genai=n, search=y");
        let labels: Vec<(&str, &str)> = s.legacy().map(|l| (l.label, l.draft)).collect();
        assert_eq!(
            labels,
            [
                ("ai-use", "draft-ietf-aipref-vocab-02"),
                ("train-genai", "draft-ietf-aipref-vocab-04"),
                ("ai-output", "draft-ietf-aipref-vocab-04"),
            ]
        );
    }

    #[test]
    fn unknown_keys_are_ignored_and_the_last_duplicate_wins() {
        assert_eq!(say("future=y, bots=n"), [None, None, None]);
        assert_eq!(say("train-ai=n, train-ai=y"), [None, None, Some(true)]);
        assert_eq!(say("train-ai=n, train-ai=maybe"), [None, None, None]);
    }
}
