//! Reading header fields, the same way for requests and responses.

use http::header::{HeaderMap, HeaderName};

/// Whether a `name` field lists `directive` (any case, argument ignored).
pub(super) fn has_directive(headers: &HeaderMap, name: HeaderName, directive: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.split('=').next().unwrap_or("").trim())
        .any(|d| d.eq_ignore_ascii_case(directive))
}

/// The first `name` field as trimmed text; `None` if absent, empty or not
/// text.
pub(super) fn text(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}
