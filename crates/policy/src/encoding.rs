//! Compression manners: a client that sends no `Accept-Encoding` would
//! have every page sent uncompressed, which costs the site its bandwidth.
//! The proxy asks for `gzip, br` on its behalf and undoes the coding for
//! it, so the client gets the same bytes an uncompressed answer carries;
//! what is stored is what the origin sent.

use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, ETAG, RANGE};
use http::{HeaderMap, HeaderValue};

/// What the proxy asks for on such a client's behalf.
pub const ASKED: &str = "gzip, br";

/// A content coding the proxy undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// `gzip` (RFC 9110 §8.4.1.3), `x-gzip` too.
    Gzip,
    /// `br` (RFC 7932).
    Br,
}

/// Whether to ask for compression for a request with these headers: the
/// client sent no `Accept-Encoding` (it takes identity only), and asks for
/// no range (a range of a compressed body cannot be decoded alone).
pub fn ask_for(client: &HeaderMap) -> bool {
    !client.contains_key(ACCEPT_ENCODING) && !client.contains_key(RANGE)
}

/// The header to add to such a request.
pub fn asked() -> (http::HeaderName, HeaderValue) {
    (ACCEPT_ENCODING, HeaderValue::from_static(ASKED))
}

/// The coding to undo in an answer (`status`, `headers`) to a request we
/// asked compression for: exactly one coding, one we asked for, on a whole
/// body. Anything else (`identity`, two codings, a 206) goes as it came.
pub fn to_decode(status: u16, headers: &HeaderMap) -> Option<Coding> {
    if status == 206 || status == 304 {
        return None;
    }
    let mut codings = headers.get_all(CONTENT_ENCODING).iter();
    let only = codings.next()?.to_str().ok()?.trim();
    if codings.next().is_some() || only.contains(',') {
        return None;
    }
    match only.to_ascii_lowercase().as_str() {
        "gzip" | "x-gzip" => Some(Coding::Gzip),
        "br" => Some(Coding::Br),
        _ => None,
    }
}

/// The head of a decoded answer: no `Content-Encoding`, no
/// `Content-Length` (the decoded length is known only at the end), and a
/// strong `ETag` made weak, since these bytes are another representation
/// than the one it names (RFC 9110 §8.8.3).
pub fn decoded_head(headers: &mut HeaderMap) {
    headers.remove(CONTENT_ENCODING);
    headers.remove(CONTENT_LENGTH);
    let strong = headers
        .get(ETAG)
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.starts_with('"'))
        .map(|v| format!("W/{v}"));
    if let Some(weak) = strong.and_then(|v| HeaderValue::from_str(&v).ok()) {
        headers.insert(ETAG, weak);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn only_a_client_without_accept_encoding_or_range_is_asked_for() {
        assert!(ask_for(&h(&[("user-agent", "curl/8")])));
        assert!(!ask_for(&h(&[("accept-encoding", "identity")])));
        assert!(!ask_for(&h(&[("accept-encoding", "")])));
        assert!(!ask_for(&h(&[("range", "bytes=0-9")])));
    }

    #[test]
    fn one_coding_we_asked_for_on_a_whole_body_is_undone() {
        assert_eq!(
            to_decode(200, &h(&[("content-encoding", "gzip")])),
            Some(Coding::Gzip)
        );
        assert_eq!(
            to_decode(404, &h(&[("content-encoding", "X-Gzip")])),
            Some(Coding::Gzip)
        );
        assert_eq!(
            to_decode(200, &h(&[("content-encoding", "br")])),
            Some(Coding::Br)
        );
        assert_eq!(to_decode(200, &h(&[])), None);
        assert_eq!(to_decode(206, &h(&[("content-encoding", "gzip")])), None);
        assert_eq!(to_decode(200, &h(&[("content-encoding", "zstd")])), None);
        assert_eq!(
            to_decode(200, &h(&[("content-encoding", "gzip, br")])),
            None
        );
        assert_eq!(
            to_decode(
                200,
                &h(&[("content-encoding", "gzip"), ("content-encoding", "br")])
            ),
            None
        );
        let mut head = h(&[
            ("content-encoding", "gzip"),
            ("content-length", "10"),
            ("etag", "\"a\""),
        ]);
        decoded_head(&mut head);
        assert_eq!(head, h(&[("etag", "W/\"a\"")]));
        let mut weak = h(&[("etag", "W/\"a\"")]);
        decoded_head(&mut weak);
        assert_eq!(weak, h(&[("etag", "W/\"a\"")]));
    }
}
