//! The request and response heads as [`http_cache_semantics`] and the store
//! are handed them.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{request, response, Request, StatusCode};

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
    let mut headers = without_hop_by_hop(&req.headers);
    headers.remove(header::HOST);
    if trim {
        headers = headers
            .iter()
            .filter(|(name, _)| {
                *name == header::CACHE_CONTROL
                    || *name == header::PRAGMA
                    || vary.iter().any(|k| k == name.as_str())
            })
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
    }
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
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let mut owned = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
        owned.set_sensitive(value.is_sensitive());
        out.append(name.clone(), owned);
    }
    crate::strip_hop_by_hop(&mut out);
    out
}
