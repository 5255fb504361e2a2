//! Product tokens (RFC 9309 sec. 2.2.1: `[a-zA-Z_-]+`), shared by robots.txt
//! groups and page-level directives, and the namespaced selectors of
//! draft-kelley-rep-namespaces-00 that look like one and are none.

/// The prefix of a namespaced selector (`User-agent: __ns_label`): it names
/// a class of crawlers, never a product token, so a crawler that does not
/// read namespaces ignores it.
pub const NAMESPACE_PREFIX: &str = "__ns_";

/// Whether `c` may stand in a product token.
pub(crate) fn is_token_char(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == '-'
}

/// Whether `s` is a whole product token.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_token_char)
}

/// Whether a `User-agent` value or a token is a namespaced selector.
pub fn is_namespaced(token: &str) -> bool {
    token
        .get(..NAMESPACE_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(NAMESPACE_PREFIX))
}
