//! Where a request goes: scheme, host and port. The robots.txt scope is the
//! whole target; the budget key is its host.

use http::uri::PathAndQuery;
use http::Uri;
use mannerly_policy::url;

/// http or https.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub(crate) fn default_port(self) -> u16 {
        match self {
            Scheme::Http => url::HTTP_PORT,
            Scheme::Https => url::HTTPS_PORT,
        }
    }
}

/// Where a request goes: robots.txt scope and budget key derive from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// Scheme.
    pub(crate) scheme: Scheme,
    /// Lower-case host; IPv6 literals keep their brackets.
    pub(crate) host: String,
    /// Port (explicit or the scheme's default).
    pub(crate) port: u16,
    /// `scheme://authority/`, made once: the robots.txt cache and the
    /// request's URL ask for it on every request.
    root: String,
}

impl Target {
    /// The target of an absolute-form request URI; anything else is an error
    /// in plain words.
    pub(crate) fn from_absolute(uri: &Uri) -> Result<Target, String> {
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => Scheme::Http,
            Some(s) if s.eq_ignore_ascii_case("https") => Scheme::Https,
            Some(s) => return Err(format!("scheme {s:?} is not proxied (http and https are)")),
            None => {
                return Err(format!(
                    "{uri} is not a proxy request: send absolute-form (GET http://host/path) or use CONNECT"
                ))
            }
        };
        let authority = uri.authority().ok_or("request URI has no host")?;
        if authority.as_str().contains('@') {
            return Err("user info in the request URI is not accepted".into());
        }
        let host = authority.host().to_ascii_lowercase();
        if host.is_empty() {
            return Err("request URI has an empty host".into());
        }
        Ok(Target::new(
            scheme,
            host,
            authority.port_u16().unwrap_or(scheme.default_port()),
        ))
    }

    pub(crate) fn new(scheme: Scheme, host: String, port: u16) -> Target {
        // Built in place: this runs for every request, and two `format!`s
        // (the authority, then the root around it) were 1% of one.
        let mut root = String::with_capacity(scheme.as_str().len() + host.len() + 10);
        url::push_origin(&mut root, scheme.as_str(), &host, Some(port));
        root.push('/');
        Target {
            scheme,
            host,
            port,
            root,
        }
    }

    /// The same host and port under another scheme.
    pub(crate) fn with_scheme(self, scheme: Scheme) -> Target {
        Target::new(scheme, self.host, self.port)
    }

    /// `scheme://authority/`: the robots.txt scope.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// `host[:port]`, the port only when it is not the scheme's default.
    pub(crate) fn authority(&self) -> &str {
        &self.root[self.scheme.as_str().len() + "://".len()..self.root.len() - 1]
    }

    /// The absolute URL of `path` on this target.
    pub(crate) fn url(&self, path: Option<&PathAndQuery>) -> String {
        let Some(path) = path.map(PathAndQuery::as_str) else {
            return self.root.clone();
        };
        let origin = &self.root[..self.root.len() - 1];
        let mut url = String::with_capacity(origin.len() + path.len());
        url.push_str(origin);
        url.push_str(path);
        url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_authority_and_url_name_the_port_only_when_not_the_default() {
        let cases = [
            (
                "http://Example.TEST/a?b=1",
                "example.test",
                "http://example.test/",
            ),
            (
                "http://example.test:80/a?b=1",
                "example.test",
                "http://example.test/",
            ),
            (
                "http://example.test:8080/a?b=1",
                "example.test:8080",
                "http://example.test:8080/",
            ),
            (
                "https://example.test:443/a?b=1",
                "example.test",
                "https://example.test/",
            ),
            (
                "https://example.test:80/a?b=1",
                "example.test:80",
                "https://example.test:80/",
            ),
            (
                "http://[::1]:65535/a?b=1",
                "[::1]:65535",
                "http://[::1]:65535/",
            ),
            (
                "http://127.0.0.1:1/a?b=1",
                "127.0.0.1:1",
                "http://127.0.0.1:1/",
            ),
        ];
        for (uri, authority, root) in cases {
            let uri: Uri = uri.parse().unwrap();
            let t = Target::from_absolute(&uri).unwrap();
            assert_eq!(t.authority(), authority, "{uri}");
            assert_eq!(t.root(), root, "{uri}");
            assert_eq!(t.url(uri.path_and_query()), format!("{root}a?b=1"), "{uri}");
            assert_eq!(t.url(None), root, "{uri}");
        }
        let moved = Target::new(Scheme::Http, "h.test".into(), 443).with_scheme(Scheme::Https);
        assert_eq!(
            (moved.authority(), moved.root()),
            ("h.test", "https://h.test/")
        );
    }

    /// The pipeline keys the store under the target's root
    /// (`CacheKey::under_root`), which holds only if the root is written as
    /// the key normalises a URL.
    #[test]
    fn the_root_is_the_origin_a_cache_key_is_normalised_to() {
        use http::Method;
        use mannerly_policy::conditional::CacheKey;
        for url in [
            "http://Example.TEST/a%7e?b=%2f",
            "http://example.test:80",
            "https://EXAMPLE.test:443/x?",
            "https://example.test:8443/x",
            "http://[::1]:8080/a?b",
            "http://[::1]:80/",
            "http://127.0.0.1:3128/plain?q",
        ] {
            let uri: Uri = url.parse().unwrap();
            let t = Target::from_absolute(&uri).unwrap();
            let under = CacheKey::under_root(&Method::GET, t.root(), uri.path(), uri.query());
            assert_eq!(Ok(under), CacheKey::new(&Method::GET, url), "{url}");
        }
    }
}
