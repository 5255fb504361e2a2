//! Header rules shared by every step: which fields belong to one connection.

use http::header::{HeaderName, CONNECTION};
use http::HeaderMap;

/// Fields that belong to one connection and never cross a proxy or enter a
/// stored response (RFC 9110 §7.6.1, plus the old `Proxy-Connection`).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes hop-by-hop fields and every field named in `Connection` or
/// `Proxy-Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = [CONNECTION.as_str(), "proxy-connection"]
        .iter()
        .flat_map(|h| headers.get_all(*h).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for h in HOP_BY_HOP {
        headers.remove(*h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn hop_by_hop_and_connection_named_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, X-Secret"),
        );
        h.insert("proxy-connection", HeaderValue::from_static("X-Other"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("x-other", HeaderValue::from_static("1"));
        h.insert(
            "proxy-authorization",
            HeaderValue::from_static("Basic eA=="),
        );
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, vec!["x-keep"]);
    }
}
