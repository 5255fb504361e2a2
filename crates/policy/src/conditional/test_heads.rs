//! Hand-built heads for the unit tests of this module's steps (the
//! integration tests have theirs in `tests/support/heads.rs`).

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{request, response, StatusCode};

/// The URL every head here is for.
pub(super) const URL: &str = "https://example.com/page";

/// A header map with these lines, in order.
pub(super) fn head(headers: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

/// A GET of [`URL`] with these header lines.
pub(super) fn get(headers: &[(&str, &str)]) -> request::Parts {
    let (mut parts, ()) = http::Request::get(URL).body(()).unwrap().into_parts();
    parts.headers = head(headers);
    parts
}

/// A response head with this status and these header lines.
pub(super) fn response(status: u16, headers: &[(&str, &str)]) -> response::Parts {
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = StatusCode::from_u16(status).unwrap();
    parts.headers = head(headers);
    parts
}
