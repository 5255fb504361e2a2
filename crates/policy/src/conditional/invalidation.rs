//! [`invalidated_by`]: the stored pages an unsafe request's success makes
//! stale (RFC 9111 §4.4).

use http::header::{self, HeaderMap};
use http::{request, Method, StatusCode};

use super::{CacheKey, CacheParams};
use crate::url;

/// The keys whose stored pages must be removed after the origin answered
/// `req` (for `absolute_url`) with `status` and `headers`.
///
/// A cache MUST invalidate the target URI when an unsafe method (anything
/// but GET, HEAD, OPTIONS and TRACE) gets a non-error answer (2xx, 3xx),
/// and MAY invalidate the URIs in `Location` and `Content-Location`, but
/// not of another origin (RFC 9111 §4.4): a page on another site cannot be
/// made stale by an answer from this one. We take those of the same origin
/// too, as the public cache test suite asks.
pub fn invalidated_by(
    req: &request::Parts,
    absolute_url: &str,
    status: StatusCode,
    headers: &HeaderMap,
    params: &CacheParams,
) -> Vec<CacheKey> {
    let safe = [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE];
    let succeeded = status.is_success() || status.is_redirection();
    if !params.enabled || safe.contains(&req.method) || !succeeded {
        return Vec::new();
    }
    let Ok(target) = CacheKey::new(&Method::GET, absolute_url) else {
        return Vec::new();
    };
    let mut keys = vec![target.clone()];
    for name in [header::LOCATION, header::CONTENT_LOCATION] {
        let Some(reference) = headers.get(name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        let Some(key) = url::join_target(target.url(), reference.trim())
            .and_then(|url| CacheKey::new(&Method::GET, &url).ok())
        else {
            continue;
        };
        if url::origin(key.url()) == url::origin(target.url()) && !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(method: &str, status: u16, headers: &[(&str, &str)]) -> Vec<String> {
        let req = http::Request::builder()
            .method(method)
            .uri("http://a.test/dir/page?q=1")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let status = StatusCode::from_u16(status).unwrap();
        let url = "http://a.test/dir/page?q=1";
        invalidated_by(&req, url, status, &h, &CacheParams::default())
            .into_iter()
            .map(|k| k.url().to_string())
            .collect()
    }

    #[test]
    fn an_unsafe_methods_success_invalidates_the_target() {
        for method in ["POST", "PUT", "DELETE", "PATCH", "M-SEARCH"] {
            for status in [200, 204, 301, 303] {
                assert_eq!(keys(method, status, &[]), ["http://a.test/dir/page?q=1"]);
            }
            for status in [400, 404, 500, 503] {
                assert!(keys(method, status, &[]).is_empty(), "{method} {status}");
            }
        }
        for method in ["GET", "HEAD", "OPTIONS", "TRACE"] {
            assert!(keys(method, 200, &[]).is_empty(), "{method}");
        }
    }

    #[test]
    fn location_and_content_location_of_the_same_origin_too() {
        let got = keys(
            "POST",
            201,
            &[("location", "/new"), ("content-location", "other?x")],
        );
        assert_eq!(
            got,
            [
                "http://a.test/dir/page?q=1",
                "http://a.test/new",
                "http://a.test/dir/other?x"
            ]
        );
        let got = keys("PUT", 200, &[("location", "HTTP://A.test:80/abs")]);
        assert_eq!(got[1..], ["http://a.test/abs"]);
        // Resolved as RFC 3986 §5.2 has it, dot segments removed: the page a
        // client asks for next is keyed without them.
        let got = keys("PUT", 200, &[("location", "../up?v")]);
        assert_eq!(got[1..], ["http://a.test/up?v"]);
        for elsewhere in [
            "http://b.test/x",
            "https://a.test/x",
            "http://a.test:8080/x",
            "//b.test/x",
        ] {
            let got = keys("POST", 200, &[("location", elsewhere)]);
            assert_eq!(got.len(), 1, "{elsewhere}: {got:?}");
        }
    }
}
