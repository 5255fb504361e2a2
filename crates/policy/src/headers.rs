//! Header rules shared by every step: which fields belong to one connection.

use http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, HOST, PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use http::HeaderMap;
use smallvec::SmallVec;

/// Made at compile time, so looking it up parses nothing.
pub(crate) const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Fields that belong to one connection and never cross a proxy or enter a
/// stored response (RFC 9110 §7.6.1, plus the old `Proxy-Connection`).
/// As `HeaderName`s: a standard name compares as a number, so a field is
/// matched against these without comparing its text.
static HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    PROXY_CONNECTION,
    HeaderName::from_static("keep-alive"),
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// Framing fields spelt with an underscore for the hyphen.
static FRAMING_LOOKALIKES: [HeaderName; 2] = [
    HeaderName::from_static("transfer_encoding"),
    HeaderName::from_static("content_length"),
];

/// The lengths of the names in [`HOP_BY_HOP`] and [`FRAMING_LOOKALIKES`],
/// a bit each (a test holds this to the lists).
const HOP_BY_HOP_LENGTHS: u32 =
    1 << 2 | 1 << 7 | 1 << 10 | 1 << 14 | 1 << 16 | 1 << 17 | 1 << 18 | 1 << 19;

/// Whether `name` can be in either list: most fields are ruled out by
/// their length, without eleven comparisons with the names (three header
/// maps a request are read through).
fn may_be_hop_by_hop(name: &HeaderName) -> bool {
    let len = name.as_str().len();
    len < 32 && HOP_BY_HOP_LENGTHS & (1 << len) != 0
}

/// Removes hop-by-hop fields and every field named in `Connection` or
/// `Proxy-Connection`.
///
/// One pass over the names present picks what goes: this runs on every
/// request and response, and removing each listed name by its string
/// parsed and hashed nine names each time (~2% of a proxied request).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for n in hop_by_hop_names(headers) {
        headers.remove(n);
    }
}

/// What a head strips: nearly always `Connection`, perhaps `Keep-Alive`,
/// so held inline; a heap `Vec` for them was two allocations a request.
pub(crate) type Doomed = SmallVec<[HeaderName; 4]>;

/// The names [`strip_hop_by_hop`] removes from `headers`: none, for a
/// reader that can then use them as they are rather than a stripped copy.
pub(crate) fn hop_by_hop_names(headers: &HeaderMap) -> Doomed {
    let mut doomed = Doomed::new();
    let (mut connection, mut proxy_connection) = (false, false);
    for name in headers.keys().filter(|n| may_be_hop_by_hop(n)) {
        // A framing field spelt with an underscore: a server that reads `_`
        // as `-` would frame by it, beside the real framing. (HTTP/1 heads
        // with one are refused at intake; this covers h2 and responses.)
        if FRAMING_LOOKALIKES.contains(name) {
            doomed.push(name.clone());
        } else if HOP_BY_HOP.contains(name) {
            connection |= name == CONNECTION;
            proxy_connection |= name == PROXY_CONNECTION;
            doomed.push(name.clone());
        }
    }
    for (h, present) in [
        (CONNECTION, connection),
        (PROXY_CONNECTION, proxy_connection),
    ] {
        if present {
            let values = headers
                .get_all(h)
                .iter()
                // The usual value, needing no split to see it names no
                // field but one already doomed.
                .filter(|v| !v.as_bytes().eq_ignore_ascii_case(b"keep-alive"))
                .filter_map(|v| v.to_str().ok());
            // Only names present are made HeaderNames: almost every
            // option named is `keep-alive` or `close`, and making one
            // (lower-cased, allocated) and removing it by hash cost more
            // than the rest of the strip. `keep-alive`, like any other
            // hop-by-hop name, needs no lookup: if present it is doomed
            // above.
            doomed.extend(
                values
                    .flat_map(|v| v.split(','))
                    .map(str::trim)
                    .filter(|n| !needs_no_lookup(n) && headers.contains_key(*n))
                    .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok()),
            );
        }
    }
    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and an
    // intermediary removes the Content-Length before passing it on (the
    // message is re-framed on the next hop; a forwarded length would cut
    // it short there).
    if headers.contains_key(TRANSFER_ENCODING) {
        doomed.push(CONTENT_LENGTH);
    }
    doomed
}

/// Sets the origin's `Host` to `authority`, whatever the client sent (RFC
/// 9112 §3.2.2): the client's own value is kept when it is the one field
/// and names the target already (nothing copied); otherwise one field with
/// `authority`. `None`: no `Host` at all, the caller's transport writes it
/// (over h2 `:authority` stands alone, RFC 9113 §8.3.1). An authority that
/// is no field value leaves none either.
pub fn set_origin_host(headers: &mut HeaderMap, authority: Option<&str>) {
    let Some(authority) = authority else {
        headers.remove(HOST);
        return;
    };
    let mut given = headers.get_all(HOST).iter();
    if matches!((given.next(), given.next()), (Some(one), None) if one == authority) {
        return;
    }
    match HeaderValue::from_str(authority) {
        Ok(host) => {
            headers.insert(HOST, host);
        }
        Err(_) => {
            headers.remove(HOST);
        }
    }
}

/// A `Connection` option that is a hop-by-hop name, in any case: the
/// field it names, if present, is doomed already.
fn needs_no_lookup(option: &str) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| option.eq_ignore_ascii_case(h.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn the_origins_host_names_the_target_in_one_field() {
        let with = |hosts: &[&str]| {
            let mut h = HeaderMap::new();
            for v in hosts {
                h.append(HOST, HeaderValue::from_str(v).unwrap());
            }
            h
        };
        let cases: [(&[&str], Option<&str>, &[&str]); 6] = [
            (&["example.org"], Some("example.org"), &["example.org"]),
            (&[], Some("example.org:8080"), &["example.org:8080"]),
            (&["other.example"], Some("example.org"), &["example.org"]),
            (&["Example.org"], Some("example.org"), &["example.org"]),
            (
                &["example.org", "example.org"],
                Some("example.org"),
                &["example.org"],
            ),
            (&["example.org"], None, &[]),
        ];
        for (sent, authority, want) in cases {
            let mut h = with(sent);
            set_origin_host(&mut h, authority);
            let got: Vec<_> = h.get_all(HOST).iter().collect();
            assert_eq!(got, want, "{sent:?} {authority:?}");
        }
        let mut h = with(&["example.org"]);
        set_origin_host(&mut h, Some("bad\nname"));
        assert!(!h.contains_key(HOST), "no field value: no Host");
    }

    /// The names left once `fields` are stripped, in their order.
    fn left_after(fields: &[(&'static str, &'static str)]) -> Vec<String> {
        let mut h = HeaderMap::new();
        for (name, value) in fields {
            h.insert(*name, HeaderValue::from_static(value));
        }
        strip_hop_by_hop(&mut h);
        h.keys().map(|k| k.as_str().to_string()).collect()
    }

    #[test]
    fn every_listed_name_passes_the_length_filter() {
        for name in HOP_BY_HOP.iter().chain(&FRAMING_LOOKALIKES) {
            assert!(may_be_hop_by_hop(name), "{name}");
        }
        assert!(!may_be_hop_by_hop(&http::header::SERVER));
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_go() {
        let left = left_after(&[
            ("connection", "keep-alive, X-Secret"),
            ("proxy-connection", "X-Other"),
            ("x-secret", "1"),
            ("x-other", "1"),
            ("proxy-authorization", "Basic eA=="),
            ("te", "trailers"),
            ("x-keep", "1"),
            ("transfer_encoding", "chunked"),
            ("content_length", "3"),
        ]);
        assert_eq!(left, vec!["x-keep"]);
    }

    #[test]
    fn options_are_matched_in_any_case_hop_by_hop_or_not() {
        let left = left_after(&[
            (
                "connection",
                "Keep-Alive, UPGRADE, Cache-Control, close, x-Gone",
            ),
            ("keep-alive", "timeout=5"),
            ("upgrade", "h2c"),
            ("cache-control", "max-age=1"),
            ("close", "1"),
            ("x-gone", "1"),
            ("x-keep", "1"),
        ]);
        assert_eq!(left, vec!["x-keep"]);
        // Named by no option: a hop-by-hop field goes all the same.
        let left = left_after(&[
            ("keep-alive", "timeout=5"),
            ("trailer", "x-sum"),
            ("x-keep", "1"),
        ]);
        assert_eq!(left, vec!["x-keep"]);
    }

    #[test]
    fn content_length_goes_with_transfer_encoding() {
        let mut h = HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("3"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        strip_hop_by_hop(&mut h);
        assert!(h.is_empty(), "{h:?}");
        let mut h = HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("3"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h["content-length"], "3");
    }

    #[test]
    fn a_whole_value_of_one_option_is_read_as_a_list_is() {
        for connection in ["keep-alive", "Keep-Alive", "close", "CLOSE"] {
            let mut left = left_after(&[
                ("connection", connection),
                ("keep-alive", "timeout=5"),
                ("close", "1"),
                ("x-keep", "1"),
            ]);
            // A removal may move the last field into its place.
            left.sort();
            let want: &[&str] = if connection.eq_ignore_ascii_case("close") {
                &["x-keep"]
            } else {
                // `close` was not named, so it is an ordinary field.
                &["close", "x-keep"]
            };
            assert_eq!(left, want, "Connection: {connection}");
        }
        // Only Proxy-Connection names an option.
        let left = left_after(&[
            ("proxy-connection", "x-gone"),
            ("x-gone", "1"),
            ("x-keep", "1"),
        ]);
        assert_eq!(left, vec!["x-keep"]);
        let left = left_after(&[
            ("host", "e.test"),
            ("x-connection", "x-keep"),
            ("x-keep", "1"),
        ]);
        assert_eq!(left, vec!["host", "x-connection", "x-keep"]);
    }
}
