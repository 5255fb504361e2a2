//! An origin's `Accept-Signature` (RFC 9421 §5.1), which Web Bot Auth -01
//! ("Requesting a Message Signature") lets it send to ask for a signature
//! with more components or a `nonce`; mnot/redbot#415 reads it on a 401,
//! a 403 or a 429, and so does [`challenge`]. The answer must still
//! satisfy the profile, so it always covers `@authority` and our
//! `Signature-Agent` member, carries `tag="web-bot-auth"`, our `keyid` and
//! `created`/`expires`.
//!
//! Read: the first member whose components we can all produce (the derived
//! `@method`, `@authority`, `@scheme`, `@target-uri`, `@path`, `@query`,
//! and request header fields without parameters, except our
//! `"signature-agent";key=…`), whose `tag` (if any) is `web-bot-auth`, and
//! whose `nonce` (if any) is a plain string. A member asking for anything
//! else (another tag, `sf`/`bs`/`req` parameters, response components) is
//! not one we can honour, and is skipped: a signature that does not cover
//! what was asked would be refused again.

use sfv::{BareItem, Dictionary, ListEntry, Parser};

/// What an origin asked a signature to carry.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct AskedSignature {
    /// Components beyond our two (`@method`, `"accept"`, …), lower-cased
    /// header names, in the order asked.
    pub components: Vec<String>,
    /// The `nonce` to include.
    pub nonce: Option<String>,
}

const DERIVED: [&str; 6] = [
    "@method",
    "@authority",
    "@scheme",
    "@target-uri",
    "@path",
    "@query",
];

/// `true` for what may stand in a Structured Field string unescaped.
pub(crate) fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// Why an `Accept-Signature` is not answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unmet {
    /// Not a Structured Field Dictionary of inner lists.
    #[error("malformed Accept-Signature ignored: {0}")]
    Malformed(String),
    /// Well formed, but every member asks for what we cannot sign.
    #[error("Accept-Signature asks for what we cannot sign (another tag, a component parameter, a response component)")]
    Cannot,
}

/// The statuses whose `Accept-Signature` gets a signed resend.
pub const CHALLENGE_STATUSES: [u16; 3] = [401, 403, 429];

/// What an origin's answer asks of our signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// Send the request once more, signed as asked.
    Resend(AskedSignature),
    /// Asked again after the one signed resend: the answer goes to the
    /// client as it came.
    AskedAgain,
    /// Not answered, and why (for the audit line); a 429 is still a
    /// throttle.
    PassOn(String),
}

/// What an answer with `status` and `Accept-Signature: field` asks of a
/// request that was already `asked` once or not, whose body can be sent
/// again or not: `None` when it asks nothing (no field, or a status not in
/// [`CHALLENGE_STATUSES`]). At most one signed resend per request, and none
/// when the body is gone (so never for an unsafe method whose body could
/// not be kept).
pub fn challenge(
    status: u16,
    field: Option<&[u8]>,
    replayable: bool,
    asked: bool,
) -> Option<Challenge> {
    if !CHALLENGE_STATUSES.contains(&status) {
        return None;
    }
    let field = field?;
    Some(if asked {
        Challenge::AskedAgain
    } else if !replayable {
        Challenge::PassOn(
            "Accept-Signature not answered: the request's body cannot be sent again".into(),
        )
    } else {
        match AskedSignature::read(field) {
            Ok(asked) => Challenge::Resend(asked),
            Err(why) => Challenge::PassOn(why.to_string()),
        }
    })
}

impl AskedSignature {
    /// The request in an `Accept-Signature` value, if one can be honoured.
    pub fn parse(value: &str) -> Option<AskedSignature> {
        AskedSignature::read(value.as_bytes()).ok()
    }

    /// The first member of an `Accept-Signature` value that can be
    /// honoured, or why none is.
    pub fn read(value: &[u8]) -> Result<AskedSignature, Unmet> {
        let text = std::str::from_utf8(value).map_err(|_| Unmet::Malformed("not ASCII".into()))?;
        let dict = Parser::new(text)
            .parse::<Dictionary>()
            .map_err(|e| Unmet::Malformed(e.to_string()))?;
        if dict.is_empty() {
            return Err(Unmet::Malformed("empty".into()));
        }
        if !dict.values().all(|e| matches!(e, ListEntry::InnerList(_))) {
            return Err(Unmet::Malformed(
                "a member is not an inner list of components".into(),
            ));
        }
        let found = dict.values().find_map(|entry| {
            let ListEntry::InnerList(list) = entry else {
                return None;
            };
            let mut asked = AskedSignature::default();
            for (key, v) in list.params.iter() {
                match (key.as_str(), v) {
                    ("tag", BareItem::String(t)) if t.as_str() != super::wire::TAG => return None,
                    ("nonce", BareItem::String(n)) if plain(n.as_str()) => {
                        asked.nonce = Some(n.as_str().to_string())
                    }
                    ("nonce", _) => return None,
                    _ => {}
                }
            }
            for item in &list.items {
                let BareItem::String(name) = &item.bare_item else {
                    return None;
                };
                let name = name.as_str().to_ascii_lowercase();
                let ours = name == "signature-agent";
                if ours || name == "@authority" {
                    continue; // covered anyway (our member, with our key)
                }
                let derived = DERIVED.contains(&name.as_str());
                let field = !name.starts_with('@') && plain(&name) && !name.contains(' ');
                if !item.params.is_empty() || !(derived || field) {
                    return None;
                }
                if !asked.components.contains(&name) {
                    asked.components.push(name);
                }
            }
            Some(asked)
        });
        found.ok_or(Unmet::Cannot)
    }
}

/// The value of one asked component for a request, or `None` when the
/// request has no such field (it cannot be covered, so it is not signed).
pub(crate) fn component_value(
    name: &str,
    method: &str,
    uri: &http::Uri,
    headers: &http::HeaderMap,
) -> Option<String> {
    let path = match uri.path() {
        "" => "/",
        p => p,
    };
    Some(match name {
        "@method" => method.to_ascii_uppercase(),
        "@scheme" => uri.scheme_str()?.to_ascii_lowercase(),
        "@target-uri" => uri.to_string(),
        "@path" => path.to_string(),
        "@query" => format!("?{}", uri.query().unwrap_or("")),
        field => {
            let values: Vec<&str> = headers
                .get_all(field)
                .iter()
                .map(|v| v.to_str().map(|s| s.trim_matches([' ', '\t'])))
                .collect::<Result<_, _>>()
                .ok()?;
            if values.is_empty() {
                return None;
            }
            values.join(", ")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_components_and_nonce_and_skips_what_cannot_be_honoured() {
        // RFC 9421 §5.1's example shape, with a nonce as -01 allows.
        let a = AskedSignature::parse(
            r#"sig1=("@method" "@target-uri" "@authority" "accept" "signature-agent");nonce="n-123";tag="web-bot-auth""#,
        )
        .unwrap();
        assert_eq!(a.components, ["@method", "@target-uri", "accept"]);
        assert_eq!(a.nonce.as_deref(), Some("n-123"));
        // Another tag, a component parameter, a response component: the
        // next member that can be honoured is taken, else none.
        assert_eq!(
            AskedSignature::parse(r#"x=("@method");tag="other", y=("@path")"#)
                .map(|a| a.components),
            Some(vec!["@path".to_string()])
        );
        assert_eq!(AskedSignature::parse(r#"x=("content-type";sf)"#), None);
        assert_eq!(AskedSignature::parse(r#"x=("@status")"#), None);
        assert_eq!(AskedSignature::parse(r#"x=("@method");nonce=:AAAA:"#), None);
        assert_eq!(AskedSignature::parse("not a dictionary ((("), None);
    }

    #[test]
    fn a_401_403_or_429_asks_once_and_a_malformed_field_is_ignored_with_its_reason() {
        let ask = Some(br#"sig1=("@method");nonce="n1""#.as_slice());
        for status in [401, 403, 429] {
            let Some(Challenge::Resend(a)) = challenge(status, ask, true, false) else {
                panic!("{status}: one signed resend");
            };
            assert_eq!(a.components, ["@method"]);
            assert_eq!(
                challenge(status, ask, true, true),
                Some(Challenge::AskedAgain)
            );
        }
        assert_eq!(challenge(404, ask, true, false), None);
        assert_eq!(challenge(200, ask, true, false), None);
        assert_eq!(challenge(403, None, true, false), None);
        let Some(Challenge::PassOn(why)) = challenge(403, ask, false, false) else {
            panic!("a body that is gone is not sent again");
        };
        assert!(why.contains("body cannot be sent again"), "{why}");
        for (field, says) in [
            (b"(((".as_slice(), "malformed Accept-Signature ignored"),
            (
                b"sig1=1",
                "malformed Accept-Signature ignored: a member is not an inner list",
            ),
            (b"", "malformed Accept-Signature ignored: empty"),
            (
                b"sig1=(\"@status\")",
                "Accept-Signature asks for what we cannot sign",
            ),
        ] {
            let Some(Challenge::PassOn(why)) = challenge(401, Some(field), true, false) else {
                panic!("{field:?}");
            };
            assert!(why.starts_with(says), "{why}");
        }
    }

    #[test]
    fn component_values_follow_rfc_9421() {
        let uri: http::Uri = "https://Example.com/a/b?x=1".parse().unwrap();
        let mut h = http::HeaderMap::new();
        h.append("accept", "text/html ".parse().unwrap());
        h.append("accept", " */*".parse().unwrap());
        let v = |n| component_value(n, "get", &uri, &h);
        assert_eq!(v("@method").as_deref(), Some("GET"));
        assert_eq!(v("@path").as_deref(), Some("/a/b"));
        assert_eq!(v("@query").as_deref(), Some("?x=1"));
        assert_eq!(v("@scheme").as_deref(), Some("https"));
        assert_eq!(v("accept").as_deref(), Some("text/html, */*"));
        assert_eq!(v("x-missing"), None);
    }
}
