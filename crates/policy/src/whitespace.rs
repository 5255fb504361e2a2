//! Whitespace as robots.txt knows it (RFC 9309 sec. 2.2), and so the
//! usage-preference values written in it: space and tab, nothing else.
//!
//! Its own module because both `robots` (every line) and `prefs` (the
//! `Content-Signal` pairs, also read from response headers) split on it, and
//! `robots` already depends on `prefs`.

/// Whitespace in robots.txt (RFC 9309 sec. 2.2): space and tab, nothing else.
pub(crate) const WS: [char; 2] = [' ', '\t'];

/// `s` without leading and trailing spaces and tabs.
pub(crate) fn trim_ws(s: &str) -> &str {
    s.trim_matches(WS)
}
