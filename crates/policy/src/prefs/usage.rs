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
//! - a key written twice: the last one counts, as in any RFC 9651 dictionary.

use sfv::{BareItem, Dictionary, ListEntry, Parser};

use super::Purpose;

/// What one `Content-Usage` value says, per purpose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageStatement {
    values: [Option<bool>; 3],
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
                let Some(purpose) = Purpose::from_aipref_key(key.as_str()) else {
                    continue;
                };
                let value = match entry {
                    ListEntry::Item(item) => match item.bare_item {
                        BareItem::Token(t) if t.as_str() == "y" => Some(true),
                        BareItem::Token(t) if t.as_str() == "n" => Some(false),
                        _ => None,
                    },
                    ListEntry::InnerList(_) => None,
                };
                // A later member with a value nobody understands replaces
                // the earlier one, as the dictionary would.
                statement.values[purpose.index()] = value;
            }
        }
        statement
    }

    /// `Some(true)` for `y`, `Some(false)` for `n`, `None` when not stated.
    pub fn get(&self, purpose: Purpose) -> Option<bool> {
        self.values[purpose.index()]
    }

    /// Whether the statement says anything about any purpose.
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
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
    fn unknown_keys_are_ignored_and_the_last_duplicate_wins() {
        assert_eq!(
            say("train-genai=n, future=y, ai-use=y"),
            [None, Some(true), None]
        );
        assert_eq!(say("train-ai=n, train-ai=y"), [None, None, Some(true)]);
        assert_eq!(say("train-ai=n, train-ai=maybe"), [None, None, None]);
    }
}
