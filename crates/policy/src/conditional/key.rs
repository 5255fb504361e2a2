//! Cache keys: which stored response a request may be answered from.

use http::{HeaderMap, Method, Uri};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::hex::digit;
use crate::url;

/// The primary cache key of a request: its method and normalised absolute URL,
/// as `"GET https://example.com/path?q"`.
///
/// Two spellings of one URL (`HTTP://Example.COM:80/%7euser` and
/// `http://example.com/~user`) give the same key, so a crawler that is
/// inconsistent about case or default ports still revalidates.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CacheKey(String);

/// Why a URL cannot be a cache key; such requests bypass the store.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not an absolute `http://` or `https://` URL with a host.
    #[error("not an absolute http(s) URL: {0}")]
    NotAbsolute(String),
}

impl CacheKey {
    /// Builds the key for `method` and `absolute_url` (what the client asked
    /// for, in absolute form also for intercepted HTTPS: `https://host/path`).
    ///
    /// Normalisation (RFC 3986 §6.2.2, the safe subset): scheme and host
    /// lower-cased, user info and fragment dropped, the scheme's default port
    /// removed, an empty path becomes `/`, percent-escapes upper-cased and
    /// escapes of unreserved characters decoded. Dot segments and query order
    /// are left alone: origins may treat them as different resources.
    pub fn new(method: &Method, absolute_url: &str) -> Result<Self, KeyError> {
        let mut key = String::with_capacity(method.as_str().len() + 1 + absolute_url.len());
        key.push_str(method.as_str());
        key.push(' ');
        normalise_url(absolute_url, &mut key)
            .ok_or_else(|| KeyError::NotAbsolute(truncate(absolute_url)))?;
        Ok(CacheKey(key))
    }

    /// The key of a request whose origin is known in normalised form
    /// already: `root` is `scheme://host[:port]/` as [`CacheKey::new`]
    /// writes it (scheme and host lower-case, no default port, no user
    /// info), and `path` and `query` are those of a parsed request URI.
    /// Gives what [`CacheKey::new`] gives for the whole URL, without
    /// parsing it again.
    pub fn under_root(method: &Method, root: &str, path: &str, query: Option<&str>) -> Self {
        let origin = root.strip_suffix('/').unwrap_or(root);
        let mut key = String::with_capacity(
            method.as_str().len() + 2 + origin.len() + path.len() + query.map_or(0, str::len),
        );
        key.push_str(method.as_str());
        key.push(' ');
        key.push_str(origin);
        push_path_and_query(path, query, &mut key);
        CacheKey(key)
    }

    /// The key as stored: `"<METHOD> <normalised URL>"`. Never contains `\n`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The normalised absolute URL part of the key.
    pub fn url(&self) -> &str {
        self.0.split_once(' ').map_or("", |(_, url)| url)
    }

    pub(crate) fn uri(&self) -> Option<Uri> {
        Uri::try_from(self.url()).ok()
    }
}

impl std::fmt::Display for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Shorthand for [`CacheKey::new`].
pub fn primary_key(method: &Method, absolute_url: &str) -> Result<CacheKey, KeyError> {
    CacheKey::new(method, absolute_url)
}

/// The field names a response's `Vary` nominates, lower-cased, sorted and
/// de-duplicated; `None` for `Vary: *`, which matches no later request.
pub fn vary_names(response_headers: &HeaderMap) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for value in response_headers.get_all(http::header::VARY) {
        // A Vary we cannot read is as good as `*`: we cannot tell which
        // requests the response is valid for.
        let value = value.to_str().ok()?;
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "*" {
                return None;
            }
            names.push(name.to_ascii_lowercase());
        }
    }
    names.sort();
    names.dedup();
    Some(names)
}

/// The secondary key: the primary key plus the request's values of the
/// header fields named by the stored response's `Vary`.
///
/// The result starts with `"<primary>\n"`, so every variant of one URL sorts
/// together and can be found by prefix. The header values are hashed to keep
/// keys short; whitespace around commas is ignored so `gzip, br` and
/// `gzip,br` share a variant.
pub fn variant_key(key: &CacheKey, vary: &[String], request_headers: &HeaderMap) -> String {
    if vary.is_empty() {
        let mut variant = String::with_capacity(key.as_str().len() + 1);
        variant.push_str(key.as_str());
        variant.push('\n');
        return variant;
    }
    let mut hasher = Sha256::new();
    for name in vary {
        hasher.update(name.as_bytes());
        let mut values = request_headers.get_all(name.as_str()).iter().peekable();
        if values.peek().is_none() {
            // Absent differs from present-but-empty.
            hasher.update([0u8]);
            continue;
        }
        hasher.update([1u8]);
        let mut first = true;
        for value in values {
            for part in value.as_bytes().split(|b| *b == b',') {
                if !first {
                    hasher.update([b',']);
                }
                first = false;
                hasher.update(part.trim_ascii());
            }
        }
        hasher.update([0u8]);
    }
    let digest = hasher.finalize();
    let mut out = String::with_capacity(key.as_str().len() + 1 + 64);
    out.push_str(key.as_str());
    out.push('\n');
    // One string for the digits, where `format!` made one per byte: most
    // sites send `Vary: Accept-Encoding`, so most stored pages have one.
    out.push_str(&crate::hex::hex(&digest));
    out
}

/// Whether `variant` is the [`variant_key`] of `key` for this request.
/// For a page without `Vary`, no key is built to compare.
pub fn is_variant(
    variant: &str,
    key: &CacheKey,
    vary: &[String],
    request_headers: &HeaderMap,
) -> bool {
    if vary.is_empty() {
        return variant.strip_suffix('\n') == Some(key.as_str());
    }
    variant == variant_key(key, vary, request_headers)
}

/// The prefix shared by every [`variant_key`] of `key`.
pub fn variant_prefix(key: &CacheKey) -> String {
    format!("{}\n", key.as_str())
}

/// Appends the normalised form of `input` to `out`; `None` when it is not
/// an absolute http(s) URL with a host.
fn normalise_url(input: &str, out: &mut String) -> Option<()> {
    let input = input.split('#').next().unwrap_or("");
    let (scheme, rest) = input.split_once("://")?;
    let (scheme, _) = url::known_scheme(scheme)?;
    // Parsed as written when the scheme is already lower-case, as it
    // almost always is: no copy made only to be parsed.
    let uri = if input.starts_with(scheme) {
        Uri::try_from(input)
    } else {
        Uri::try_from(format!("{scheme}://{rest}"))
    }
    .ok()?;
    let authority = uri.authority()?;
    let host = authority.host();
    if host.is_empty() {
        return None;
    }
    url::push_origin(out, scheme, host, authority.port_u16());
    push_path_and_query(uri.path(), uri.query(), out);
    Some(())
}

/// The path (`/` when empty) and the query of a key, escapes normalised:
/// the part [`CacheKey::new`] and [`CacheKey::under_root`] share.
fn push_path_and_query(path: &str, query: Option<&str>, out: &mut String) {
    if path.is_empty() {
        out.push('/');
    } else {
        normalise_escapes(path, out);
    }
    if let Some(query) = query {
        out.push('?');
        normalise_escapes(query, out);
    }
}

fn normalise_escapes(mut input: &str, out: &mut String) {
    // What comes before the first escape is copied as it is.
    match input.find('%') {
        Some(at) => {
            out.push_str(&input[..at]);
            input = &input[at..];
        }
        None => return out.push_str(input),
    }
    let bytes = input.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (digit(bytes[i + 1]), digit(bytes[i + 2])) {
                let decoded = hi << 4 | lo;
                if decoded.is_ascii_alphanumeric() || b"-._~".contains(&decoded) {
                    out.push(char::from(decoded));
                } else {
                    out.push('%');
                    out.push(char::from(b"0123456789ABCDEF"[usize::from(hi)]));
                    out.push(char::from(b"0123456789ABCDEF"[usize::from(lo)]));
                }
                i += 3;
                continue;
            }
        }
        // http::Uri only lets ASCII through, so byte-to-char is lossless.
        out.push(char::from(bytes[i]));
        i += 1;
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(url: &str) -> String {
        CacheKey::new(&Method::GET, url)
            .map(|k| k.0)
            .unwrap_or_default()
    }

    #[test]
    fn spellings_of_one_url_share_a_key() {
        let want = "GET http://example.com/~user/a%2Fb?q=%C3%A9";
        assert_eq!(
            key("HTTP://Example.COM:80/%7euser/a%2fb?q=%c3%a9#frag"),
            want
        );
        assert_eq!(
            key("http://user:pw@example.com/%7Euser/a%2Fb?q=%C3%A9"),
            want
        );
        assert_eq!(key("https://example.com:443"), "GET https://example.com/");
        assert_eq!(
            key("https://example.com:8443/x"),
            "GET https://example.com:8443/x"
        );
        assert_eq!(key("http://[::1]:8080/"), "GET http://[::1]:8080/");
        // A lower-case scheme is parsed as written; the rest is still
        // normalised after the first escape and before it.
        assert_eq!(
            key("http://Example.COM/a/b%2fc%41?x=1%7e#f"),
            "GET http://example.com/a/b%2FcA?x=1~"
        );
        assert_eq!(key("https://e.com/plain?q"), "GET https://e.com/plain?q");
    }

    #[test]
    fn a_key_under_a_normalised_root_is_the_key_of_the_whole_url() {
        // (root as a target writes it, the URL as a client may spell it)
        let cases = [
            (
                "http://example.com/",
                "HTTP://Example.COM:80/%7euser/a%2fb?q=%c3%a9",
            ),
            ("http://example.com/", "http://example.com"),
            ("http://example.com/", "http://example.com?q=1"),
            ("http://example.com/", "http://example.com/?"),
            ("https://example.com/", "https://example.com:443/x?y#f"),
            (
                "https://example.com:8443/",
                "https://EXAMPLE.com:8443/x%2f%41?%7e=%zz",
            ),
            ("http://[::1]:8080/", "http://[::1]:8080/a?b"),
            ("http://127.0.0.1:3128/", "http://127.0.0.1:3128/plain"),
            ("http://e.test/", "http://e.test/%"),
            ("http://e.test/", "http://e.test/a%4"),
        ];
        for method in [Method::GET, Method::HEAD] {
            for (root, url) in cases {
                let uri: Uri = url.parse().expect(url);
                let under = CacheKey::under_root(&method, root, uri.path(), uri.query());
                assert_eq!(Ok(under), CacheKey::new(&method, url), "{url}");
            }
        }
    }

    #[test]
    fn non_http_urls_are_not_keys() {
        for url in [
            "/relative",
            "ftp://example.com/",
            "example.com/x",
            "http:///x",
            "",
        ] {
            assert!(CacheKey::new(&Method::GET, url).is_err(), "{url}");
        }
    }

    #[test]
    fn vary_star_and_names() {
        let mut h = HeaderMap::new();
        h.append("vary", "Accept-Encoding, X-Foo".parse().unwrap());
        h.append("vary", "accept-encoding".parse().unwrap());
        assert_eq!(
            vary_names(&h),
            Some(vec!["accept-encoding".into(), "x-foo".into()])
        );
        h.append("vary", "*".parse().unwrap());
        assert_eq!(vary_names(&h), None);
    }

    #[test]
    fn variant_keys_follow_the_named_headers() {
        let k = CacheKey::new(&Method::GET, "http://e.com/").unwrap();
        let vary = vec!["accept-encoding".to_string()];
        let mut gzip = HeaderMap::new();
        gzip.insert("accept-encoding", "gzip, br".parse().unwrap());
        gzip.insert("user-agent", "a".parse().unwrap());
        let mut gzip2 = HeaderMap::new();
        gzip2.insert("accept-encoding", "gzip,br".parse().unwrap());
        let none = HeaderMap::new();
        let mut empty = HeaderMap::new();
        empty.insert("accept-encoding", "".parse().unwrap());
        let a = variant_key(&k, &vary, &gzip);
        assert_eq!(a, variant_key(&k, &vary, &gzip2));
        assert_ne!(a, variant_key(&k, &vary, &none));
        assert_ne!(
            variant_key(&k, &vary, &none),
            variant_key(&k, &vary, &empty)
        );
        assert!(a.starts_with(&variant_prefix(&k)));
        assert_eq!(variant_key(&k, &[], &gzip), variant_prefix(&k));
    }

    #[test]
    fn a_variant_key_is_spelt_as_the_stored_ones_are() {
        // Stored pages are found by these keys: the spelling must not move.
        let k = CacheKey::new(&Method::GET, "http://e.com/").unwrap();
        let mut gzip = HeaderMap::new();
        gzip.insert("accept-encoding", "gzip".parse().unwrap());
        let vary = vec!["accept-encoding".to_string()];
        assert_eq!(
            variant_key(&k, &vary, &gzip),
            "GET http://e.com/\n0d06a5afda8830391529ea23a687e88648cac96136e7c0a0413d30f8f49c1356"
        );
        assert_eq!(variant_key(&k, &[], &gzip), "GET http://e.com/\n");
    }

    #[test]
    fn is_variant_answers_as_comparing_the_keys_does() {
        let k = CacheKey::new(&Method::GET, "http://e.com/").unwrap();
        let other = CacheKey::new(&Method::GET, "http://e.com/x").unwrap();
        let mut gzip = HeaderMap::new();
        gzip.insert("accept-encoding", "gzip".parse().unwrap());
        let none = HeaderMap::new();
        let vary = ["accept-encoding".to_string()];
        for stored in [&k, &other] {
            for (names, at) in [(&[][..], &gzip), (&vary[..], &gzip), (&vary[..], &none)] {
                let variant = variant_key(stored, names, at);
                for (names, req) in [(&[][..], &gzip), (&vary[..], &gzip), (&vary[..], &none)] {
                    assert_eq!(
                        is_variant(&variant, &k, names, req),
                        variant == variant_key(&k, names, req),
                        "{variant:?} / {names:?}"
                    );
                }
            }
        }
        assert!(!is_variant("GET http://e.com/", &k, &[], &none));
        assert!(!is_variant("GET http://e.com/\n\n", &k, &[], &none));
    }
}
