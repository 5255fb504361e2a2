//! The request and response heads as [`http_cache_semantics`] and the store
//! are handed them.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use std::time::SystemTime;

use http::{request, response, Request, StatusCode};
use http_cache_semantics::{CacheOptions, CachePolicy};

use super::CacheKey;

/// The request as the library sees it: absolute normalised URI (so origin-form
/// and absolute-form requests, and entries read back after a restart, compare
/// equal), no `Host` (the URI has it; HTTP/2 has none), no hop-by-hop fields.
/// `Vary`-named fields are spelled as [`variant_key`](super::variant_key)
/// reads them, so the library's exact comparison agrees with the store's
/// selection. With `trim`, only the fields a stored policy needs are kept:
/// the `Vary`-named ones and the request's cache directives (nothing else of
/// a client's request is written to disk).
pub(super) fn canonical_request(
    req: &request::Parts,
    key: &CacheKey,
    vary: &[String],
    trim: bool,
) -> Option<request::Parts> {
    let uri = key.uri()?;
    let (mut parts, ()) = Request::builder()
        .method(req.method.clone())
        .uri(uri)
        .body(())
        .ok()?
        .into_parts();
    let mut headers = if trim {
        // Only what is kept is copied (a crawler's request carries a
        // dozen fields, each copy an allocation); `Connection` comes along
        // so that the strip still drops a kept field it names.
        copied_without_hop_by_hop(&req.headers, HeaderMap::new(), |name| {
            *name == header::CACHE_CONTROL
                || *name == header::PRAGMA
                || *name == header::CONNECTION
                || *name == crate::headers::PROXY_CONNECTION
                || vary.iter().any(|k| k == name.as_str())
        })
    } else {
        without_hop_by_hop(&req.headers)
    };
    headers.remove(header::HOST);
    for name in vary {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        let joined: Vec<&[u8]> = headers
            .get_all(&name)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .collect();
        if joined.is_empty() {
            continue;
        }
        let value = HeaderValue::from_bytes(&joined.join(&b","[..])).ok()?;
        headers.insert(name, value);
    }
    // Request directives are case-insensitive too (RFC 9111 §5.2).
    if headers.contains_key(header::CACHE_CONTROL) {
        let lines: Vec<HeaderValue> = headers
            .get_all(header::CACHE_CONTROL)
            .iter()
            .map(|v| lowered_directives(v).unwrap_or_else(|| v.clone()))
            .collect();
        headers.remove(header::CACHE_CONTROL);
        for line in lines {
            headers.append(header::CACHE_CONTROL, line);
        }
    }
    parts.headers = headers;
    Some(parts)
}

pub(super) fn response_head(status: StatusCode, headers: HeaderMap) -> response::Parts {
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = status;
    parts.headers = headers;
    parts
}

/// Connection-scoped fields never belong in a stored response or a replay.
///
/// The copy owns its values: a value hyper parsed is a slice of the
/// connection's read buffer, and a stored entry kept in memory would keep
/// that whole buffer alive (heaptrack: 64 MiB of resident entries held
/// over 500 MB of read buffers).
pub(super) fn without_hop_by_hop(headers: &HeaderMap) -> HeaderMap {
    copied_without_hop_by_hop(headers, HeaderMap::with_capacity(headers.len()), |_| true)
}

/// [`without_hop_by_hop`] of the fields `copy` picks, into `out`; only
/// those are copied.
fn copied_without_hop_by_hop(
    headers: &HeaderMap,
    mut out: HeaderMap,
    copy: impl Fn(&HeaderName) -> bool,
) -> HeaderMap {
    for (name, value) in headers {
        if copy(name) {
            out.append(name.clone(), owned(value));
        }
    }
    crate::strip_hop_by_hop(&mut out);
    out
}

/// A copy of `value` that owns its bytes (see [`without_hop_by_hop`]).
pub(super) fn owned(value: &HeaderValue) -> HeaderValue {
    let mut copy = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
    copy.set_sensitive(value.is_sensitive());
    copy
}

/// The response head as [`http_cache_semantics`] is handed it, where the
/// library reads fields otherwise than RFC 9111 / RFC 9110 have them
/// (checked against the public cache test suite):
/// - Cache-Control directive names are case-insensitive (RFC 9111 §5.2);
///   the library matches them as written, so `No-CaChE` was served fresh.
///   Names are lower-cased here, arguments kept.
/// - `Age` is delta-seconds; a list (one line or several) uses its first
///   member (RFC 9111 §5.1), where the library read `7200, 0` as no Age at
///   all. A first member that is not delta-seconds (`abc`, `-1`, `1.5`,
///   `7200;x=1`) is ignored, as §5.1 says ("a cache SHOULD ignore the
///   field"). One past 2^31 is 2^31 (§1.2.2 MUST), where the library read
///   one past 2^64 as 0.
/// - An `Expires` that is not an HTTP-date (RFC 9110 §5.6.7) means
///   already expired (RFC 9111 §5.3); the library's RFC 2822 parser took
///   some (extra spaces) as valid, and refused the RFC 850 and asctime
///   forms. It gets `0` (expired), or the date as IMF-fixdate.
///
/// The stored and forwarded headers are the origin's, untouched; only the
/// library's view changes. `None`: nothing to change.
pub(super) fn for_library(headers: &HeaderMap) -> Option<HeaderMap> {
    // Checked without a copy: most heads need none of this.
    let cc = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .any(|v| v.as_bytes().iter().any(u8::is_ascii_uppercase));
    let age = headers.get(header::AGE).is_some_and(|v| {
        let digits = v.as_bytes();
        headers.get_all(header::AGE).iter().count() > 1
            || digits.is_empty()
            || digits.len() > AGE_DIGITS
            || !digits.iter().all(u8::is_ascii_digit)
    });
    let expires = headers
        .get(header::EXPIRES)
        .map(imf_fixdate)
        .filter(|seen| headers.get(header::EXPIRES) != Some(seen));
    if !(cc || age || expires.is_some()) {
        return None;
    }
    let mut out = headers.clone();
    if cc {
        out.remove(header::CACHE_CONTROL);
        for v in headers.get_all(header::CACHE_CONTROL) {
            out.append(
                header::CACHE_CONTROL,
                lowered_directives(v).unwrap_or_else(|| v.clone()),
            );
        }
    }
    if let Some(first) = headers.get(header::AGE).filter(|_| age) {
        match read_age(first) {
            Some(seconds) => out.insert(header::AGE, seconds),
            None => out.remove(header::AGE),
        };
    }
    if let Some(expires) = expires {
        out.insert(header::EXPIRES, expires);
    }
    Some(out)
}

/// The Cache-Control line with directive names lower-cased; `None` if it is
/// not text.
fn lowered_directives(v: &HeaderValue) -> Option<HeaderValue> {
    let text = v.to_str().ok()?;
    let lowered: Vec<String> = text
        .split(',')
        .map(|d| match d.split_once('=') {
            Some((name, arg)) => format!("{}={arg}", name.to_ascii_lowercase()),
            None => d.to_ascii_lowercase(),
        })
        .collect();
    HeaderValue::from_str(&lowered.join(",")).ok()
}

/// Digits of the longest `Age` the library is handed as it is (below 2^31
/// has 10).
const AGE_DIGITS: usize = 10;

/// The first member of the first `Age` line as delta-seconds, at most 2^31;
/// `None` (ignore the field) when it is not delta-seconds.
fn read_age(v: &HeaderValue) -> Option<HeaderValue> {
    let first = v.as_bytes().split(|b| *b == b',').next().unwrap_or(b"");
    let first = first.trim_ascii();
    if first.is_empty() || !first.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let capped = std::str::from_utf8(first)
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|s| *s <= 1 << 31)
        .map_or_else(|| "2147483648".to_string(), |s| s.to_string());
    HeaderValue::from_str(&capped).ok()
}

/// An `Expires` as the library reads it: an HTTP-date in any of its three
/// forms (RFC 9110 §5.6.7) as IMF-fixdate, which its RFC 2822 parser
/// takes (it refused the obsolete RFC 850 and asctime forms), anything
/// else as `0`.
fn imf_fixdate(v: &HeaderValue) -> HeaderValue {
    v.to_str()
        .ok()
        .and_then(|t| httpdate::parse_http_date(t.trim()).ok())
        .and_then(|at| HeaderValue::from_str(&httpdate::fmt_http_date(at)).ok())
        .unwrap_or_else(|| HeaderValue::from_static("0"))
}

/// The library's policy for `head` as [`for_library`] shows it.
pub(super) fn policy_for(
    canonical: &request::Parts,
    head: &response::Parts,
    now: SystemTime,
    options: CacheOptions,
) -> CachePolicy {
    match for_library(&head.headers) {
        Some(headers) => {
            let seen = response_head(head.status, headers);
            CachePolicy::new_options(canonical, &seen, now, options)
        }
        None => CachePolicy::new_options(canonical, head, now, options),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(fields: &[(&str, &str)]) -> request::Parts {
        let mut b = Request::get("http://a.test/p");
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_trimmed_request_keeps_its_cache_directives_and_vary_fields_only() {
        let req = request(&[
            ("host", "a.test"),
            ("user-agent", "crawler/1"),
            ("accept", "text/html"),
            ("accept-language", "en, fr"),
            ("cache-control", "Max-Age=0"),
            ("pragma", "no-cache"),
            ("connection", "keep-alive"),
            ("te", "trailers"),
        ]);
        let key = CacheKey::new(&req.method, "http://a.test/p").unwrap();
        let vary = ["accept-language".to_string(), "te".to_string()];
        let out = canonical_request(&req, &key, &vary, true).unwrap();
        let mut names: Vec<_> = out.headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["accept-language", "cache-control", "pragma"]);
        assert_eq!(out.headers["cache-control"], "max-age=0");
        assert_eq!(out.headers["accept-language"], "en,fr");
        let whole = canonical_request(&req, &key, &vary, false).unwrap();
        assert!(whole.headers.contains_key("user-agent") && !whole.headers.contains_key("te"));
        assert!(!whole.headers.contains_key("host"));
    }

    #[test]
    fn a_kept_field_the_connection_names_is_dropped_when_trimmed() {
        let req = request(&[
            ("cache-control", "no-cache"),
            ("pragma", "no-cache"),
            ("proxy-connection", "pragma"),
            ("connection", "cache-control"),
        ]);
        let key = CacheKey::new(&req.method, "http://a.test/p").unwrap();
        let out = canonical_request(&req, &key, &[], true).unwrap();
        assert!(out.headers.is_empty(), "{:?}", out.headers);
    }
}
